//! The HTTPS listener, end to end with real TLS clients (rustls) on
//! loopback: the certificate chosen by SNI for TLS 1.3 and 1.2 clients,
//! ALPN choosing HTTP/2 or HTTP/1.1, session resumption, refusals of no
//! SNI and unknown names (counted, never answered with another host's
//! certificate), what upstreams learn of the scheme, and the handshake's
//! own timeout against clients that never finish it.

use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;
use rustls::{AlertDescription, HandshakeKind, ProtocolVersion, RootCertStore};

use dockhand::settings::Settings;

use crate::support::*;
use crate::tls_support::*;

const APP: &str = "app.example.test";
const WILDCARD: &str = "*.wild.example.test";
const UNDER_WILDCARD: &str = "api.wild.example.test";

/// A proxy serving `APP` (its own certificate) and `UNDER_WILDCARD` (a
/// wildcard certificate) from one echo backend, and the CA behind both.
struct Site {
    proxy: Proxy,
    ca: TestCa,
    app: ServerIdentity,
    wildcard: ServerIdentity,
    _backend: Backend,
}

impl Site {
    async fn start(settings: Settings) -> Site {
        let backend = Backend::echo("echo").await;
        let routes = serde_json::json!({"host": {
            APP: {"location": {"/": {"upstream": {backend.addr.to_string(): {}}}}},
            UNDER_WILDCARD: {"location": {"/": {"upstream": {backend.addr.to_string(): {}}}}},
        }})
        .to_string();
        let ca = TestCa::new("dockhand https test CA");
        let app = ca.leaf(APP);
        let wildcard = ca.leaf_for(&[WILDCARD]);
        let proxy = Proxy::start_https(&routes, &[&app, &wildcard], settings).await;
        Site {
            proxy,
            ca,
            app,
            wildcard,
            _backend: backend,
        }
    }

    fn https(&self) -> SocketAddr {
        self.proxy.https.unwrap()
    }

    fn roots(&self) -> Arc<RootCertStore> {
        self.ca.roots()
    }

    async fn handshakes(&self, result: &str) -> f64 {
        let series = format!("dockhand_tls_handshakes_total{{result=\"{result}\"}}");
        value_of(&scrape(self.proxy.admin).await, &series).unwrap()
    }
}

/// The alert a refused handshake ended with, as the client received it.
fn alert_of(error: &std::io::Error) -> Option<AlertDescription> {
    match error.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::AlertReceived(alert) => Some(*alert),
        _ => None,
    }
}

#[tokio::test]
async fn tls13_and_tls12_clients_get_the_certificate_of_the_name_they_ask_for() {
    let site = Site::start(test_settings()).await;
    let versions = [
        (&rustls::version::TLS13, ProtocolVersion::TLSv1_3),
        (&rustls::version::TLS12, ProtocolVersion::TLSv1_2),
    ];
    for (version, expected) in versions {
        let config = client_config_with(site.roots(), &[b"http/1.1"], &[version]);
        for (name, identity) in [(APP, &site.app), (UNDER_WILDCARD, &site.wildcard)] {
            let tls = tls_connect(site.https(), name, config.clone())
                .await
                .unwrap();
            let (_, connection) = tls.get_ref();
            assert_eq!(connection.protocol_version(), Some(expected), "{name}");
            assert_eq!(
                connection.peer_certificates().unwrap()[0],
                identity.chain[0],
                "{name} over {expected:?}: the certificate that names it"
            );
        }
    }
}

/// RFC 7301 §3.2: the server picks from the client's ALPN list; hyper then
/// speaks what was picked (RFC 9113 §3.2: `h2` is HTTP/2 over TLS).
#[tokio::test]
async fn alpn_h2_gets_http2_and_http11_gets_http1_with_x_forwarded_proto_https() {
    let site = Site::start(test_settings()).await;
    for (alpn, h2) in [(b"h2".as_slice(), true), (b"http/1.1".as_slice(), false)] {
        let config = client_config(site.roots(), &[alpn]);
        let mut sender = https_connection(site.https(), APP, config).await;
        assert_eq!(matches!(sender, HttpsSender::H2(_)), h2);
        let reply = sender.get(APP, "/where").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        assert_eq!(reply.header("x-backend"), "echo");
        assert_eq!(
            reply.echoed_header("x-forwarded-proto").as_deref(),
            Some("https")
        );
        assert_eq!(
            reply.echoed_header("x-forwarded-port"),
            Some(site.https().port().to_string())
        );
        let forwarded = reply.echoed_header("forwarded").unwrap();
        assert!(forwarded.contains("proto=https"), "{forwarded}");
    }
    // A client that offers no ALPN at all speaks HTTP/1.1.
    let mut sender = https_connection(site.https(), APP, client_config(site.roots(), &[])).await;
    assert_eq!(sender.get(APP, "/").await.status, StatusCode::OK);
}

/// RFC 8446 §2.2 (TLS 1.3 tickets) and RFC 5077 (TLS 1.2 tickets): a client
/// that comes back resumes instead of a full handshake.
#[tokio::test]
async fn a_second_connection_resumes_the_session() {
    let site = Site::start(test_settings()).await;
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        // One configuration: its session store carries the ticket over.
        let config = client_config_with(site.roots(), &[b"http/1.1"], &[version]);
        let mut first = https_connection(site.https(), APP, config.clone()).await;
        // TLS 1.3 tickets come after the handshake: a reply reads them.
        assert_eq!(first.get(APP, "/").await.status, StatusCode::OK);
        let again = tls_connect(site.https(), APP, config).await.unwrap();
        assert_eq!(
            again.get_ref().1.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "{version:?}"
        );
    }
}

/// RFC 6066 §3: a name the server does not serve gets `unrecognized_name`;
/// no name at all, a handshake failure. Neither gets a certificate: the
/// client fails on the alert, not on verifying someone else's.
#[tokio::test]
async fn no_sni_and_an_unknown_sni_are_refused_and_counted() {
    let site = Site::start(test_settings()).await;
    let config = client_config(site.roots(), &[b"h2", b"http/1.1"]);
    let unknown = tls_connect(site.https(), "other.example.test", config.clone())
        .await
        .unwrap_err();
    assert_eq!(
        alert_of(&unknown),
        Some(AlertDescription::UnrecognisedName),
        "{unknown}"
    );
    // rustls sends no SNI for an IP address.
    let nameless = tls_connect(site.https(), "127.0.0.1", config.clone())
        .await
        .unwrap_err();
    assert_eq!(
        alert_of(&nameless),
        Some(AlertDescription::HandshakeFailure),
        "{nameless}"
    );
    assert_eq!(site.handshakes("unknown_server_name").await, 1.0);
    assert_eq!(site.handshakes("no_server_name").await, 1.0);
    assert_eq!(site.handshakes("failed").await, 0.0);
    // A served name still gets through, and is counted once.
    tls_connect(site.https(), APP, config).await.unwrap();
    eventually("the completed handshake counted", || async {
        site.handshakes("completed").await == 1.0
    })
    .await;
}
