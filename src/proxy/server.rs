//! The client-facing server: accepts connections on an already-bound listener,
//! plain (HTTP/1.1 and h2c) or HTTPS (the TLS handshake of `tls_handshake`
//! first, then HTTP/1.1 or HTTP/2 as ALPN chose), serves both through one
//! path: HTTP/1.1 clients with dockhand's own server (`http1_server`), which
//! hands HTTP/2 and protocol switches to hyper's with the bytes it read
//! (`--http1-engine hyper`: hyper's for everything), and on shutdown
//! stops accepting and lets in-flight requests finish within the grace period.
//! What each connection buffers is bounded here (with the upstream side's
//! bounds in `connect`), and a client that stops reading is cut after
//! `--client-send-timeout` (`send_timeout`), and one that sits idle is
//! closed after `--header-read-timeout` (`idle`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderValue, Version};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use ipnet::IpNet;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use super::client_body::ClientIncoming;
use super::client_identity::{PeerInfo, Scheme};
use super::forward::{handle, ProxyState, MAX_HEADER_BYTES};
use super::http1_server::{self, ClientIo, Ended, Http1Client};
use super::idle::{ConnectionActivity, Idle};
use super::send_timeout::{ClientCut, ClientSocket};
use super::tls_handshake::TlsTermination;
use crate::connect::Http1Engine;
use crate::metrics::{ClientProtocol, OpenConnection};

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
#[derive(Clone)]
pub struct ServerSettings {
    pub header_read_timeout: Duration,
    /// How long a client may accept no bytes while it has some coming.
    pub client_send_timeout: Duration,
    pub shutdown_timeout: Duration,
    pub trusted_proxies: Vec<IpNet>,
    /// Whose server reads HTTP/1.1 requests (hyper's keeps HTTP/2 either way).
    pub http1_engine: Http1Engine,
}

/// What a listener's connections speak under HTTP.
pub enum Transport {
    /// Plain TCP: HTTP/1.1 and h2c.
    Http,
    /// TLS first, then HTTP/1.1 or HTTP/2 (as the client's ALPN chose).
    Https(Arc<TlsTermination>),
}

impl Transport {
    fn scheme(&self) -> Scheme {
        match self {
            Transport::Http => Scheme::Http,
            Transport::Https(_) => Scheme::Https,
        }
    }
}

/// Serves until `shutdown` resolves, then drains. Returns whether every
/// connection finished within the shutdown timeout.
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    state: Arc<ProxyState>,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let local_port = listener_port(&listener);
    let connections = Arc::new(Connections {
        builder: connection_builder(&settings),
        state,
        header_read_timeout: settings.header_read_timeout,
        engine: settings.http1_engine,
    });
    // Every connection holds a receiver until it ends: sending asks them to
    // finish, and the channel closes once the last one has.
    let (draining, _) = watch::channel(());
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
        let client = Client {
            peer: Arc::new(PeerInfo::new(
                address,
                transport.scheme(),
                local_port.clone(),
                &settings.trusted_proxies,
            )),
            cut: Arc::new(ClientCut::new(settings.client_send_timeout)),
            draining: draining.subscribe(),
        };
        let socket = ClientSocket::new(stream, client.cut.clone());
        let connections = connections.clone();
        match &transport {
            Transport::Http => {
                tokio::spawn(connections.serve_first(socket, client, true));
            }
            Transport::Https(tls) => {
                let tls = tls.clone();
                tokio::spawn(async move {
                    let mut client = client;
                    // A server that drains abandons the handshakes under way.
                    let secured = tokio::select! {
                        secured = tls.accept(socket, client.peer.address) => secured,
                        _ = client.draining.changed() => None,
                    };
                    if let Some(secured) = secured {
                        // ALPN `h2` is HTTP/2 from the first byte; without
                        // ALPN a client may still start with its preface.
                        match secured.get_ref().1.alpn_protocol() {
                            Some(b"h2") => connections.serve(secured, client).await,
                            alpn => {
                                let prior_knowledge = alpn.is_none();
                                connections
                                    .serve_first(secured, client, prior_knowledge)
                                    .await
                            }
                        }
                    }
                });
            }
        }
    }
    drop(listener);
    tracing::info!(
        scheme = transport.scheme().as_str(),
        "shutting down: no new connections, waiting for requests in flight"
    );
    let _ = draining.send(());
    tokio::time::timeout(settings.shutdown_timeout, draining.closed())
        .await
        .is_ok()
}

/// What every connection of a listener shares.
struct Connections {
    builder: auto::Builder<TokioExecutor>,
    state: Arc<ProxyState>,
    header_read_timeout: Duration,
    engine: Http1Engine,
}

/// One client connection's own parts.
struct Client {
    peer: Arc<PeerInfo>,
    /// Whether its socket was cut for not reading.
    cut: Arc<ClientCut>,
    /// Changes when the server drains.
    draining: watch::Receiver<()>,
}

impl Connections {
    /// Serves a new connection: with the own HTTP/1.1 server unless
    /// `--http1-engine hyper`, which hands it to hyper's for what it does
    /// not serve itself (`prior_knowledge`: HTTP/2 may start it).
    async fn serve_first<S: ClientIo>(
        self: Arc<Self>,
        io: S,
        client: Client,
        prior_knowledge: bool,
    ) {
        // hyper's server is boxed on both paths: an idle connection's task
        // is then only as large as the own server's state.
        if self.engine == Http1Engine::Hyper {
            return Box::pin(self.serve(io, client)).await;
        }
        let own = Http1Client {
            state: self.state.clone(),
            peer: client.peer.clone(),
            cut: client.cut.clone(),
            header_read_timeout: self.header_read_timeout,
        };
        match http1_server::serve(io, &own, &client.draining, prior_knowledge).await {
            Ended::Closed => {}
            Ended::HandOff(rewound) => Box::pin(self.serve(rewound, client)).await,
        }
    }

    /// Serves HTTP on `io` with hyper, a client's socket or the TLS stream over it,
    /// until the connection ends.
    async fn serve<S>(self: Arc<Self>, io: S, client: Client)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = ConnectionActivity::new();
        // Counted as open from its first request, which tells its protocol,
        // until the connection (and so the service) is dropped.
        let open: Arc<OnceLock<OpenConnection>> = Arc::default();
        let address = client.peer.address;
        let service = service_fn({
            let activity = activity.clone();
            let state = self.state.clone();
            let Client { peer, cut, .. } = client;
            move |request| {
                open.get_or_init(|| {
                    state.metrics.client_connection(match request.version() {
                        Version::HTTP_2 => ClientProtocol::H2,
                        _ => ClientProtocol::Http1,
                    })
                });
                let active = activity.start_request();
                let request = request.map(ClientIncoming::Left);
                let response = handle(state.clone(), peer.clone(), cut.clone(), request);
                async move {
                    let response = response.await?;
                    Ok::<_, Infallible>(response.map(|body| body.counting(active)))
                }
            }
        });
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        drive(
            connection,
            auto::UpgradeableConnection::graceful_shutdown,
            activity,
            self.header_read_timeout,
            client.draining,
            address,
        )
        .await;
    }
}

/// Runs one client connection to its end. It is ended at once if it asks
/// nothing within `idle_timeout` of its start: hyper times each HTTP/1.1
/// request head, but not the bytes that tell HTTP/1.1 from HTTP/2 before the
/// first one, nor an HTTP/2 connection's first request, so a client that
/// sends nothing, or a preface byte by byte, would be kept for ever. It is
/// closed gracefully (`close`: HTTP/2's GOAWAY) when idle for `idle_timeout`
/// after a request, or when the server drains.
async fn drive<C, E>(
    connection: C,
    close: fn(Pin<&mut C>),
    activity: Arc<ConnectionActivity>,
    idle_timeout: Duration,
    mut draining: watch::Receiver<()>,
    client: SocketAddr,
) where
    C: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut connection = std::pin::pin!(connection);
    let mut closing = false;
    let mut look_again = Instant::now() + idle_timeout;
    let result = loop {
        tokio::select! {
            result = connection.as_mut() => break result,
            _ = draining.changed(), if !closing => {
                close(connection.as_mut());
                closing = true;
            }
            () = tokio::time::sleep_until(look_again), if !closing => {
                match activity.idle(idle_timeout, Instant::now()) {
                    Idle::Until(next) => look_again = next,
                    Idle::NeverAsked => {
                        tracing::debug!(%client, "no request within --header-read-timeout");
                        return;
                    }
                    Idle::SinceLastRequest => {
                        tracing::debug!(%client, "idle for --header-read-timeout: closing");
                        close(connection.as_mut());
                        closing = true;
                    }
                }
            }
        }
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
