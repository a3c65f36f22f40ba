//! The test backend in containers, and the harness around it: what every
//! dockhand scenario stands on. Each test fails when the image, the engine's
//! networking, health checking or the harness's cleanup is broken.

use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

#[test]
fn a_backend_answers_with_its_hostname_on_its_network_address() {
    let run = TestRun::new("backend-answers");
    let network = run.network("net");
    let backend = run.backend("app").network(&network).run();
    let addr = backend.addr(&network, BACKEND_PORT);

    let response = wait_until_ok("the backend to answer on its address", || {
        http_get(addr, "app.example", "/some/path?x=1&y=2")
    });
    assert_eq!(response.status, 200);
    assert_eq!(response.header("x-hostname"), Some(backend.name.as_str()));
    let body = response.json();
    assert_eq!(body["hostname"], backend.name.as_str());
    assert_eq!(body["method"], "GET");
    assert_eq!(body["path"], "/some/path");
    assert_eq!(body["query"], "x=1&y=2");
    assert_eq!(body["headers"]["host"], "app.example");

    let posted =
        http_request(addr, "POST", "app.example", "/p", &[("X-Test", "1")], b"hi").unwrap();
    assert_eq!(posted.json()["method"], "POST");
    assert_eq!(posted.json()["headers"]["x-test"], "1");

    let teapot = http_get(addr, "app.example", "/status/418").unwrap();
    assert_eq!(teapot.status, 418);
    assert_eq!(teapot.json()["hostname"], backend.name.as_str());

    let started = Instant::now();
    let delayed = http_get(addr, "app.example", "/delay/300").unwrap();
    assert_eq!(delayed.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));

    let started = Instant::now();
    let events = http_get(addr, "app.example", "/stream/3").unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(events.header("content-type"), Some("text/event-stream"));
    assert_eq!(events.text(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
}

#[test]
fn replicas_on_two_networks_answer_each_with_its_own_name() {
    let run = TestRun::new("backend-two-networks");
    let front = run.network("front");
    let back = run.network("back");
    let one = run.backend("one").network(&front).network(&back).run();
    let two = run.backend("two").network(&back).run();

    for (backend, network) in [(&one, &front), (&one, &back), (&two, &back)] {
        let addr = backend.addr(network, BACKEND_PORT);
        let response = wait_until_ok(&format!("{} on {}", backend.name, network.name), || {
            http_get(addr, "x", "/")
        });
        assert_eq!(response.json()["hostname"], backend.name.as_str());
    }
    assert_ne!(one.ip(&front), one.ip(&back));
    assert!(
        std::panic::catch_unwind(|| two.ip(&front)).is_err(),
        "two is not on front"
    );
}

#[test]
fn the_healthcheck_goes_from_starting_to_healthy_and_a_failing_one_to_unhealthy() {
    let run = TestRun::new("backend-health");
    let network = run.network("net");
    let started = Instant::now();
    // Failures in the start period don't count: `starting` until the first success.
    let slow = run
        .backend("slow")
        .network(&network)
        .env("UNHEALTHY_FOR_MS", "3000")
        .healthcheck("200ms")
        .option("--health-start-period=15s")
        .run();
    let sick = run
        .backend("sick")
        .network(&network)
        .env("UNHEALTHY_FOR_MS", "600000")
        .healthcheck("200ms")
        .run();
    assert_eq!(slow.health(), "starting");

    let addr = slow.addr(&network, BACKEND_PORT);
    let early = wait_until_ok("/healthz to answer", || http_get(addr, "x", "/healthz"));
    assert_eq!(early.status, 503, "unhealthy for its first 3 s");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(slow.health(), "starting");

    wait_until("slow to turn healthy", || {
        (slow.health() == "healthy").then_some(())
    });
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(http_get(addr, "x", "/healthz").unwrap().status, 200);

    wait_until("sick to turn unhealthy", || {
        (sick.health() == "unhealthy").then_some(())
    });
    let last_probe = sick.inspect("{{json .State.Health.Log}}");
    assert!(last_probe.contains("answered 503"), "{last_probe}");
}

#[test]
fn the_websocket_echoes() {
    let run = TestRun::new("backend-websocket");
    let network = run.network("net");
    let backend = run.backend("ws").network(&network).run();
    let addr = backend.addr(&network, BACKEND_PORT);

    let mut socket = wait_until_ok("the websocket handshake", || {
        websocket(addr, "ws.example", "/ws")
    });
    socket.send(Message::text("hello")).unwrap();
    assert_eq!(socket.read().unwrap(), Message::text("hello"));
    socket.send(Message::binary(vec![0u8, 1, 2, 255])).unwrap();
    assert_eq!(
        socket.read().unwrap(),
        Message::binary(vec![0u8, 1, 2, 255])
    );
    socket.close(None).unwrap();

    let refused = http_get(addr, "ws.example", "/ws").unwrap();
    assert_eq!(refused.status, 400, "a plain GET is not an upgrade");
}

#[test]
fn guards_and_the_run_remove_what_a_test_created() {
    let run = TestRun::new("cleanup");
    let network = run.network("net");
    let container = run.backend("a").network(&network).run();
    let (container_name, network_name) = (container.name.clone(), network.name.clone());
    drop(container);
    drop(network);
    assert!(try_docker(["inspect", container_name.as_str()]).is_err());
    assert!(try_docker(["network", "inspect", network_name.as_str()]).is_err());

    // A guard that never drops (a test that leaks one) is swept with its run.
    let network = run.network("leaked-net");
    let leaked = run.backend("leaked").network(&network).run();
    let (container_name, network_name) = (leaked.name.clone(), network.name.clone());
    std::mem::forget(leaked);
    std::mem::forget(network);
    let filter = format!("label={RUN_LABEL}={}", run.id());
    assert_eq!(
        docker(["ps", "-aq", "--filter", filter.as_str()])
            .lines()
            .count(),
        1
    );
    drop(run);
    assert!(try_docker(["inspect", container_name.as_str()]).is_err());
    assert!(try_docker(["network", "inspect", network_name.as_str()]).is_err());
}

#[test]
fn a_compose_project_comes_up_and_goes_down_with_its_guard() {
    let run = TestRun::new("compose");
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/integration/fixtures/backend.compose.yaml"
    );
    let project = run.compose_up(
        std::path::Path::new(file),
        &[("BACKEND_IMAGE", &backend_image())],
    );
    let container = project.container_name("app", 1);
    let network = project.network_name("front");
    let addr = std::net::SocketAddr::new(container_ip(&container, &network), BACKEND_PORT);
    let response = wait_until_ok("the compose service to answer", || http_get(addr, "x", "/"));
    let hostname = docker([
        "inspect",
        "--format",
        "{{.Config.Hostname}}",
        container.as_str(),
    ]);
    assert_eq!(response.header("x-hostname"), Some(hostname.as_str()));

    drop(project);
    assert!(try_docker(["inspect", container.as_str()]).is_err());
    assert!(try_docker(["network", "inspect", network.as_str()]).is_err());
}
