//! The TLS handshake with upstreams, against real loopback TLS servers with
//! certificates made for each test: what `verify` trusts and refuses, the
//! server name sent, ALPN, and the connection as the pooled client uses it.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Uri, Version};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::{CertificateError, RootCertStore};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use dockhand::connect::tls::{
    handshake, ClientConfigs, TlsConnection, TlsHandshakeError, TlsSettings,
};

use crate::tls_support::{acceptor, https_backend, self_signed, HandshakeServer, TestCa};

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const BOTH: &[&[u8]] = &[b"h2", b"http/1.1"];
const HTTP1_ONLY: &[&[u8]] = &[b"http/1.1"];

fn settings(sni: Option<&str>, verify: bool, roots: Arc<RootCertStore>) -> TlsSettings {
    let config = ClientConfigs::new(roots).get(verify);
    TlsSettings::new(sni, LOOPBACK, config).expect("a valid server name")
}

async fn connect(
    server: &HandshakeServer,
    settings: &TlsSettings,
) -> Result<TlsConnection<TcpStream>, TlsHandshakeError> {
    let stream = TcpStream::connect(server.addr).await.unwrap();
    handshake(stream, settings).await
}

#[tokio::test]
async fn verify_accepts_a_certificate_from_a_trusted_ca_for_the_name() {
    let ca = TestCa::new("test ca");
    let server = HandshakeServer::start(acceptor(&ca.leaf("api.example.test"), BOTH)).await;
    let settings = settings(Some("api.example.test"), true, ca.roots());
    connect(&server, &settings)
        .await
        .expect("a trusted certificate for the name");
}

#[tokio::test]
async fn verify_refuses_a_certificate_from_an_untrusted_ca() {
    let trusted = TestCa::new("trusted ca");
    let other = TestCa::new("other ca");
    let server = HandshakeServer::start(acceptor(&other.leaf("api.example.test"), BOTH)).await;
    let settings = settings(Some("api.example.test"), true, trusted.roots());
    let error = connect(&server, &settings).await.expect_err("untrusted");
    assert!(
        matches!(
            error,
            TlsHandshakeError::Certificate(CertificateError::UnknownIssuer)
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn verify_refuses_a_certificate_for_another_name() {
    let ca = TestCa::new("test ca");
    let server = HandshakeServer::start(acceptor(&ca.leaf("other.example.test"), BOTH)).await;
    let settings = settings(Some("api.example.test"), true, ca.roots());
    let error = connect(&server, &settings).await.expect_err("wrong name");
    assert!(
        matches!(
            error,
            TlsHandshakeError::Certificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            )
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn verify_refuses_a_self_signed_certificate() {
    let server = HandshakeServer::start(acceptor(&self_signed("api.example.test"), BOTH)).await;
    let settings = settings(Some("api.example.test"), true, TestCa::new("ca").roots());
    let error = connect(&server, &settings).await.expect_err("self-signed");
    assert!(
        matches!(error, TlsHandshakeError::Certificate(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn without_verify_an_untrusted_self_signed_certificate_is_accepted() {
    let server = HandshakeServer::start(acceptor(&self_signed("whatever.internal"), BOTH)).await;
    let roots = Arc::new(RootCertStore::empty());
    for sni in [Some("api.example.test"), None] {
        let settings = settings(sni, false, roots.clone());
        connect(&server, &settings)
            .await
            .unwrap_or_else(|error| panic!("sni {sni:?}: {error}"));
    }
}

#[tokio::test]
async fn without_sni_the_ip_address_is_the_server_name() {
    let ca = TestCa::new("test ca");
    let server = HandshakeServer::start(acceptor(&ca.leaf("127.0.0.1"), BOTH)).await;
    let settings = settings(None, true, ca.roots());
    assert_eq!(
        settings.server_name(),
        &rustls::pki_types::ServerName::IpAddress(LOOPBACK.into())
    );
    connect(&server, &settings)
        .await
        .expect("a certificate for the IP address");
}

#[tokio::test]
async fn alpn_chooses_h2_when_the_upstream_offers_it_and_http1_otherwise() {
    let ca = TestCa::new("test ca");
    let leaf = ca.leaf("api.example.test");
    let settings = settings(Some("api.example.test"), true, ca.roots());
    for (offered, expect_h2) in [(BOTH, true), (HTTP1_ONLY, false), (&[][..], false)] {
        let server = HandshakeServer::start(acceptor(&leaf, offered)).await;
        let connection = connect(&server, &settings).await.expect("handshake");
        assert_eq!(connection.negotiated_h2(), expect_h2, "offered {offered:?}");
        let connected = TokioIo::new(connection).connected();
        assert_eq!(
            connected.is_negotiated_h2(),
            expect_h2,
            "offered {offered:?}"
        );
    }
}

#[tokio::test]
async fn a_server_that_does_not_speak_tls_is_a_handshake_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let _ = stream
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    let stream = TcpStream::connect(addr).await.unwrap();
    let settings = settings(
        Some("api.example.test"),
        false,
        Arc::new(RootCertStore::empty()),
    );
    let error = handshake(stream, &settings).await.expect_err("not TLS");
    assert!(
        matches!(
            error,
            TlsHandshakeError::Protocol(_) | TlsHandshakeError::Io(_)
        ),
        "{error:?}"
    );
}

/// Connects the pooled client's way: TCP, then the handshake.
#[derive(Clone)]
struct TlsConnector {
    settings: TlsSettings,
}

impl tower_service::Service<Uri> for TlsConnector {
    type Response = TokioIo<TlsConnection<TcpStream>>;
    type Error = TlsHandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let settings = self.settings.clone();
        Box::pin(async move {
            let address: SocketAddr = uri.authority().unwrap().as_str().parse().unwrap();
            let stream = TcpStream::connect(address).await?;
            Ok(TokioIo::new(handshake(stream, &settings).await?))
        })
    }
}

#[tokio::test]
async fn the_pooled_client_speaks_the_protocol_alpn_chose() {
    let ca = TestCa::new("test ca");
    let leaf = ca.leaf("api.example.test");
    let settings = settings(Some("api.example.test"), true, ca.roots());
    for (offered, expected) in [(BOTH, Version::HTTP_2), (HTTP1_ONLY, Version::HTTP_11)] {
        let addr = https_backend(acceptor(&leaf, offered)).await;
        let client = Client::builder(TokioExecutor::new()).build(TlsConnector {
            settings: settings.clone(),
        });
        let request = Request::get(format!("http://{addr}/"))
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = client.request(request).await.expect("a response");
        assert_eq!(response.version(), expected, "offered {offered:?}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            answer["version"],
            format!("{expected:?}"),
            "offered {offered:?}"
        );
    }
}
