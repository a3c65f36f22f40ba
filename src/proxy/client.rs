//! The pooled upstream client: keep-alive connections per upstream address and
//! protocol, reused across requests and across route-table changes. Connecting
//! is bounded by `--connect-timeout`, sets `TCP_NODELAY`, and fails with a typed
//! `ConnectError` so the proxy can tell refused from timed out.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use super::request_body::UpstreamBody;
use crate::config::Protocol;

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
    #[error("upstream URI has no address")]
    NoAddress,
}

/// Opens TCP connections to the address in a request's URI.
#[derive(Clone)]
pub struct Connector {
    connect_timeout: Duration,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.connect_timeout;
        Box::pin(async move {
            // The URI's authority is always an IP address and port we wrote.
            let address: std::net::SocketAddr = uri
                .authority()
                .and_then(|authority| authority.as_str().parse().ok())
                .ok_or(ConnectError::NoAddress)?;
            let stream = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
                Err(_) => return Err(ConnectError::TimedOut),
                Ok(Err(error)) if error.kind() == io::ErrorKind::ConnectionRefused => {
                    return Err(ConnectError::Refused)
                }
                Ok(Err(error)) => return Err(ConnectError::Failed(error)),
                Ok(Ok(stream)) => stream,
            };
            stream.set_nodelay(true).map_err(ConnectError::Failed)?;
            Ok(TokioIo::new(stream))
        })
    }
}

/// One pool per upstream protocol; each pools by address.
#[derive(Clone)]
pub struct UpstreamClient {
    http1: Client<Connector, UpstreamBody>,
    h2c: Client<Connector, UpstreamBody>,
}

impl UpstreamClient {
    pub fn new(connect_timeout: Duration) -> UpstreamClient {
        let connector = Connector { connect_timeout };
        let build = |http2_only: bool| {
            Client::builder(TokioExecutor::new())
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                .http2_only(http2_only)
                .build(connector.clone())
        };
        UpstreamClient {
            http1: build(false),
            h2c: build(true),
        }
    }

    pub fn send(
        &self,
        protocol: Protocol,
        request: Request<UpstreamBody>,
    ) -> hyper_util::client::legacy::ResponseFuture {
        match protocol {
            Protocol::Http1 => self.http1.request(request),
            Protocol::H2c => self.h2c.request(request),
        }
    }
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
    use tower_service::Service;

    fn connector() -> Connector {
        Connector {
            connect_timeout: Duration::from_secs(5),
        }
    }

    #[tokio::test]
    async fn connections_are_opened_with_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}/", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let stream = connector().call(uri).await.unwrap();
        assert!(stream.inner().nodelay().unwrap());
    }

    #[tokio::test]
    async fn a_refused_connection_is_told_apart() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let uri: Uri = format!("http://{closed}/").parse().unwrap();
        assert!(matches!(
            connector().call(uri).await,
            Err(ConnectError::Refused)
        ));
    }
}
