//! The client-facing server: accepts connections on an already-bound listener,
//! serves HTTP/1.1 and HTTP/2 (prior knowledge) on each, and on shutdown stops
//! accepting and lets in-flight requests finish within the grace period.
//! What each connection buffers is bounded here (with the upstream side's
//! bounds in `connect`), and a client that stops reading is cut after
//! `--client-send-timeout` (`send_timeout`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use ipnet::IpNet;
use tokio::net::TcpListener;

use super::client_identity::PeerInfo;
use super::forward::{handle, ProxyState, MAX_HEADER_BYTES};
use super::send_timeout::{ClientCut, ClientSocket};

/// What an HTTP/2 client may send on one stream before dockhand has passed
/// it on to the upstream (hyper's default is 1 MiB): the most a request body
/// whose upstream does not read it leaves here.
const H2_STREAM_WINDOW_BYTES: u32 = 256 * 1024;

/// The same for all the streams of one client connection (hyper's default).
const H2_CONNECTION_WINDOW_BYTES: u32 = 1024 * 1024;

/// What one HTTP/2 stream to a client may queue of its response beyond what
/// the client's window takes (hyper's default is 400 KiB): with the one
/// chunk in hand, what a response the client does not read leaves here.
const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// Connection-level settings of the server.
pub struct ServerSettings {
    pub header_read_timeout: Duration,
    /// How long a client may accept no bytes while it has some coming.
    pub client_send_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub trusted_proxies: Vec<IpNet>,
}

/// Serves until `shutdown` resolves, then drains. Returns whether every
/// connection finished within the shutdown timeout.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let builder = connection_builder(&settings);
    let local_port = listener_port(&listener);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, address) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Usually out of file descriptors: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "TCP_NODELAY not set");
        }
        let peer = Arc::new(PeerInfo::new(
            address,
            local_port.clone(),
            &settings.trusted_proxies,
        ));
        let state = state.clone();
        let cut = Arc::new(ClientCut::new(settings.client_send_timeout));
        let socket = ClientSocket::new(stream, cut.clone());
        let asked = Arc::new(AtomicBool::new(false));
        let service = service_fn({
            let asked = asked.clone();
            move |request| {
                asked.store(true, Ordering::Relaxed);
                handle(state.clone(), peer.clone(), cut.clone(), request)
            }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(socket), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(drive(
            connection,
            asked,
            settings.header_read_timeout,
            address,
        ));
    }
    drop(listener);
    tracing::info!("shutting down: no new connections, waiting for requests in flight");
    tokio::time::timeout(settings.shutdown_timeout, graceful.shutdown())
        .await
        .is_ok()
}

/// Runs one client connection to its end, or ends it if no request came
/// within `header_read_timeout` of its start. hyper times each HTTP/1.1
/// request head, but not the bytes that tell HTTP/1.1 from HTTP/2 before the
/// first one, nor an HTTP/2 connection's first request: a client that sends
/// nothing, or a preface byte by byte, would be kept for ever.
async fn drive<E: std::fmt::Display>(
    connection: impl Future<Output = Result<(), E>>,
    asked: Arc<AtomicBool>,
    header_read_timeout: Duration,
    client: SocketAddr,
) {
    let mut connection = std::pin::pin!(connection);
    let result = match tokio::time::timeout(header_read_timeout, &mut connection).await {
        Ok(result) => result,
        Err(_) if !asked.load(Ordering::Relaxed) => {
            tracing::debug!(%client, "no request within --header-read-timeout");
            return;
        }
        Err(_) => connection.await,
    };
    if let Err(error) = result {
        tracing::debug!(%error, %client, "client connection ended with an error");
    }
}

fn connection_builder(settings: &ServerSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // hyper's own limit sits above ours so that heads just over 64 KiB reach the
    // handler and get dockhand's 431 with its reason; far larger ones are cut by
    // hyper. The same size bounds the queue of response bytes (hyper's default
    // is about 400 KiB) that a client that does not read leaves here.
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout)
        .max_buf_size(2 * MAX_HEADER_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size((2 * MAX_HEADER_BYTES) as u32)
        .initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES)
        .max_send_buf_size(H2_SEND_BUFFER_BYTES);
    builder
}

/// The port clients connect to, as `X-Forwarded-Port` says it; none (and
/// the header not sent) if the socket can't tell, which a bound one can.
fn listener_port(listener: &TcpListener) -> Option<HeaderValue> {
    match listener.local_addr() {
        Ok(address) => Some(HeaderValue::from(address.port())),
        Err(error) => {
            tracing::warn!(%error, "the listener's port is unknown: X-Forwarded-Port is not sent");
            None
        }
    }
}
