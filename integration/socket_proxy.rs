//! dockhand against a read-only Docker API: nginx in front of the engine's
//! socket (`dockhand-socketproxy:test`, configured by
//! `integration/socket-proxy/nginx.conf`, the file the README shows) lets
//! only GET through. Routing and the event stream work through it, and its
//! access log shows every call dockhand made was a GET.

use std::path::Path;

use crate::support::*;

const SOCKET_PROXY_IMAGE: &str = "dockhand-socketproxy:test";
const PROXY_PORT: u16 = 2375;

/// The methods of the requests in nginx's access log (`"GET /v1.47/... HTTP/1.1"`).
fn methods_in(access_log: &str) -> Vec<(String, String)> {
    access_log
        .lines()
        .filter_map(|line| line.split('"').nth(1))
        .filter_map(|request| {
            let mut parts = request.split(' ');
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

#[test]
fn dockhand_follows_docker_through_a_socket_proxy_that_allows_only_get() {
    let run = TestRun::new("socket-proxy");
    let network = run.network("net");
    let socket = docker_socket_path().expect("the engine on a unix socket");
    let proxy = run
        .container("proxy", SOCKET_PROXY_IMAGE)
        .volume(&format!("{}:/var/run/docker.sock", socket.display()))
        .publish(PROXY_PORT)
        .run();
    let proxy_addr = wait_until_ok("the socket proxy's port", || proxy.published(PROXY_PORT));
    wait_until_ok("the socket proxy to pass GET /_ping", || {
        match http_get(proxy_addr, "docker", "/_ping") {
            Ok(response) if response.status == 200 => Ok(()),
            Ok(response) => Err(format!("{} {}", response.status, response.text())),
            Err(error) => Err(error.to_string()),
        }
    });
    // What the proxy is there for: any other method stops at it.
    let refused = http_request(
        proxy_addr,
        "POST",
        "docker",
        "/containers/none/stop",
        &[],
        b"",
    )
    .expect("the proxy answers");
    assert_eq!(refused.status, 403, "{}", refused.text());

    let host = run.host("web");
    let web = routed_backend(&run, "web", &host, &network).run();
    let docker_host = format!("tcp://{proxy_addr}");
    let dockhand = DockhandOnHost::start(&["--docker-host", &docker_host]);
    assert_answered_by(dockhand.addr, &host, &web);
    // Started after dockhand listed the containers: only the event stream
    // tells of it (the next full re-list is a minute away).
    let later_host = run.host("later");
    let later = routed_backend(&run, "later", &later_host, &network).run();
    assert_answered_by(dockhand.addr, &later_host, &later);

    // nginx logs a request when it ends: the event stream, once dockhand stops.
    drop(dockhand);
    let calls = wait_until("dockhand's event stream in the proxy's log", || {
        let calls = methods_in(&proxy.logs());
        calls
            .iter()
            .any(|(_, path)| path.contains("/events"))
            .then_some(calls)
    });
    let writes: Vec<_> = calls
        .iter()
        .filter(|(method, path)| {
            !matches!(method.as_str(), "GET" | "HEAD") && path != "/containers/none/stop"
        })
        .collect();
    assert!(
        writes.is_empty(),
        "dockhand made calls other than GET: {writes:?}"
    );

    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("the README");
    let config = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/socket-proxy/nginx.conf"),
    )
    .expect("the proxy's configuration");
    assert!(
        readme.contains(&config),
        "the README shows the socket proxy's configuration as the test uses it"
    );
}
