//! Opening one upstream connection: TCP with `TCP_NODELAY` to an address or
//! to a target of an SRV answer, then the TLS handshake when the transport
//! has one, all within `--connect-timeout`, failing with a typed
//! `ConnectError`. An attempt is abandoned when its address departs (leaves
//! the route table); the connection holds its address's retirement signal.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::connection::{IdleReader, Stream, UpstreamConnection};
use super::error::ConnectError;
use super::srv::SrvResolvers;
use super::tls::{handshake, system_roots, ClientConfigs, TlsHandshakeError, TlsSettings};
use crate::config::{SrvResolution, TlsServerName};
use crate::resolve::srv::{dial, dial_rng};
use crate::resolve::{SrvConnection, SrvDialError};
use crate::upstream::{Destination, EndpointRegistry, Transport};

/// What a pool's connections have in common: the transport, and where they
/// go. HTTP/1.1 in cleartext shares one pool for every address (the URI says
/// which); the others, which may speak HTTP/2 and so send the URI's
/// authority as `:authority`, have a pool per destination, so the URI can
/// carry the host the upstream expects instead of the address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct PoolKey {
    pub(super) transport: Transport,
    pub(super) destination: Option<Destination>,
}

/// What every connector shares.
pub(super) struct Dialing {
    pub(super) connect_timeout: Duration,
    pub(super) registry: Arc<EndpointRegistry>,
    /// Made at the first TLS connection, so a proxy without TLS upstreams
    /// never reads the system's roots (nor warns that it has none).
    pub(super) tls: OnceLock<ClientConfigs>,
    pub(super) srv: SrvResolvers,
}

/// Opens the connections of one pool: to the address in a request's URI, or
/// to a target of the SRV owner's answer; then the TLS handshake if the
/// transport has one. All of it within `--connect-timeout`.
#[derive(Clone)]
pub struct Connector {
    pub(super) key: Arc<PoolKey>,
    pub(super) dialing: Arc<Dialing>,
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
        Box::pin(async move { connector.connect(&uri).await.map(TokioIo::new) })
    }
}

impl Connector {
    /// Opens a connection, abandoned as soon as its address departs (see
    /// `EndpointRegistry::departure`): nothing has been sent on it yet, so
    /// the request can go where the location's upstreams are now.
    pub(super) async fn connect(&self, uri: &Uri) -> Result<UpstreamConnection, ConnectError> {
        let address = match &self.key.destination {
            Some(Destination::Address(address)) => Some(*address),
            // An SRV target's address is known once it is dialed.
            Some(Destination::Srv { .. }) => None,
            // The shared pool's URIs carry the IP address and port we wrote.
            None => Some(
                uri.authority()
                    .and_then(|authority| authority.as_str().parse().ok())
                    .ok_or(ConnectError::NoAddress)?,
            ),
        };
        self.connect_at(address, IdleReader::Hyper).await
    }

    /// Opens a connection to `address` for the own exchange (which knows
    /// the address, and keeps the connection in its own pool), abandoned as
    /// `connect`'s is.
    pub(super) async fn connect_to(
        &self,
        address: SocketAddr,
    ) -> Result<UpstreamConnection, ConnectError> {
        self.connect_at(Some(address), IdleReader::Pool).await
    }

    /// `address`: where to connect, unless the pool's destination is an SRV owner.
    async fn connect_at(
        &self,
        address: Option<SocketAddr>,
        idle_reader: IdleReader,
    ) -> Result<UpstreamConnection, ConnectError> {
        let departure = address.and_then(|address| {
            self.dialing
                .registry
                .departure(&self.key.transport, address)
        });
        let Some(departure) = departure else {
            return self.open(address, idle_reader).await;
        };
        tokio::select! {
            // Also when both are ready: the connection may be to a newcomer.
            biased;
            () = departure.cancelled() => Err(ConnectError::Departed),
            opened = self.open(address, idle_reader) => opened,
        }
    }

    /// `address`: where to connect, unless the pool's destination is an SRV owner.
    async fn open(
        &self,
        address: Option<SocketAddr>,
        idle_reader: IdleReader,
    ) -> Result<UpstreamConnection, ConnectError> {
        let started = Instant::now();
        let timeout = self.dialing.connect_timeout;
        let (tcp, address, srv_target) = match (&self.key.destination, address) {
            (Some(Destination::Srv { owner, resolution }), _) => {
                let connection = self.dial_srv(owner, resolution).await?;
                (
                    connection.stream,
                    connection.address,
                    Some(connection.target),
                )
            }
            (_, Some(address)) => (connect_tcp(address, timeout).await?, address, None),
            (_, None) => return Err(ConnectError::NoAddress),
        };
        let stream = match &self.key.transport {
            Transport::Http1 | Transport::H2c => Stream::Tcp(tcp),
            Transport::Tls(target) => {
                let server_name = target.sni.as_deref().or_else(|| {
                    let Some(Destination::Srv { owner, resolution }) = &self.key.destination else {
                        return None;
                    };
                    Some(match resolution.tls_server_name {
                        TlsServerName::Owner => &**owner,
                        TlsServerName::Target => srv_target.as_deref()?,
                    })
                });
                let settings = TlsSettings::new(
                    server_name,
                    address.ip(),
                    self.dialing
                        .tls
                        .get_or_init(|| ClientConfigs::new(system_roots()))
                        .get(target.verify),
                )
                .map_err(TlsHandshakeError::from)?;
                let left = timeout.saturating_sub(started.elapsed());
                let connection = tokio::time::timeout(left, handshake(tcp, &settings))
                    .await
                    .map_err(|_| ConnectError::TimedOut("the TLS handshake"))??;
                Stream::Tls(Box::new(connection))
            }
        };
        // An SRV pool's targets come and go with the answer; its idle
        // connections end with the pool's idle timeout.
        let retirement = match self.key.destination {
            Some(Destination::Srv { .. }) => None,
            _ => self
                .dialing
                .registry
                .retirement(&self.key.transport, address),
        };
        Ok(UpstreamConnection::new(stream, retirement, idle_reader))
    }

    async fn dial_srv(
        &self,
        owner: &str,
        resolution: &SrvResolution,
    ) -> Result<SrvConnection<TcpStream>, ConnectError> {
        let resolver = self.dialing.srv.resolver(resolution).await?;
        let connect = |address, time| async move {
            let stream = tokio::time::timeout(time, TcpStream::connect(address))
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
            stream.set_nodelay(true)?;
            Ok(stream)
        };
        let mut rng = dial_rng();
        let timeout = self.dialing.connect_timeout;
        dial(&resolver, owner, timeout, &mut rng, connect)
            .await
            .map_err(|error| srv_dial_error(owner, error))
    }
}

/// A TCP connection with `TCP_NODELAY`, within `timeout`.
pub async fn connect_tcp(
    address: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
    let stream = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
        Err(_) => return Err(ConnectError::TimedOut("connecting")),
        Ok(Err(error)) => return Err(io_connect_error(error)),
        Ok(Ok(stream)) => stream,
    };
    stream.set_nodelay(true).map_err(ConnectError::Failed)?;
    Ok(stream)
}

fn io_connect_error(error: io::Error) -> ConnectError {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => ConnectError::Refused,
        io::ErrorKind::TimedOut => ConnectError::TimedOut("connecting"),
        _ => ConnectError::Failed(error),
    }
}

/// What dialing an SRV owner's targets failed with. The targets' own lookups
/// come back from the dial as `NotFound` I/O errors (found no records, or
/// the lookup failed): a DNS failure either way, as the text tells.
fn srv_dial_error(owner: &str, error: SrvDialError) -> ConnectError {
    let lookup = |error| ConnectError::Lookup {
        name: owner.to_owned(),
        error: Box::new(error),
    };
    match error {
        SrvDialError::Unavailable => ConnectError::NoTargets(owner.to_owned()),
        SrvDialError::TimedOut => ConnectError::TimedOut("resolving and connecting to SRV targets"),
        SrvDialError::AllFailed(io) if io.kind() == io::ErrorKind::NotFound => {
            lookup(SrvDialError::AllFailed(io))
        }
        SrvDialError::AllFailed(io) => io_connect_error(io),
        lookup_failed @ SrvDialError::LookupFailed(_) => lookup(lookup_failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    #[tokio::test]
    async fn connections_are_opened_with_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let stream = connect_tcp(listener.local_addr().unwrap(), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(stream.nodelay().unwrap());
    }

    #[test]
    fn srv_dial_failures_become_what_failed() {
        let dialed = |error| srv_dial_error("_app._tcp.example.test", error);
        let all_failed = |kind, text: &str| SrvDialError::AllFailed(io::Error::new(kind, text));
        assert!(matches!(
            dialed(SrvDialError::Unavailable),
            ConnectError::NoTargets(owner) if owner == "_app._tcp.example.test"
        ));
        let servfail = dialed(SrvDialError::LookupFailed("SERVFAIL".into()));
        assert!(matches!(servfail, ConnectError::Lookup { .. }));
        assert!(servfail.source().unwrap().to_string().contains("SERVFAIL"));
        let target_lookup = dialed(all_failed(io::ErrorKind::NotFound, "SRV target x: gone"));
        assert!(matches!(target_lookup, ConnectError::Lookup { .. }));
        assert!(matches!(
            dialed(all_failed(io::ErrorKind::ConnectionRefused, "refused")),
            ConnectError::Refused
        ));
        assert!(matches!(
            dialed(all_failed(io::ErrorKind::TimedOut, "slow")),
            ConnectError::TimedOut(_)
        ));
        assert!(matches!(
            dialed(SrvDialError::TimedOut),
            ConnectError::TimedOut(_)
        ));
        assert!(matches!(
            dialed(all_failed(io::ErrorKind::HostUnreachable, "no route")),
            ConnectError::Failed(_)
        ));
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
