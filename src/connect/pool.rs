//! The pooled upstream client: keep-alive connections per endpoint (address
//! and transport: HTTP/1.1, h2c, or TLS with its server name and
//! verification), reused across requests and across route-table changes.
//! HTTP/1.1 in cleartext to an address goes through dockhand's own exchange
//! (`http1_exchange`, with a pool per worker thread) unless `--http1-engine
//! hyper` keeps it on hyper's client, where it shares one pool for every
//! address; the others have a pool per destination. Opening connections is
//! `dial`'s.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{Either, TryFutureExt};
use http::header::{self, HeaderName, HeaderValue};
use http::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::dial::{Connector, Dialing, PoolKey};
use super::error::BoxError;
use super::http1_exchange::{exchange, Outgoing};
use super::srv::SrvResolvers;
use super::upstream_body::{SendError, UpstreamIncoming, UpstreamResponse};
use crate::config::SrvResolution;
use crate::kept_box::KeptBox;
use crate::metrics::Metrics;
use crate::resolve::{Dns, SrvAnswer};
use crate::sync::{read, write};
use crate::upstream::{Destination, Endpoint, EndpointRegistry, Transport};

/// How long an unused pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// What each upstream HTTP/1.1 connection buffers, each way: its read
/// buffer (a response head must fit in it, or the answer is `502`) and its
/// queue of request bytes to write. hyper's default, about 400 KiB, is what
/// a response nobody reads kept, besides the client side's share.
const HTTP1_BUFFER_BYTES: usize = 64 * 1024;

/// What an upstream may send on one HTTP/2 stream before dockhand has passed
/// it on to the client (hyper's default is 2 MiB): a client that stops
/// reading leaves at most this much of its response here, and the upstream
/// waits for it.
const H2_STREAM_WINDOW_BYTES: u32 = 256 * 1024;

/// The same for all the streams of one upstream HTTP/2 connection (hyper's
/// default is 5 MiB): sixteen responses' worth, so a few clients that stop
/// reading don't stall the others' streams on the same connection.
const H2_CONNECTION_WINDOW_BYTES: u32 = 16 * H2_STREAM_WINDOW_BYTES;

/// What one HTTP/2 stream to an upstream may queue of its request body
/// beyond what the upstream's window takes (hyper's default is 1 MiB).
const H2_SEND_BUFFER_BYTES: usize = 64 * 1024;

/// Whether requests to `endpoint` carry its address as their URI's
/// authority (the shared HTTP/1.1 pool), or the host the upstream expects.
pub fn authority_is_address(endpoint: &Endpoint) -> bool {
    matches!(
        (&endpoint.destination, &endpoint.transport),
        (Destination::Address(_), Transport::Http1)
    )
}

type PooledClient<B> = Client<Connector, B>;

/// A request head its handler keeps for every try: the own HTTP/1.1
/// exchange writes it out from there (no try copies it), and hyper's
/// client is given a request made of it for the endpoint.
pub trait TryHead {
    /// The head as the own exchange writes it, with `added`, the endpoint's
    /// fields.
    fn outgoing<'a>(&'a self, added: &'a [(HeaderName, HeaderValue)]) -> Outgoing<'a>;
    fn request_to<B: http_body::Body>(&self, endpoint: &Endpoint, body: B) -> Request<B>;
}

/// What carries HTTP/1.1 in cleartext to upstream addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Http1Engine {
    /// dockhand's own exchange, on the request's task (the default).
    #[default]
    Own,
    /// hyper's pooled client, as before the own path (for comparison).
    Hyper,
}

/// The shared HTTP/1.1 pool, and one pool per destination for the others.
pub struct UpstreamClient<B> {
    engine: Http1Engine,
    /// The own exchange's dialer (hyper's has its own copy).
    http1_connector: Connector,
    http1: PooledClient<B>,
    /// Pools for the other transports, made when first used.
    others: RwLock<HashMap<PoolKey, PooledClient<B>>>,
    dialing: Arc<Dialing>,
}

impl<B> UpstreamClient<B>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    pub fn new(
        engine: Http1Engine,
        connect_timeout: Duration,
        registry: Arc<EndpointRegistry>,
        dns: Arc<dyn Dns>,
        metrics: Arc<Metrics>,
    ) -> UpstreamClient<B> {
        let dialing = Arc::new(Dialing {
            connect_timeout,
            registry,
            tls: OnceLock::new(),
            srv: SrvResolvers {
                system: dns,
                resolvers: Mutex::default(),
                metrics,
            },
        });
        UpstreamClient::over(engine, dialing)
    }

    /// A client with pools of its own, empty, that opens connections as
    /// this one does (the connect timeout, upstream TLS, the SRV caches are
    /// shared): each worker thread's. A pooled connection's task runs on
    /// the runtime that opened it, so pools are never shared between workers.
    pub fn with_own_pools(&self) -> UpstreamClient<B> {
        UpstreamClient::over(self.engine, self.dialing.clone())
    }

    fn over(engine: Http1Engine, dialing: Arc<Dialing>) -> UpstreamClient<B> {
        let shared = PoolKey {
            transport: Transport::Http1,
            destination: None,
        };
        UpstreamClient {
            engine,
            http1_connector: Connector {
                key: Arc::new(shared.clone()),
                dialing: dialing.clone(),
            },
            http1: pooled_client(shared, dialing.clone()),
            others: RwLock::default(),
            dialing,
        }
    }

    /// Sends `head` and `body` to `endpoint`. The own HTTP/1.1 exchange
    /// writes the head from where its handler keeps it. Its future, the
    /// largest part of a request's, is put in a block the thread keeps
    /// (`KeptBox`) where it is made: the layers that wrap it (the mapping
    /// here, the wait for its head, the request's own future) then move a
    /// pointer, not every byte of it, and no allocation is made for it once
    /// the thread has served a request.
    pub fn send<'a, H: TryHead + Sync>(
        &'a self,
        endpoint: &'a Endpoint,
        head: &'a H,
        body: B,
    ) -> impl Future<Output = Result<UpstreamResponse, SendError>> + Send + 'a
    where
        B: Sync,
        B::Error: Send,
    {
        let hyper_client = if !authority_is_address(endpoint) {
            self.pool_for(PoolKey {
                transport: endpoint.transport.clone(),
                destination: Some(endpoint.destination.clone()),
            })
        } else {
            let outgoing = head.outgoing(&endpoint.config.headers_add);
            match (self.engine, &endpoint.destination) {
                // A protocol switch hands the connection over to a tunnel:
                // hyper's client does that.
                (Http1Engine::Own, Destination::Address(address))
                    if !outgoing.headers.contains_key(header::UPGRADE) =>
                {
                    let exchange = exchange(&self.http1_connector, *address, outgoing, body);
                    return Either::Left(
                        KeptBox::pin(exchange)
                            .map_ok(|response| response.map(UpstreamIncoming::Http1))
                            .map_err(SendError::Http1),
                    );
                }
                _ => self.http1.clone(),
            }
        };
        Either::Right(
            hyper_client
                .request(head.request_to(endpoint, body))
                .map_ok(|response| response.map(UpstreamIncoming::Hyper))
                .map_err(SendError::Hyper),
        )
    }

    /// The SRV answer cached for `owner` under `resolution` (the admin API
    /// shows its targets); never looks up.
    pub fn cached_srv(&self, owner: &str, resolution: &SrvResolution) -> Option<SrvAnswer> {
        self.dialing.srv.cached(owner, resolution)
    }

    fn pool_for(&self, key: PoolKey) -> PooledClient<B> {
        if let Some(client) = read(&self.others).get(&key) {
            return client.clone();
        }
        write(&self.others)
            .entry(key.clone())
            .or_insert_with(|| pooled_client(key, self.dialing.clone()))
            .clone()
    }
}

fn pooled_client<B>(key: PoolKey, dialing: Arc<Dialing>) -> PooledClient<B>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<BoxError>,
{
    let http2_only = key.transport == Transport::H2c;
    let connector = Connector {
        key: Arc::new(key),
        dialing,
    };
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .http1_max_buf_size(HTTP1_BUFFER_BYTES)
        .http2_initial_stream_window_size(H2_STREAM_WINDOW_BYTES)
        .http2_initial_connection_window_size(H2_CONNECTION_WINDOW_BYTES)
        .http2_max_send_buf_size(H2_SEND_BUFFER_BYTES)
        .http2_only(http2_only)
        .build(connector)
}
