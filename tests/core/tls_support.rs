//! Certificates made at test time and TLS servers on loopback: a test CA, leaf
//! certificates it signs for a name, self-signed ones no one trusts, and the
//! acceptor a backend serves them with; and the client side of dockhand's
//! HTTPS listener (a client configuration trusting a test CA, connections
//! by SNI, HTTPS requests over what ALPN chose). Nothing is read from or trusted by the
//! machine; every test brings its own roots.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::json;

use http::Version;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::client::TlsStream as ClientTlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

// `super::`: the Docker suite compiles this file too (see support.rs).
use super::support::{empty, read_reply, Reply, TestBody};

/// A certificate authority that exists for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate chain and its private key, as a server presents them.
pub struct ServerIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The chain and the key in PEM, as a certificates directory holds them.
    pub chain_pem: String,
    pub key_pem: String,
}

impl ServerIdentity {
    /// Writes the pair as `<dir>/<stem>.crt` and `<dir>/<stem>.key`
    /// (a pair of dockhand's `--certs-dir`).
    pub fn write_pair(&self, dir: &std::path::Path, stem: &str) {
        std::fs::write(dir.join(format!("{stem}.crt")), &self.chain_pem).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), &self.key_pem).unwrap();
    }
}

impl TestCa {
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        TestCa { issuer }
    }

    /// The CA certificate in PEM, for a process to trust it (`SSL_CERT_FILE`).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A root store trusting this CA only.
    pub fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.issuer.der().clone()).unwrap();
        Arc::new(roots)
    }

    /// A leaf for `name` (a DNS name, or an IP address for an IP SAN), signed by this CA.
    pub fn leaf(&self, name: &str) -> ServerIdentity {
        self.leaf_for(&[name])
    }

    /// A leaf for all of `names` (wildcards such as `*.example.test` too).
    pub fn leaf_for(&self, names: &[&str]) -> ServerIdentity {
        let names = names
            .iter()
            .map(|name| name.to_string())
            .collect::<Vec<_>>();
        self.signed_leaf(CertificateParams::new(names).unwrap())
    }

    /// A leaf for `name` signed by this CA that was valid during 2000 only.
    pub fn expired_leaf(&self, name: &str) -> ServerIdentity {
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        self.signed_leaf(params)
    }

    fn signed_leaf(&self, params: CertificateParams) -> ServerIdentity {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        ServerIdentity {
            chain: vec![cert.der().clone(), self.issuer.der().clone()],
            key: private_key(&key),
            chain_pem: cert.pem() + &self.issuer.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

/// A certificate for `name` that signs itself, so no root store trusts it.
pub fn self_signed(name: &str) -> ServerIdentity {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    ServerIdentity {
        chain: vec![cert.der().clone()],
        key: private_key(&key),
        chain_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

fn private_key(key: &KeyPair) -> PrivateKeyDer<'static> {
    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()))
}

/// A server-side acceptor (the `ring` provider) presenting `identity` and
/// offering `alpn` (such as `[b"h2", b"http/1.1"]`; empty offers nothing).
pub fn acceptor(identity: &ServerIdentity, alpn: &[&[u8]]) -> TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(identity.chain.clone(), identity.key.clone_key())
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    TlsAcceptor::from(Arc::new(config))
}

/// A loopback server that completes TLS handshakes with `acceptor` and then
/// holds each connection open until the client closes it.
pub struct HandshakeServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl HandshakeServer {
    pub async fn start(acceptor: TlsAcceptor) -> HandshakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A refused handshake ends here; the client reports why.
                    if let Ok(mut tls) = acceptor.accept(stream).await {
                        let mut buf = [0u8; 64];
                        while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                });
            }
        });
        HandshakeServer { addr, task }
    }
}

impl Drop for HandshakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTPS backend answering, as JSON, the HTTP `version`, `host` header and
/// URI `authority` each request came with.
pub async fn https_backend(acceptor: TlsAcceptor) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(|request: Request<Incoming>| async move {
                    let host = request
                        .headers()
                        .get("host")
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or("");
                    let authority = request.uri().authority().map_or("", |a| a.as_str());
                    let answer = json!({
                        "version": format!("{:?}", request.version()),
                        "host": host,
                        "authority": authority,
                    });
                    Ok::<_, Infallible>(Response::new(Full::new(bytes::Bytes::from(
                        answer.to_string(),
                    ))))
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

/// A client configuration (the `ring` provider) trusting `roots` only,
/// offering `alpn` (empty offers nothing) and TLS 1.3 and 1.2.
pub fn client_config(roots: Arc<RootCertStore>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    client_config_with(
        roots,
        alpn,
        &[&rustls::version::TLS13, &rustls::version::TLS12],
    )
}

/// As [`client_config`], with only the TLS `versions` given.
pub fn client_config_with(
    roots: Arc<RootCertStore>,
    alpn: &[&[u8]],
    versions: &[&'static SupportedProtocolVersion],
) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|protocol| protocol.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to `addr` asking for `server_name` (SNI), or the error
/// the handshake ended with.
pub async fn tls_connect(
    addr: SocketAddr,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> std::io::Result<ClientTlsStream<TcpStream>> {
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let stream = TcpStream::connect(addr).await?;
    TlsConnector::from(config).connect(name, stream).await
}

/// An HTTPS connection to `addr` for `server_name` speaking what ALPN
/// chose (HTTP/2 for `h2`, else HTTP/1.1), ready for requests.
pub async fn https_connection(
    addr: SocketAddr,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> HttpsSender {
    let tls = tls_connect(addr, server_name, config).await.unwrap();
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    if h2 {
        let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(connection);
        HttpsSender::H2(sender)
    } else {
        let (sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection.with_upgrades());
        HttpsSender::Http1(sender)
    }
}

/// A request sender over HTTPS, of the version the connection speaks.
pub enum HttpsSender {
    Http1(hyper::client::conn::http1::SendRequest<TestBody>),
    H2(hyper::client::conn::http2::SendRequest<TestBody>),
}

impl HttpsSender {
    /// Sends `GET https://host/path` (the Host header for HTTP/1.1, the
    /// authority for HTTP/2) and reads the reply whole.
    pub async fn get(&mut self, host: &str, path: &str) -> Reply {
        let request = Request::builder().uri(format!("https://{host}{path}"));
        let response = match self {
            HttpsSender::Http1(sender) => {
                let request = request.header("host", host).body(empty()).unwrap();
                sender.send_request(request).await
            }
            HttpsSender::H2(sender) => {
                let request = request.version(Version::HTTP_2).body(empty()).unwrap();
                sender.send_request(request).await
            }
        };
        read_reply(response.unwrap()).await
    }
}

/// The first flight of a TLS client (its ClientHello records) asking for
/// `server_name`, as bytes to send by hand.
pub fn client_hello(server_name: &str, config: Arc<ClientConfig>) -> Vec<u8> {
    let name = ServerName::try_from(server_name.to_owned()).unwrap();
    let mut client = rustls::ClientConnection::new(config, name).unwrap();
    let mut bytes = Vec::new();
    client.write_tls(&mut bytes).unwrap();
    bytes
}
