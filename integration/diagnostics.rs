//! Label problems against a real engine: a container whose labels carry a
//! typo is diagnosed, by `dockhand check --docker` (exit 1, the key meant
//! suggested) and in a running dockhand's `GET /api/v1/diagnostics`, until
//! it is replaced by a fixed one (exit 0, and gone from the API).

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::*;

/// `dockhand check --docker ARGS` on the host, at the suite's engine (`DOCKER_HOST`).
fn check_docker(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dockhand"));
    command.args(["check", "--docker"]).args(args);
    output_within(command, Duration::from_secs(60)).expect("dockhand check runs")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The diagnostics a running dockhand's admin API lists now, of `container`.
fn api_diagnostics(dockhand: &DockhandOnHost, container: &str) -> Vec<serde_json::Value> {
    let response = http_get(dockhand.admin_addr, "localhost", "/api/v1/diagnostics")
        .expect("the admin API answers");
    assert_eq!(response.status, 200, "{}", response.text());
    let document = response.json();
    let listed = document["diagnostics"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    listed
        .into_iter()
        .filter(|diagnostic| diagnostic["container"]["name"] == container)
        .collect()
}

#[test]
fn check_docker_fails_on_a_label_typo_until_the_container_is_fixed() {
    // Alone on the engine: check reads every container, and other tests'
    // containers carry label errors on purpose.
    let run = TestRun::exclusive("check-typo");
    let network = run.network("net");
    let host = run.host("web");
    // Two exposed ports and `port` misspelt: which one is meant is unknown.
    let web = |port_label: &str| {
        routed_backend(&run, "web", &host, &network)
            .option("--expose=9090")
            .label(port_label, &BACKEND_PORT.to_string())
            .run()
    };
    let dockhand = DockhandOnHost::start(&[]);
    let typo = web("dockhand.prot");

    let output = check_docker(&[]);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let name = &typo.name;
    assert!(
        printed.contains(&format!(
            "warning: container \"{name}\": label dockhand.prot: unknown key, ignored (did you mean `dockhand.port`?)"
        )),
        "{printed}"
    );
    assert!(
        printed.contains(&format!(
            "error: container \"{name}\": label dockhand.port: the container exposes several ports (8080, 9090)"
        )),
        "{printed}"
    );
    let output = check_docker(&["--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let document: serde_json::Value =
        serde_json::from_str(&text(&output)).expect("one JSON document");
    let diagnostics = document["diagnostics"].as_array().unwrap();
    let typo_diagnostic = diagnostics
        .iter()
        .find(|d| d["key"] == "dockhand.prot")
        .unwrap_or_else(|| panic!("{document}"));
    assert_eq!(typo_diagnostic["container"]["name"], name.as_str());
    assert_eq!(typo_diagnostic["container"]["id"], typo.id.as_str());
    assert_eq!(typo_diagnostic["value"], "8080");
    assert_eq!(typo_diagnostic["suggestion"], "dockhand.port");
    assert_eq!(typo_diagnostic["severity"], "warning");

    // The running dockhand says the same, in the same form.
    let served = wait_until("the typo in GET /api/v1/diagnostics", || {
        let listed = api_diagnostics(&dockhand, name);
        let found = listed.iter().find(|d| d["key"] == "dockhand.prot").cloned();
        found.map(|typo| (typo, listed))
    });
    let (served_typo, listed) = served;
    assert_eq!(&served_typo, typo_diagnostic, "the API and check agree");
    assert!(
        listed
            .iter()
            .any(|d| d["key"] == "dockhand.port" && d["severity"] == "error"),
        "{listed:?}"
    );

    typo.remove();
    let fixed = web("dockhand.port");
    let output = check_docker(&[]);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!printed.contains(&fixed.name), "{printed}");
    assert!(printed.contains("0 errors"), "{printed}");
    wait_until("the fixed container's problems gone from the API", || {
        api_diagnostics(&dockhand, &fixed.name)
            .is_empty()
            .then_some(())
    });
    let response = wait_for_200(dockhand.addr, &host, "/");
    assert_eq!(
        answered_by(&response),
        fixed.name,
        "served on the port meant"
    );
}
