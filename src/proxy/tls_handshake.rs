//! The TLS side of an HTTPS client connection, before HTTP is served on it.
//! The ClientHello is read first and the certificate chosen for it: one
//! without a server name, or for a name with no certificate, is refused
//! then with an alert, before rustls does any handshake work (no key
//! exchange, no signature). The whole handshake runs under
//! `--tls-handshake-timeout`, so a client that sends nothing, or half a
//! ClientHello, holds its connection no longer. A connection that
//! negotiated `acme-tls/1` is ACME's validation: it ends after its
//! handshake, as RFC 8737 §3 asks. Every handshake is counted once by how
//! it ended (refusals by the resolver, the rest here).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::{Accepted, Acceptor};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::server::TlsStream;
use tokio_rustls::StartHandshake;

use crate::metrics::{Metrics, TlsHandshake};
use crate::tls::{
    refused_by_resolver, server_config, SniResolver, TlsState, ACME_TLS_ALPN_PROTOCOL,
};

/// What the HTTPS listener's handshakes share: one rustls configuration,
/// built once, and the resolver that screens ClientHellos before it.
pub struct TlsTermination {
    config: Arc<ServerConfig>,
    screen: SniResolver,
    metrics: Arc<Metrics>,
    timeout: Duration,
}

/// How a ClientHello that was refused is told: a fatal alert record
/// (TLS 1.2 framing, which TLS 1.3 clients read as well).
fn alert_record(description: u8) -> [u8; 7] {
    const ALERT: u8 = 21;
    const FATAL: u8 = 2;
    [ALERT, 3, 3, 0, 2, FATAL, description]
}

/// RFC 6066 §3: the name the client asked for is not served here.
const UNRECOGNIZED_NAME: u8 = 112;
/// RFC 8446 §6.2: no acceptable set of parameters (here: no name at all).
const HANDSHAKE_FAILURE: u8 = 40;

impl TlsTermination {
    pub fn new(
        tls: Arc<TlsState>,
        metrics: Arc<Metrics>,
        timeout: Duration,
    ) -> Result<TlsTermination, rustls::Error> {
        Ok(TlsTermination {
            config: server_config(SniResolver::new(tls.clone(), metrics.clone()))?,
            screen: SniResolver::new(tls, metrics.clone()),
            metrics,
            timeout,
        })
    }

    /// Runs the handshake on `stream`; `None` when the connection ends
    /// with it (refused, failed, timed out, or ACME's validation).
    pub async fn accept<S>(&self, stream: S, client: SocketAddr) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let ended = match tokio::time::timeout(self.timeout, self.handshake(stream)).await {
            Ok(Ok(Some(tls))) => {
                self.metrics.tls_handshake(TlsHandshake::Completed);
                return self.unless_validation(tls).await;
            }
            // Refused by the resolver, which counted it.
            Ok(Ok(None)) => return None,
            Ok(Err(error)) if refused_by_resolver(&error) => return None,
            Ok(Err(error)) => {
                tracing::debug!(%error, %client, "TLS handshake failed");
                TlsHandshake::Failed
            }
            Err(_) => {
                tracing::debug!(%client, timeout = ?self.timeout, "TLS handshake not finished within --tls-handshake-timeout");
                TlsHandshake::TimedOut
            }
        };
        self.metrics.tls_handshake(ended);
        None
    }

    /// The ClientHello, screened, then the rest of the handshake.
    async fn handshake<S>(&self, mut stream: S) -> io::Result<Option<TlsStream<S>>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let accepted = read_client_hello(&mut stream).await?;
        if let Err(refused) = self.screen.choose(&accepted.client_hello()) {
            let description = match refused {
                TlsHandshake::NoServerName => HANDSHAKE_FAILURE,
                _ => UNRECOGNIZED_NAME,
            };
            // Best effort: the client learns why rather than seeing a bare close.
            let _ = stream.write_all(&alert_record(description)).await;
            let _ = stream.shutdown().await;
            return Ok(None);
        }
        StartHandshake::from_parts(accepted, stream)
            .into_stream(self.config.clone())
            .await
            .map(Some)
    }

    /// A connection that negotiated `acme-tls/1` has been validated by its
    /// handshake and carries nothing else: it is closed.
    async fn unless_validation<S>(&self, mut tls: TlsStream<S>) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if tls.get_ref().1.alpn_protocol() != Some(ACME_TLS_ALPN_PROTOCOL) {
            return Some(tls);
        }
        let _ = tls.shutdown().await;
        None
    }
}

/// Reads records until the ClientHello is whole. What is not a ClientHello
/// gets rustls' alert and ends the connection.
async fn read_client_hello<S>(stream: &mut S) -> io::Result<Accepted>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut acceptor = Acceptor::default();
    let mut buffer = [0u8; 4096];
    loop {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let mut bytes = &buffer[..read];
        while !bytes.is_empty() {
            if acceptor.read_tls(&mut bytes)? == 0 {
                return Err(io::Error::other(
                    "the ClientHello does not fit rustls' buffer",
                ));
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted),
            Ok(None) => continue,
            Err((error, mut alert)) => {
                let mut record = Vec::new();
                let _ = alert.write_all(&mut record);
                let _ = stream.write_all(&record).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rcgen::{CertificateParams, KeyPair};
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, RootCertStore};
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use crate::tls::Certificate;

    const NAME: &str = "acme.test";

    /// RFC 8737 §3: the TLS-ALPN-01 handshake is the whole exchange; the
    /// connection carries no HTTP and is closed once it is done.
    #[tokio::test]
    async fn a_connection_that_negotiated_acme_tls_is_closed_after_its_handshake() {
        let key = KeyPair::generate().unwrap();
        let challenge = CertificateParams::new(vec![NAME.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let private_key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let certificate =
            Certificate::from_der(vec![challenge.der().clone()], private_key).unwrap();
        let tls = TlsState::new();
        tls.challenges.set_tls_alpn01(NAME, certificate.key.clone());
        let termination =
            TlsTermination::new(tls, Arc::default(), Duration::from_secs(10)).unwrap();

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (stream, client) = listener.accept().await.unwrap();
            termination.accept(stream, client).await.is_some()
        });

        // The validation server trusts the challenge certificate itself.
        let mut roots = RootCertStore::empty();
        roots.add(challenge.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![ACME_TLS_ALPN_PROTOCOL.to_vec()];
        let stream = TcpStream::connect(address).await.unwrap();
        let mut client = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from(NAME).unwrap(), stream)
            .await
            .expect("the challenge certificate answers");
        assert_eq!(
            client.get_ref().1.alpn_protocol(),
            Some(ACME_TLS_ALPN_PROTOCOL)
        );
        assert!(!server.await.unwrap(), "not handed on to HTTP");
        let mut rest = Vec::new();
        let read = client.read_to_end(&mut rest).await;
        assert!(rest.is_empty() && read.is_ok(), "closed cleanly: {read:?}");
    }
}
