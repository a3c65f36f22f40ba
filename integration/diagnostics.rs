//! Label problems against a real engine: a container whose labels carry a
//! typo is diagnosed by `dockhand check --docker` (exit 1, the key meant
//! suggested) until it is replaced by a fixed one (exit 0).

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

    typo.remove();
    let fixed = web("dockhand.port");
    let output = check_docker(&[]);
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(!printed.contains(&fixed.name), "{printed}");
    assert!(printed.contains("0 errors"), "{printed}");
}
