//! dockhand's swarm mode against a real one-node swarm manager (the suite's
//! second engine): services labelled `dockhand.host` are served through
//! dockhand in a container on the service's overlay network, followed as
//! they scale and go, by their tasks' addresses or by their virtual IP; and
//! the mode is detected on a manager, where plain containers are served too;
//! rolling updates of either order lose no request under a request loop.
//! The README's stack example is deployed there as well.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::swarm_support::*;

/// The swarm engine answers as a manager, and a service's tasks answer at
/// their addresses on an attachable overlay, from a plain container there:
/// what tasks mode stands on, checked without dockhand.
#[test]
fn the_swarm_engine_runs_tasks_reachable_on_an_attachable_overlay() {
    let Some(run) = swarm_run("swarm-engine") else {
        return;
    };
    let manager = SWARM.docker(["info", "--format", "{{.Swarm.ControlAvailable}}"]);
    assert_eq!(manager, "true", "the swarm engine is no manager");
    let network = run.overlay_network("net");
    let service = run.service("app").replicas(2).network(&network).create();
    for task in service.wait_for_tasks(2) {
        let url = format!(
            "http://{}:{BACKEND_PORT}/",
            SWARM.container_ip(&task, &network.name)
        );
        let probe = run
            .container(&format!("probe-{task}"), &backend_image())
            .option("--no-healthcheck")
            .network(&network)
            .args(&["probe", &url])
            .run();
        let exit_code = wait_until_ok(&format!("the probe of {url} to finish"), || {
            match probe.state().as_str() {
                "exited" => Ok(probe.inspect("{{.State.ExitCode}}")),
                state => Err(state.to_owned()),
            }
        });
        assert_eq!(exit_code, "0", "{url} did not answer: {}", probe.logs());
    }
}

/// dockhand in a container on the swarm engine, on `network`, in `mode`.
fn dockhand_in_mode(run: &TestRun, network: &Network, mode: &str) -> DockhandInContainer {
    run.dockhand_in_container("dockhand", network, &["--docker-mode", mode])
}

/// How soon a change of a service must show in what dockhand serves: two of
/// its 5 s re-lists, though events make it sooner.
const FOLLOW_LIMIT: Duration = Duration::from_secs(10);

/// The `x-hostname`s (the backend's hostname: its task's short container id)
/// that answered `host` in `requests` requests, or the first answer that was
/// not a 200 with one.
fn answering(addr: SocketAddr, host: &str, requests: usize) -> Result<BTreeSet<String>, String> {
    (0..requests)
        .map(|_| {
            let response = http_get(addr, host, "/").map_err(|e| e.to_string())?;
            match (response.status, response.header("x-hostname")) {
                (200, Some(hostname)) => Ok(hostname.to_owned()),
                (status, _) => Err(format!("{status} {}", response.text())),
            }
        })
        .collect()
}

/// Waits up to [`FOLLOW_LIMIT`] until exactly `tasks` answer `host`.
#[track_caller]
fn wait_until_answered_by(addr: SocketAddr, host: &str, tasks: &BTreeSet<String>) {
    // Tasks take turns: six requests see each of two unless one is left out.
    let what = format!("{host} to be answered by {tasks:?}");
    wait_until_within(FOLLOW_LIMIT, &what, || {
        let seen = answering(addr, host, 6)?;
        if &seen == tasks {
            Ok(())
        } else {
            Err(format!("answered by {seen:?}"))
        }
    });
}

#[test]
fn a_labelled_service_is_served_in_swarm_mode() {
    let Some(run) = swarm_run("swarm-served") else {
        return;
    };
    let network = run.overlay_network("net");
    let host = run.host("app");
    // No dockhand.port: the image exposes one port, 8080.
    let service = run
        .service("app")
        .label("dockhand.host", &host)
        .network(&network)
        .create();
    let tasks = service.wait_for_tasks(1);
    let dockhand = dockhand_in_mode(&run, &network, "swarm");

    let response = wait_for_200(dockhand.addr, &host, "/hello");
    assert!(tasks.contains(&answered_by(&response)), "{tasks:?}");
    assert_eq!(
        response.header("x-hostname"),
        Some(answered_by(&response).as_str())
    );
    assert_eq!(response.json()["path"], "/hello");
}

#[test]
fn scaling_a_service_adds_and_removes_its_tasks() {
    let Some(run) = swarm_run("swarm-scale") else {
        return;
    };
    let network = run.overlay_network("net");
    let host = run.host("app");
    let service = routed_service(&run, "app", &host, &network).create();
    service.wait_for_tasks(1);
    let dockhand = dockhand_in_mode(&run, &network, "swarm");
    wait_for_200(dockhand.addr, &host, "/");

    service.scale(2);
    let started = Instant::now();
    let both = service.wait_for_tasks(2);
    wait_until_answered_by(dockhand.addr, &host, &both);
    record_figure(&format!(
        "swarm: scaled 1 -> 2, both tasks answer after {:?}",
        started.elapsed()
    ));

    service.scale(1);
    let left = service.wait_for_tasks(1);
    assert!(left.is_subset(&both), "{left:?} is not one of {both:?}");
    wait_until_answered_by(dockhand.addr, &host, &left);
}

/// With `dockhand.swarm.upstream=vip`, the service's one upstream address is
/// its virtual IP on the shared network (Docker balances behind it). The
/// traffic itself is checked only where the kernel has IPVS, which Docker's
/// virtual IPs need; without it they answer nothing.
#[test]
fn a_service_with_upstream_vip_is_served_through_its_virtual_ip() {
    let Some(run) = swarm_run("swarm-vip") else {
        return;
    };
    let network = run.overlay_network("net");
    let host = run.host("app");
    let service = routed_service(&run, "app", &host, &network)
        .replicas(2)
        .label("dockhand.swarm.upstream", "vip")
        .create();
    let tasks = service.wait_for_tasks(2);
    const TOKEN: &str = "swarm-vip-test-token";
    let dockhand = run.dockhand_in_container_with(
        "dockhand",
        &network,
        &[
            "--docker-mode",
            "swarm",
            "--admin-listen",
            "0.0.0.0:8081",
            "--admin-token",
            TOKEN,
        ],
        |spec| spec.publish(8081),
    );
    let admin = wait_until_ok("the admin API's published port", || {
        dockhand.container.published(8081)
    });

    let vip = SocketAddr::new(service.virtual_ip(&network), 8080);
    let addresses = wait_until_ok("the host's upstream to be the virtual IP", || {
        let addresses = upstream_addresses(admin, TOKEN, &host)?;
        if addresses == [vip.to_string()] {
            Ok(addresses)
        } else {
            Err(format!("{addresses:?}, not [{vip}]"))
        }
    });
    assert_eq!(addresses.len(), 1);

    if !Path::new("/proc/net/ip_vs").exists() {
        eprintln!("VIP traffic not checked: this kernel has no IPVS, so {vip} answers nothing");
        return;
    }
    let response = wait_for_200(dockhand.addr, &host, "/");
    assert!(tasks.contains(&answered_by(&response)), "{tasks:?}");
}

/// Every upstream address the admin API shows for `host`.
fn upstream_addresses(admin: SocketAddr, token: &str, host: &str) -> Result<Vec<String>, String> {
    let view = admin_json(admin, token, &format!("/api/v1/hosts/{host}"))?;
    let upstreams = view["location"]["/"]["upstream"]
        .as_object()
        .ok_or_else(|| format!("no upstreams in {view}"))?;
    Ok(upstreams
        .values()
        .flat_map(|upstream| {
            upstream["addresses"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|address| address["address"].as_str().map(str::to_owned))
        .collect())
}

#[test]
fn a_removed_service_is_no_longer_served() {
    let Some(run) = swarm_run("swarm-removed") else {
        return;
    };
    let network = run.overlay_network("net");
    let host = run.host("app");
    let service = routed_service(&run, "app", &host, &network).create();
    service.wait_for_tasks(1);
    // --upstream-wait is the grace a vanished host keeps its route for.
    let dockhand = run.dockhand_in_container(
        "dockhand",
        &network,
        &["--docker-mode", "swarm", "--upstream-wait", "1s"],
    );
    wait_for_200(dockhand.addr, &host, "/");

    service.remove();
    wait_until_within(FOLLOW_LIMIT, "404 for the removed service's host", || {
        let response = http_get(dockhand.addr, &host, "/").map_err(|e| e.to_string())?;
        match response.status {
            404 => Ok(()),
            status => Err(format!("{status} {}", response.text())),
        }
    });
}

/// The mode dockhand logged at start (`docker mode`, field `mode`).
fn logged_mode(log: &str) -> Option<String> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|event| {
            event["message"]
                .as_str()
                .is_some_and(|message| message.starts_with("docker mode"))
        })
        .and_then(|event| event["mode"].as_str().map(str::to_owned))
}

#[test]
fn on_a_manager_both_services_and_containers_are_served_by_default() {
    let Some(run) = swarm_run("swarm-both") else {
        return;
    };
    let network = run.overlay_network("net");
    let (service_host, container_host) = (run.host("service"), run.host("container"));
    let service = routed_service(&run, "service", &service_host, &network).create();
    let tasks = service.wait_for_tasks(1);
    let container = routed_backend(&run, "container", &container_host, &network).run();
    let dockhand = run.dockhand_in_container("dockhand", &network, &[]);

    let log = dockhand.wait_for_log("docker mode");
    assert_eq!(logged_mode(&log).as_deref(), Some("both"), "{log}");
    let response = wait_for_200(dockhand.addr, &service_host, "/");
    assert!(tasks.contains(&answered_by(&response)), "{tasks:?}");
    assert_answered_by(dockhand.addr, &container_host, &container);
}

/// The README's swarm example, `docker stack deploy -c
/// examples/swarm/stack.yaml`, with the suite's images: dockhand (a global
/// service, its port published in host mode) serves the demo service's two
/// tasks in turn.
#[test]
fn the_stack_example_answers_through_dockhand() {
    let Some(run) = swarm_run("swarm-stack") else {
        return;
    };
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/swarm/stack.yaml");
    let (http_port, https_port) = (free_port(), free_port());
    let (dockhand_image, demo_image) = (dockhand_image(), backend_image());
    let socket = SWARM
        .socket_path()
        .expect("the swarm engine on a unix socket");
    let stack = run.stack_deploy(
        &file,
        &[
            ("DOCKHAND_IMAGE", dockhand_image.as_str()),
            ("DEMO_IMAGE", demo_image.as_str()),
            ("DEMO_PORT", &BACKEND_PORT.to_string()),
            ("DOCKHAND_HTTP_PORT", &http_port.to_string()),
            ("DOCKHAND_HTTPS_PORT", &https_port.to_string()),
            ("DOCKER_SOCKET", &socket.to_string_lossy()),
        ],
    );
    let addr = SocketAddr::from(([127, 0, 0, 1], http_port));
    let demo = stack.wait_for_tasks("whoami", 2);
    wait_until_ok("dockhand's published port to answer", || {
        http_get(addr, "ready.invalid", "/")
    });
    wait_until_answered_by(addr, "whoami.localhost", &demo);
}

/// The most requests a rolling update is watched with: the loop ends once
/// the update is over and the new tasks answer, long before (about 1,000
/// requests a second here).
const UPDATE_REQUESTS: usize = 200_000;

/// What a request loop saw: how many requests, those that failed, the slowest.
struct LoopOutcome {
    sent: usize,
    failed: Vec<String>,
    slowest: Duration,
}

/// Sends requests for `host` one after another, each on a new connection,
/// until `stop` is set or [`UPDATE_REQUESTS`] are sent.
fn request_loop(
    addr: SocketAddr,
    host: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<LoopOutcome> {
    std::thread::spawn(move || {
        let mut outcome = LoopOutcome {
            sent: 0,
            failed: Vec::new(),
            slowest: Duration::ZERO,
        };
        while !stop.load(Ordering::SeqCst) && outcome.sent < UPDATE_REQUESTS {
            let started = Instant::now();
            match http_get(addr, &host, "/") {
                Ok(response) if response.status == 200 => {}
                Ok(response) => {
                    outcome
                        .failed
                        .push(format!("{} {}", response.status, response.text()))
                }
                Err(error) => outcome.failed.push(error.to_string()),
            }
            outcome.slowest = outcome.slowest.max(started.elapsed());
            outcome.sent += 1;
        }
        outcome
    })
}

/// `docker service update --force` of a service of two tasks, in `order`,
/// while requests keep coming: every task is replaced, and no request fails.
fn a_rolling_update_loses_no_request(order: &str) {
    let Some(run) = swarm_run(&format!("swarm-update-{order}")) else {
        return;
    };
    let network = run.overlay_network("net");
    let host = run.host("app");
    let service = routed_service(&run, "app", &host, &network)
        .replicas(2)
        .create();
    let before = service.wait_for_tasks(2);
    let dockhand = dockhand_in_mode(&run, &network, "swarm");
    wait_until_answered_by(dockhand.addr, &host, &before);

    let stop = Arc::new(AtomicBool::new(false));
    let requests = request_loop(dockhand.addr, host.clone(), stop.clone());
    let started = Instant::now();
    service.update_force(order);
    let updated_in = started.elapsed();
    let after = service.wait_for_tasks(2);
    assert!(
        after.is_disjoint(&before),
        "{before:?} not all replaced: {after:?}"
    );
    wait_until_answered_by(dockhand.addr, &host, &after);
    stop.store(true, Ordering::SeqCst);
    let outcome = requests.join().expect("the request loop");

    record_figure(&format!(
        "swarm: rolling update ({order}, 2 tasks) over {updated_in:.1?}: {} requests, {} failed, slowest {:?}",
        outcome.sent,
        outcome.failed.len(),
        outcome.slowest
    ));
    assert!(
        outcome.sent < UPDATE_REQUESTS,
        "the loop ended before the update did"
    );
    assert!(
        outcome.failed.is_empty(),
        "{} of {} requests failed during the {order} update, first: {:?}",
        outcome.failed.len(),
        outcome.sent,
        outcome.failed.first()
    );
}

#[test]
fn a_stop_first_rolling_update_loses_no_request() {
    a_rolling_update_loses_no_request("stop-first");
}

#[test]
fn a_start_first_rolling_update_loses_no_request() {
    a_rolling_update_loses_no_request("start-first");
}
