//! The pooled upstream client: keep-alive connections per endpoint (address
//! and transport: HTTP/1.1, h2c, or TLS with its server name and
//! verification), reused across requests and across route-table changes.
//! Connecting is bounded by `--connect-timeout`, sets `TCP_NODELAY`, and
//! fails with a typed `ConnectError` so the proxy can tell refused from timed
//! out from a failed TLS handshake.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use super::connection::{Stream, UpstreamConnection};
use super::request_body::UpstreamBody;
use crate::upstream::{Destination, Endpoint, EndpointRegistry, Transport};

/// How long an unused pooled connection is kept.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused")]
    Refused,
    #[error("connect timed out")]
    TimedOut,
    #[error("connect failed: {0}")]
    Failed(io::Error),
    #[error("TLS handshake failed: {0}")]
    Handshake(String),
    /// The service has no target (an SRV answer without one).
    #[error("no target available")]
    Unavailable,
    #[error("upstream URI has no address")]
    NoAddress,
}

/// Opens connections for one transport to the address in a request's URI.
#[derive(Clone)]
pub struct Connector {
    transport: Transport,
    connect_timeout: Duration,
    registry: Arc<EndpointRegistry>,
}

type Connecting =
    Pin<Box<dyn Future<Output = Result<TokioIo<UpstreamConnection>, ConnectError>> + Send>>;

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<UpstreamConnection>;
    type Error = ConnectError;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            // The URI's authority is always an IP address and port we wrote.
            let address: SocketAddr = uri
                .authority()
                .and_then(|authority| authority.as_str().parse().ok())
                .ok_or(ConnectError::NoAddress)?;
            let tcp = connect_tcp(address, connector.connect_timeout).await?;
            let stream = match &connector.transport {
                Transport::Http1 | Transport::H2c => Stream::Tcp(tcp),
                Transport::Tls(_) => {
                    return Err(ConnectError::Handshake("TLS is not available".into()))
                }
            };
            let retirement = connector.registry.retirement(&connector.transport, address);
            Ok(TokioIo::new(UpstreamConnection::new(stream, retirement)))
        })
    }
}

/// A TCP connection with `TCP_NODELAY`, within `timeout`.
pub async fn connect_tcp(
    address: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
        Err(_) => return Err(ConnectError::TimedOut),
        Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => {
            return Err(ConnectError::Refused)
        }
        Ok(Err(error)) => return Err(ConnectError::Failed(error)),
        Ok(Ok(stream)) => stream,
    };
    stream.set_nodelay(true).map_err(ConnectError::Failed)?;
    Ok(stream)
}

type PooledClient = Client<Connector, UpstreamBody>;

/// One pool per transport; each pools by address.
pub struct UpstreamClient {
    http1: PooledClient,
    h2c: PooledClient,
    /// Pools for the other transports, made when first used.
    others: RwLock<HashMap<Transport, PooledClient>>,
    connect_timeout: Duration,
    registry: Arc<EndpointRegistry>,
}

impl UpstreamClient {
    pub fn new(connect_timeout: Duration, registry: Arc<EndpointRegistry>) -> UpstreamClient {
        let build = |transport| pooled_client(transport, connect_timeout, registry.clone());
        UpstreamClient {
            http1: build(Transport::Http1),
            h2c: build(Transport::H2c),
            others: RwLock::default(),
            connect_timeout,
            registry,
        }
    }

    pub fn send(&self, endpoint: &Endpoint, request: Request<UpstreamBody>) -> ResponseFuture {
        match (&endpoint.destination, &endpoint.transport) {
            (Destination::Address(_), Transport::Http1) => self.http1.request(request),
            (Destination::Address(_), Transport::H2c) => self.h2c.request(request),
            (_, transport) => self.pool_for(transport).request(request),
        }
    }

    fn pool_for(&self, transport: &Transport) -> PooledClient {
        if let Some(client) = read(&self.others).get(transport) {
            return client.clone();
        }
        write(&self.others)
            .entry(transport.clone())
            .or_insert_with(|| {
                pooled_client(
                    transport.clone(),
                    self.connect_timeout,
                    self.registry.clone(),
                )
            })
            .clone()
    }
}

fn pooled_client(
    transport: Transport,
    connect_timeout: Duration,
    registry: Arc<EndpointRegistry>,
) -> PooledClient {
    let http2_only = transport == Transport::H2c;
    let connector = Connector {
        transport,
        connect_timeout,
        registry,
    };
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .http2_only(http2_only)
        .build(connector)
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The connect error behind a client error, if connecting is what failed.
pub fn connect_error(error: &hyper_util::client::legacy::Error) -> Option<&ConnectError> {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(connect) = cause.downcast_ref::<ConnectError>() {
            return Some(connect);
        }
        source = cause.source();
    }
    None
}

pub type UpstreamResponse = Response<Incoming>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_are_opened_with_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = connect_tcp(listener.local_addr().unwrap(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(stream.nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_apart() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(matches!(
            connect_tcp(closed, Duration::from_secs(5)).await,
            Err(ConnectError::Refused)
        ));
    }
}
