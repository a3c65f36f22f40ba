//! dockhand on the host and in a container, in front of backend containers
//! named by address in a routes file: the two ways the Docker scenarios run
//! dockhand, proven without its Docker provider (`--no-docker`).

use std::net::SocketAddr;

use tokio_tungstenite::tungstenite::Message;

use crate::support::*;

fn routes(host: &str, upstream: SocketAddr) -> String {
    serde_json::json!({"host": {host: {"location": {"/": {"upstream": {upstream.to_string(): {}}}}}}})
        .to_string()
}

#[test]
fn dockhand_on_the_host_forwards_to_a_container() {
    let run = TestRun::new("host-routes-file");
    let network = run.network("net");
    let backend = run.backend("app").network(&network).run();
    let host = run.host("app");

    let dir = tempfile::tempdir().unwrap();
    let routes_path = dir.path().join("routes.json");
    let routes_json = routes(&host, backend.addr(&network, BACKEND_PORT));
    std::fs::write(&routes_path, routes_json).unwrap();
    let dockhand = DockhandOnHost::start_in(
        dir,
        &["--no-docker", "--routes", routes_path.to_str().unwrap()],
        &[],
    );

    let response = wait_until_ok("a 200 through dockhand", || {
        match dockhand.get(&host, "/hello?a=b") {
            Ok(response) if response.status == 200 => Ok(response),
            Ok(response) => Err(format!("{} {}", response.status, response.text())),
            Err(error) => Err(error.to_string()),
        }
    });
    let body = response.json();
    assert_eq!(body["hostname"], backend.name.as_str());
    assert_eq!(body["path"], "/hello");
    assert_eq!(body["query"], "a=b");
    assert_eq!(body["headers"]["host"], host.as_str());
    assert_eq!(dockhand.get("elsewhere.test", "/").unwrap().status, 404);

    let mut socket = websocket(dockhand.addr, &host, "/ws").unwrap();
    socket.send(Message::text("through dockhand")).unwrap();
    assert_eq!(socket.read().unwrap(), Message::text("through dockhand"));
}

#[test]
fn dockhand_in_a_container_forwards_on_its_network() {
    let run = TestRun::new("container-routes-file");
    let network = run.network("net");
    let backend = run.backend("app").network(&network).run();
    let host = run.host("app");

    let dir = tempfile::tempdir().unwrap();
    let routes_json = routes(&host, backend.addr(&network, BACKEND_PORT));
    std::fs::write(dir.path().join("routes.json"), routes_json).unwrap();
    let mount = format!("{}:/config:ro", dir.path().display());
    let dockhand = run.dockhand_in_container_with(
        "proxy",
        &network,
        &["--no-docker", "--routes", "/config/routes.json"],
        |spec| spec.volume(&mount),
    );

    let response = wait_until_ok("a 200 through dockhand", || {
        match dockhand.get(&host, "/x") {
            Ok(response) if response.status == 200 => Ok(response),
            Ok(response) => Err(format!("{} {}", response.status, response.text())),
            Err(error) => Err(error.to_string()),
        }
    });
    assert_eq!(response.json()["hostname"], backend.name.as_str());
    assert_eq!(response.header("x-hostname"), Some(backend.name.as_str()));
    // The client, as dockhand saw it: the engine's gateway on the published port.
    assert!(response.json()["headers"]["x-forwarded-for"].is_string());
}
