//! Upstream faults, each met 200 times through the real binary by clients
//! twenty at a time: the client always gets dockhand's status with its
//! reason, or a response whose body is clearly aborted, within a bound; and
//! afterwards dockhand holds no more descriptors than before and the
//! upstream sees every connection it accepted closed. (statuses.rs and
//! causes.rs check each status and its log once.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::support::*;

const EXCHANGES: usize = 200;
const CONCURRENT: usize = 20;

/// `--upstream-timeout` for the faults: short, so that those that wait for
/// it take a few seconds in all.
const UPSTREAM_TIMEOUT: &str = "300ms";

/// The longest any one exchange may take before the client counts as held:
/// far above `UPSTREAM_TIMEOUT`, for slow machines.
const HELD: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Nothing listens.
    Refused,
    /// Closed with a reset (linger 0) once the request head arrived.
    ResetBeforeHead,
    /// A head announcing 1,000 bytes, 10 of them, then a reset.
    ResetMidBody,
    /// Bytes that are not HTTP, then closed.
    Garbage,
    /// Reads the request and answers nothing, until dockhand closes.
    NeverStarts,
    /// A head announcing 1,000 bytes, 10 of them, then nothing more, until
    /// dockhand closes.
    StallsBody,
}

/// An upstream with a fault, counting the connections it accepted and
/// those that are over (closed by either side).
struct FaultyUpstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FaultyUpstream {
    async fn start(fault: Fault) -> FaultyUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(AtomicUsize::new(0));
        let (accepting, closing) = (accepted.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                accepting.fetch_add(1, Ordering::SeqCst);
                let closing = closing.clone();
                tokio::spawn(async move {
                    misbehave(stream, fault).await;
                    closing.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        FaultyUpstream {
            addr,
            accepted,
            closed,
            task,
        }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn still_open(&self) -> usize {
        self.accepted() - self.closed.load(Ordering::SeqCst)
    }
}

impl Drop for FaultyUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const PARTIAL_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n0123456789";

async fn misbehave(mut stream: TcpStream, fault: Fault) {
    let mut head = Vec::new();
    let mut buffer = [0; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    match fault {
        Fault::Refused | Fault::ResetBeforeHead => {}
        Fault::ResetMidBody | Fault::StallsBody => {
            let _ = stream.write_all(PARTIAL_HEAD).await;
        }
        Fault::Garbage => {
            let _ = stream.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
            return;
        }
        Fault::NeverStarts => {}
    }
    match fault {
        Fault::ResetBeforeHead | Fault::ResetMidBody => {
            let _ = stream.set_zero_linger();
        }
        // Held until dockhand closes its end.
        _ => while let Ok(1..) = stream.read(&mut buffer).await {},
    }
}

/// What a client got.
#[derive(Debug, PartialEq)]
enum Answer {
    /// dockhand's own status, with its `x-dockhand-error`.
    Own(u16, String),
    /// The upstream's head, then a body that ended abnormally.
    Aborted(u16),
    /// The upstream's head and a whole body.
    Whole(u16),
}

/// One `GET` on a new HTTP/1.1 connection; panics if it is held past `HELD`.
async fn exchange(proxy: SocketAddr, host: &str) -> Answer {
    let whole = async {
        let mut sender = http1_connection(proxy).await;
        let request = request("GET", host, "/").body(empty()).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        if let Some(reason) = response.headers().get("x-dockhand-error") {
            return Answer::Own(status, reason.to_str().unwrap().to_owned());
        }
        match response.into_body().collect().await {
            Ok(_) => Answer::Whole(status),
            Err(_) => Answer::Aborted(status),
        }
    };
    tokio::time::timeout(HELD, whole)
        .await
        .unwrap_or_else(|_| panic!("{host}: the client was held for {HELD:?}"))
}

/// `EXCHANGES` requests for `host`, `CONCURRENT` at a time, each answered
/// one of the `expected`.
async fn many_exchanges(proxy: SocketAddr, host: &str, expected: &[Answer]) {
    let clients = (0..CONCURRENT).map(|_| async {
        for _ in 0..EXCHANGES / CONCURRENT {
            let answer = exchange(proxy, host).await;
            assert!(expected.contains(&answer), "{host}: {answer:?}");
        }
    });
    join_all(clients).await;
}

/// The real binary routing `fault.test` to `upstream`, warmed up with
/// requests to a healthy backend at `ok.test` (whose pooled connection
/// then belongs to the baseline of descriptors).
async fn proxy_to(upstream: SocketAddr, healthy: &Backend, upstream_timeout: &str) -> ProxyProcess {
    let routes = serde_json::json!({"host": {
        "fault.test": {"location": {"/": {"upstream": {upstream.to_string(): {}}}}},
        "ok.test": {"location": {"/": {"upstream": {healthy.addr.to_string(): {}}}}}
    }});
    let process = ProxyProcess::start(
        &routes.to_string(),
        &["--upstream-timeout", upstream_timeout],
    )
    .await;
    for _ in 0..5 {
        assert_eq!(get(process.addr, "ok.test", "/").await.status, 200);
    }
    process
}

/// Many exchanges with the fault, then: no descriptor of dockhand's and no
/// connection the upstream accepted is left open, the upstream accepted
/// one connection per exchange (no retry storm), and ordinary requests are
/// still served.
async fn the_fault_leaves_nothing_behind(fault: Fault, expected: Answer) {
    let healthy = Backend::echo("ok").await;
    let upstream = match fault {
        Fault::Refused => None,
        _ => Some(FaultyUpstream::start(fault).await),
    };
    let addr = upstream
        .as_ref()
        .map_or_else(free_port, |upstream| upstream.addr);
    let process = proxy_to(addr, &healthy, UPSTREAM_TIMEOUT).await;
    let fds = process.open_fds();
    many_exchanges(process.addr, "fault.test", &[expected]).await;
    let right_after = process.open_fds();
    eprintln!("{fault:?}: dockhand had {fds} descriptors before, {right_after} right after");
    if let Some(upstream) = &upstream {
        eventually(
            "every connection the upstream accepted is closed",
            || async { upstream.still_open() == 0 },
        )
        .await;
        assert_eq!(upstream.accepted(), EXCHANGES, "{fault:?}");
    }
    eventually(
        "dockhand's descriptors are back to where they were",
        || async { process.open_fds() <= fds },
    )
    .await;
    assert_eq!(get(process.addr, "ok.test", "/").await.status, 200);
}

#[tokio::test]
async fn refused_connections_leave_nothing_behind() {
    let expected = Answer::Own(502, "connect_refused".into());
    the_fault_leaves_nothing_behind(Fault::Refused, expected).await;
}

#[tokio::test]
async fn resets_before_the_head_leave_nothing_behind() {
    let expected = Answer::Own(502, "reset_before_response".into());
    the_fault_leaves_nothing_behind(Fault::ResetBeforeHead, expected).await;
}

#[tokio::test]
async fn resets_mid_body_leave_nothing_behind() {
    the_fault_leaves_nothing_behind(Fault::ResetMidBody, Answer::Aborted(200)).await;
}

#[tokio::test]
async fn answers_that_are_not_http_leave_nothing_behind() {
    let expected = Answer::Own(502, "not_http".into());
    the_fault_leaves_nothing_behind(Fault::Garbage, expected).await;
}

#[tokio::test]
async fn responses_that_never_start_are_504_and_leave_nothing_behind() {
    let expected = Answer::Own(504, "upstream_timeout".into());
    the_fault_leaves_nothing_behind(Fault::NeverStarts, expected).await;
}

/// A body that sends nothing for `--upstream-timeout` after its head is
/// cut: the HTTP/1.1 client's connection ends before the announced length,
/// the HTTP/2 client's stream is reset, and the access log says why.
#[tokio::test]
async fn bodies_that_stall_are_cut_and_leave_nothing_behind() {
    the_fault_leaves_nothing_behind(Fault::StallsBody, Answer::Aborted(200)).await;
    let healthy = Backend::echo("ok").await;
    let upstream = FaultyUpstream::start(Fault::StallsBody).await;
    let process = proxy_to(upstream.addr, &healthy, UPSTREAM_TIMEOUT).await;
    let mut sender = h2_connection(process.addr).await;
    let response = sender
        .send_request(h2_get("fault.test", "/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = tokio::time::timeout(HELD, response.into_body().collect()).await;
    assert!(body.expect("not held").is_err(), "the stream is reset");
    let access = process.access_event("fault.test").await;
    assert_eq!(access["error"], "reset_mid_response");
    let cause = access["cause"].as_str().unwrap();
    assert!(cause.contains("--upstream-timeout"), "{cause}");
}

/// The limit is on each pause, not on the whole body: one that keeps
/// coming, each part within `--upstream-timeout`, arrives whole however
/// long it takes in all.
#[tokio::test]
async fn a_slow_body_that_keeps_coming_is_not_cut() {
    let pause = Duration::from_millis(300);
    let slow = raw_upstream(move |mut stream| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 80\r\n\r\n")
            .await;
        for _ in 0..8 {
            tokio::time::sleep(pause).await;
            let _ = stream.write_all(b"0123456789").await;
        }
    })
    .await;
    let healthy = Backend::echo("ok").await;
    // Eight pauses of 300 ms: 2.4 s in all, over the 2 s limit.
    let process = proxy_to(slow, &healthy, "2s").await;
    assert_eq!(
        exchange(process.addr, "fault.test").await,
        Answer::Whole(200)
    );
}

/// An h2c upstream that resets each stream mid-body (its body fails, so
/// hyper sends RST_STREAM): each client gets a 502 or an aborted body, and
/// the multiplexed upstream connection survives the resets.
#[tokio::test]
async fn h2c_streams_reset_mid_body_leave_the_connection_serving() {
    let resetting = Backend::start(|_request| async {
        let parts: Vec<Result<Frame<Bytes>, Box<dyn std::error::Error + Send + Sync>>> = vec![
            Ok(Frame::data(Bytes::from_static(b"0123456789"))),
            Err("the upstream gives up".into()),
        ];
        http::Response::new(StreamBody::new(futures_util::stream::iter(parts)).boxed_unsync())
    })
    .await;
    let healthy = Backend::echo("ok").await;
    let routes = serde_json::json!({"host": {
        "fault.test": {"location": {"/": {"upstream": {
            resetting.addr.to_string(): {"protocol": "h2c"}
        }}}},
        "ok.test": {"location": {"/": {"upstream": {healthy.addr.to_string(): {}}}}}
    }});
    let process = ProxyProcess::start(&routes.to_string(), &[]).await;
    assert_eq!(get(process.addr, "ok.test", "/").await.status, 200);
    let fds = process.open_fds();
    // A reset that overtakes the head is a 502 (no byte reached the
    // client yet); one after it, an aborted body.
    let expected = [
        Answer::Own(502, "reset_before_response".into()),
        Answer::Aborted(200),
    ];
    many_exchanges(process.addr, "fault.test", &expected).await;
    eprintln!(
        "h2c resets: {} requests on {} upstream connections",
        resetting.request_count(),
        resetting.connection_count()
    );
    assert_eq!(resetting.request_count(), EXCHANGES);
    // One connection carries them (two if a second was dialed while the
    // first was being opened), not one per reset stream.
    assert!(resetting.connection_count() <= 2);
    eventually(
        "dockhand's descriptors are back, but for the pooled upstream connection",
        || async { process.open_fds() <= fds + resetting.connection_count() },
    )
    .await;
}
