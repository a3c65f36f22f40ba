//! `--workers N`: client connections spread over N worker threads, each
//! with its own listener on the port and its own upstream pools, and what
//! the workers share (routes, metrics, shutdown) seen by all of them.
//!
//! Which worker served is seen from outside: a worker's pool keeps one
//! connection to a keep-alive backend for requests that come one after the
//! other (`hundred_sequential_requests_share_one_upstream_connection`), so
//! the backend sees one upstream connection per worker that served; the
//! binary's log lines name their thread (`dockhand-worker-K`). The kernel
//! spreads connections over `SO_REUSEPORT` listeners by a hash of the
//! client's port, so the tests open new connections until both workers
//! are seen, within a bound no single worker could meet.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::support::*;
use super::tls_support::{client_config, https_connection, TestCa};

const HOST: &str = "w.test";

/// New connections opened to see both workers: a connection goes to either
/// with even odds, so all of them going to one is a 2^-99 chance.
const TRIES: usize = 100;

fn two_workers() -> dockhand::settings::Settings {
    dockhand::settings::Settings {
        workers: NonZeroUsize::new(2).unwrap(),
        ..test_settings()
    }
}

/// A listener bound as the binary binds its own (`SO_REUSEPORT`), so each
/// worker gets a listener of its own.
fn shared_port_listener() -> TcpListener {
    let listener = dockhand::workers::bind_shared_port("127.0.0.1:0".parse().unwrap()).unwrap();
    TcpListener::from_std(listener).unwrap()
}

/// dockhand in process with two workers, each with a listener of its own.
async fn proxy_with_two_workers(routes: &str) -> Proxy {
    Proxy::try_start_on(shared_port_listener(), routes, two_workers())
        .await
        .expect("proxy starts")
}

/// Requests `HOST` on new connections, one after the other, until
/// `backend` has seen two upstream connections (one per worker), each
/// answered by `backend`; how many were sent.
async fn until_both_workers_served(proxy: &Proxy, backend: &Backend, name: &str) -> usize {
    until_both_workers_served_by(backend, name, || get(proxy.addr, HOST, "/")).await
}

/// As [`until_both_workers_served`], each request sent by `send`.
async fn until_both_workers_served_by<F, Fut>(backend: &Backend, name: &str, mut send: F) -> usize
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Reply>,
{
    for sent in 1..=TRIES {
        let reply = send().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.header("x-backend"), name, "request {sent}");
        if backend.connection_count() == 2 {
            return sent;
        }
    }
    panic!(
        "{TRIES} connections, {} upstream connection(s): one worker served them all",
        backend.connection_count()
    );
}

#[tokio::test]
async fn two_workers_each_serve_with_upstream_pools_of_their_own() {
    let backend = Backend::echo("a").await;
    let proxy = proxy_with_two_workers(&one_route(HOST, backend.addr)).await;
    let sent = until_both_workers_served(&proxy, &backend, "a").await;
    // Both pools are warm now: more requests open nothing new.
    for _ in 0..20 {
        assert_eq!(get(proxy.addr, HOST, "/").await.status, StatusCode::OK);
    }
    assert_eq!(backend.connection_count(), 2, "one per worker");
    assert_eq!(backend.request_count(), sent + 20);
    proxy.stop().await;
}

#[tokio::test]
async fn https_is_served_by_every_worker() {
    let backend = Backend::echo("a").await;
    let ca = TestCa::new("dockhand workers test CA");
    let certs = tempfile::tempdir().unwrap();
    ca.leaf(HOST).write_pair(certs.path(), "w");
    let mut settings = two_workers();
    settings.tls.certs_dir = Some(certs.path().to_owned());
    let (http, https) = (shared_port_listener(), shared_port_listener());
    let proxy = Proxy::start_on(http, https, &one_route(HOST, backend.addr), settings).await;
    let (address, config) = (proxy.https.unwrap(), client_config(ca.roots(), &[]));
    until_both_workers_served_by(&backend, "a", || {
        let config = config.clone();
        async move {
            let mut connection = https_connection(address, HOST, config).await;
            connection.get(HOST, "/").await
        }
    })
    .await;
    proxy.stop().await;
}

#[tokio::test]
async fn workers_share_a_listener_given_without_reuse_port() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start_with(&one_route(HOST, backend.addr), two_workers()).await;
    // Which worker accepts from the one socket is a race: only the union
    // of what they served can be counted.
    for _ in 0..50 {
        assert_eq!(get(proxy.addr, HOST, "/").await.status, StatusCode::OK);
    }
    assert_eq!(backend.request_count(), 50);
    assert!(backend.connection_count() <= 2, "a pool per worker");
    proxy.stop().await;
}

#[tokio::test]
async fn a_routes_file_change_reaches_every_worker() {
    let (a, b) = (Backend::echo("a").await, Backend::echo("b").await);
    let proxy = proxy_with_two_workers(&one_route(HOST, a.addr)).await;
    until_both_workers_served(&proxy, &a, "a").await;
    proxy.write_routes(&one_route(HOST, b.addr));
    eventually("the new routes are served", || async {
        get(proxy.addr, HOST, "/").await.header("x-backend") == "b"
    })
    .await;
    // Every answer from now on is b's, whichever worker gives it, until
    // both workers have reached b.
    until_both_workers_served(&proxy, &b, "b").await;
    proxy.stop().await;
}

#[tokio::test]
async fn metrics_count_the_requests_of_every_worker() {
    let backend = Backend::echo("a").await;
    let proxy = proxy_with_two_workers(&one_route(HOST, backend.addr)).await;
    let sent = until_both_workers_served(&proxy, &backend, "a").await;
    let series = format!(r#"dockhand_requests_total{{host="{HOST}",location="/",code="200"}}"#);
    wait_for_series(proxy.admin, &series, sent as f64).await;
    proxy.stop().await;
}

/// The binary's worker threads named in its access log so far.
fn workers_logged(process: &ProxyProcess) -> BTreeSet<String> {
    process
        .events()
        .into_iter()
        .filter(|event| event["target"] == "dockhand::access")
        .filter_map(|event| event["threadName"].as_str().map(str::to_owned))
        .collect()
}

fn both_workers() -> BTreeSet<String> {
    ["dockhand-worker-0", "dockhand-worker-1"]
        .map(str::to_owned)
        .into()
}

#[tokio::test]
async fn the_binary_serves_on_every_worker() {
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(&one_route(HOST, backend.addr), &["--workers", "2"]).await;
    let mut sent = 0;
    while workers_logged(&process) != both_workers() {
        assert!(
            sent < TRIES,
            "one worker served all: {:?}",
            workers_logged(&process)
        );
        let reply = get(process.addr, HOST, "/").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        sent += 1;
        // The access event is written as the response ends: wait for it.
        eventually("the access event", || async {
            access_events(&process) == sent
        })
        .await;
    }
    assert_eq!(backend.request_count(), sent);
}

fn access_events(process: &ProxyProcess) -> usize {
    process
        .events()
        .iter()
        .filter(|event| event["target"] == "dockhand::access")
        .count()
}

/// A backend that answers `/slow` only once released, and anything else at once.
struct HeldBackend {
    backend: Backend,
    held: Arc<AtomicUsize>,
    release: watch::Sender<bool>,
}

async fn held_backend() -> HeldBackend {
    let held = Arc::new(AtomicUsize::new(0));
    let (release, released) = watch::channel(false);
    let backend = Backend::start({
        let held = held.clone();
        move |request: http::Request<hyper::body::Incoming>| {
            let (held, mut released) = (held.clone(), released.clone());
            async move {
                if request.uri().path() == "/slow" {
                    held.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|released| *released).await;
                }
                Response::new(full("done"))
            }
        }
    })
    .await;
    HeldBackend {
        backend,
        held,
        release,
    }
}

#[tokio::test]
async fn shutdown_lets_requests_in_flight_on_every_worker_finish() {
    let upstream = held_backend().await;
    let mut process = ProxyProcess::start(
        &one_route(HOST, upstream.backend.addr),
        &["--workers", "2", "--shutdown-timeout", "20s"],
    )
    .await;
    // One kept-alive client connection on each worker: a connection stays
    // on the worker that accepted it, which its first request's access
    // event names.
    let mut kept = Vec::new();
    let mut covered = BTreeSet::new();
    for probe in 0..TRIES {
        if covered == both_workers() {
            break;
        }
        let mut connection = http1_connection(process.addr).await;
        let path = format!("/probe/{probe}");
        let request = request("GET", HOST, &path).body(empty()).unwrap();
        let reply = read_reply(connection.send_request(request).await.unwrap()).await;
        assert_eq!(reply.status, StatusCode::OK);
        let mut worker = None;
        eventually("the probe's access event", || {
            worker = process.events().into_iter().find_map(|event| {
                (event["path"] == path.as_str()).then(|| event["threadName"].to_string())
            });
            std::future::ready(worker.is_some())
        })
        .await;
        if covered.insert(worker.unwrap().trim_matches('"').to_owned()) {
            kept.push(connection);
        }
    }
    assert_eq!(
        covered,
        both_workers(),
        "one worker took {TRIES} connections"
    );
    let in_flight: Vec<_> = kept
        .into_iter()
        .map(|mut connection| {
            tokio::spawn(async move {
                let request = request("GET", HOST, "/slow").body(empty()).unwrap();
                read_reply(connection.send_request(request).await.unwrap()).await
            })
        })
        .collect();
    eventually("both slow requests reach the backend", || {
        std::future::ready(upstream.held.load(Ordering::SeqCst) == 2)
    })
    .await;
    process.signal("TERM");
    eventually("both workers stop accepting", || {
        let draining: BTreeSet<String> = process
            .events()
            .into_iter()
            .filter(|event| {
                event["message"]
                    == "shutting down: no new connections, waiting for requests in flight"
            })
            .filter_map(|event| event["threadName"].as_str().map(str::to_owned))
            .collect();
        std::future::ready(draining == both_workers())
    })
    .await;
    upstream.release.send(true).unwrap();
    for request in in_flight {
        let reply = request.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.text(), "done");
    }
    let status = process.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    let timed_out = process
        .events()
        .into_iter()
        .any(|event| event["message"] == "shutdown timeout reached with requests still in flight");
    assert!(!timed_out, "drained in time");
}

#[test]
fn zero_workers_is_refused() {
    let binary = env!("CARGO_BIN_EXE_dockhand");
    let by_flag = Command::new(binary)
        .args([
            "--no-docker",
            "--routes",
            "/nonexistent.json",
            "--workers",
            "0",
        ])
        .output()
        .unwrap();
    let by_variable = Command::new(binary)
        .args(["--no-docker", "--routes", "/nonexistent.json"])
        .env("DOCKHAND_WORKERS", "0")
        .output()
        .unwrap();
    for output in [by_flag, by_variable] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--workers"), "{stderr}");
        assert!(stderr.contains("1 or more"), "{stderr}");
    }
}

/// With one worker the process is one thread, but for the moments its
/// polls read files (the routes file's, each second): a second thread would
/// make every socket call take a reference the kernel skips for a process of
/// one thread. The blocking pool's threads kept for 10 s outlasted each poll.
#[tokio::test]
async fn one_worker_is_the_only_thread_between_polls() {
    let backend = Backend::echo("a").await;
    let process = ProxyProcess::start(&one_route(HOST, backend.addr), &["--workers", "1"]).await;
    let reply = get(process.addr, HOST, "/").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let threads = format!("/proc/{}/task", process.child.id());
    // Three polls of the routes file in this time.
    eventually_within(Duration::from_secs(3), "one thread", || {
        let count = std::fs::read_dir(&threads).map(Iterator::count);
        async move { count.expect("the process's threads") == 1 }
    })
    .await;
}

/// The port is shared with the binary's own workers only: a second dockhand
/// on it is refused, as before there were workers.
#[tokio::test]
async fn a_second_process_on_the_port_is_refused() {
    let backend = Backend::echo("a").await;
    let first = ProxyProcess::start(&one_route(HOST, backend.addr), &["--workers", "2"]).await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let second = Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .args(["--no-docker", "--log-format", "json", "--workers", "2"])
        .arg("--routes")
        .arg(first.routes_path())
        .args(["--http-listen", &first.addr.to_string()])
        .args(["--admin-listen", &free_port().to_string()])
        .stdout(log.reopen().unwrap())
        .spawn()
        .unwrap();
    let mut second = KilledOnDrop(second);
    let mut exited = None;
    eventually("the second process exits", || {
        exited = second.0.try_wait().unwrap();
        std::future::ready(exited.is_some())
    })
    .await;
    let stdout = std::fs::read_to_string(log.path()).unwrap();
    assert_eq!(exited.unwrap().code(), Some(1), "{stdout}");
    assert!(stdout.contains("can't listen for HTTP"), "{stdout}");
    assert_eq!(get(first.addr, HOST, "/").await.status, StatusCode::OK);
}

/// A process ended with the test, should it still run (a test that fails).
struct KilledOnDrop(std::process::Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
