//! The HTTPS listener, end to end with real TLS clients (rustls) on
//! loopback: the certificate chosen by SNI for TLS 1.3 and 1.2 clients,
//! ALPN choosing HTTP/2 or HTTP/1.1, session resumption, refusals of no
//! SNI and unknown names (counted, never answered with another host's
//! certificate), what upstreams learn of the scheme, and the handshake's
//! own timeout against clients that never finish it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use rustls::{AlertDescription, HandshakeKind, ProtocolVersion, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
        // Counted open by its protocol, as a plain connection is.
        let protocol = if h2 { "h2" } else { "http1" };
        let series = format!("dockhand_client_connections{{protocol=\"{protocol}\"}}");
        assert_eq!(
            value_of(&scrape(site.proxy.admin).await, &series),
            Some(1.0)
        );
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

/// Settings whose TLS handshakes must finish within `timeout`.
fn handshake_timeout(timeout: Duration) -> Settings {
    let mut settings = test_settings();
    settings.tls.handshake_timeout = timeout;
    settings
}

/// Reads until the server closes; `None` if it does not within 10 s.
async fn closed_by_server(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut received));
    match read.await {
        // A reset counts as closed too.
        Ok(_) => Some(received),
        Err(_) => None,
    }
}

/// Item 7: a client that sends nothing, and one that stops halfway through
/// its ClientHello, are both cut at the handshake timeout and counted so.
#[tokio::test]
async fn a_handshake_never_finished_is_cut_at_the_timeout_and_counted() {
    let site = Site::start(handshake_timeout(Duration::from_millis(300))).await;
    let hello = client_hello(APP, client_config(site.roots(), &[b"h2"]));
    let mut silent = TcpStream::connect(site.https()).await.unwrap();
    let mut halfway = TcpStream::connect(site.https()).await.unwrap();
    halfway.write_all(&hello[..hello.len() / 2]).await.unwrap();
    for (what, stream) in [
        ("silent", &mut silent),
        ("half a ClientHello", &mut halfway),
    ] {
        let answer = closed_by_server(stream).await;
        assert_eq!(answer, Some(Vec::new()), "{what}: closed without an answer");
    }
    eventually("both counted as timed out", || async {
        site.handshakes("timed_out").await == 2.0
    })
    .await;
    assert_eq!(site.handshakes("failed").await, 0.0);
}

/// Plain HTTP sent to the HTTPS port is no ClientHello: the client gets
/// an alert and the close, and the handshake counts as failed.
#[tokio::test]
async fn plain_http_on_the_https_port_is_a_failed_handshake() {
    let site = Site::start(test_settings()).await;
    let mut stream = TcpStream::connect(site.https()).await.unwrap();
    let request = format!("GET / HTTP/1.1\r\nHost: {APP}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = closed_by_server(&mut stream).await.expect("closed");
    const ALERT: u8 = 21;
    assert_eq!(answer.first(), Some(&ALERT), "{answer:?}");
    eventually("counted as failed", || async {
        site.handshakes("failed").await == 1.0
    })
    .await;
}

/// What the 1,000 held handshakes need: theirs and dockhand's ends of each
/// (both in this process), and room for everything else.
const HELD_HANDSHAKES: usize = 1000;

/// Item 7: 1,000 connections that hold a half-sent ClientHello (the
/// handshake timeout well beyond the test) leave ordinary clients served.
#[tokio::test]
async fn a_thousand_unfinished_handshakes_do_not_stop_ordinary_clients() {
    let limit = dockhand::limits::raise_open_file_limit().unwrap();
    let needed = 2 * HELD_HANDSHAKES as u64 + 200;
    assert!(
        limit.after.unwrap_or(u64::MAX) >= needed,
        "the open-file limit ({:?}) is below the {needed} descriptors this test needs",
        limit.after
    );
    let site = Site::start(handshake_timeout(Duration::from_secs(60))).await;
    let hello = client_hello(APP, client_config(site.roots(), &[b"h2"]));
    let mut held = Vec::with_capacity(HELD_HANDSHAKES);
    for _ in 0..HELD_HANDSHAKES {
        let mut stream = TcpStream::connect(site.https()).await.unwrap();
        stream.write_all(&hello[..hello.len() / 2]).await.unwrap();
        held.push(stream);
    }
    for alpn in [b"h2".as_slice(), b"http/1.1".as_slice()] {
        for _ in 0..10 {
            let config = client_config(site.roots(), &[alpn]);
            let mut sender = https_connection(site.https(), APP, config).await;
            let reply = sender.get(APP, "/").await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        }
    }
    // The held ones are still waiting (none was dropped to make room).
    let mut probe = [0u8; 1];
    for stream in &held {
        assert!(matches!(
            stream.try_read(&mut probe),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
        ));
    }
    assert_eq!(site.handshakes("completed").await, 20.0);
    assert_eq!(site.handshakes("timed_out").await, 0.0);
    record_figure(&format!(
        "https: {HELD_HANDSHAKES} half-sent ClientHellos held open, 20 ordinary HTTPS requests all answered 200"
    ));
}

/// Item 7: a ClientHello for a name with no certificate is answered with
/// the one alert record (RFC 6066 §3 `unrecognized_name`) and the close:
/// no ServerHello, so no key exchange, certificate or signature was made
/// for it. A served name, for contrast, gets a handshake record.
#[tokio::test]
async fn an_unknown_sni_costs_no_certificate_work() {
    let site = Site::start(test_settings()).await;
    let config = client_config(site.roots(), &[b"h2"]);
    for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
        let config = client_config_with(site.roots(), &[b"h2"], &[version]);
        let mut stream = TcpStream::connect(site.https()).await.unwrap();
        stream
            .write_all(&client_hello("unknown.example.test", config))
            .await
            .unwrap();
        let answer = closed_by_server(&mut stream).await.unwrap();
        const ALERT: u8 = 21;
        const FATAL: u8 = 2;
        const UNRECOGNIZED_NAME: u8 = 112;
        assert_eq!(
            answer,
            [ALERT, 3, 3, 0, 2, FATAL, UNRECOGNIZED_NAME],
            "{version:?}"
        );
    }
    assert_eq!(site.handshakes("unknown_server_name").await, 2.0);
    let mut served = TcpStream::connect(site.https()).await.unwrap();
    served.write_all(&client_hello(APP, config)).await.unwrap();
    let mut first = [0u8; 1];
    served.read_exact(&mut first).await.unwrap();
    const HANDSHAKE: u8 = 22;
    assert_eq!(first[0], HANDSHAKE, "a ServerHello for a served name");
}

/// Shutdown drains HTTPS as it drains HTTP: a request in flight over TLS
/// gets its answer, the listener stops accepting, and `run` returns.
#[tokio::test]
async fn shutdown_lets_an_https_request_in_flight_finish() {
    let (release, released) = tokio::sync::watch::channel(false);
    let backend = Backend::start(move |_| {
        let mut released = released.clone();
        async move {
            let _ = released.wait_for(|done| *done).await;
            http::Response::new(full("finished"))
        }
    })
    .await;
    let ca = TestCa::new("dockhand drain test CA");
    let proxy = Proxy::start_https(
        &one_route(APP, backend.addr),
        &[&ca.leaf(APP)],
        test_settings(),
    )
    .await;
    let https = proxy.https.unwrap();
    let mut sender = https_connection(https, APP, client_config(ca.roots(), &[b"h2"])).await;
    let in_flight = tokio::spawn(async move { sender.get(APP, "/slow").await });
    eventually("the request reached the upstream", || async {
        backend.request_count() == 1
    })
    .await;
    let stopped = tokio::spawn(proxy.stop());
    eventually("the HTTPS listener closed", || async {
        TcpStream::connect(https).await.is_err()
    })
    .await;
    release.send(true).unwrap();
    let reply = in_flight.await.unwrap();
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (StatusCode::OK, "finished")
    );
    stopped.await.unwrap();
}

/// After the handshake the HTTP limits hold as on plain HTTP: a TLS client
/// that asks nothing is closed at `--header-read-timeout`.
#[tokio::test]
async fn a_tls_client_that_asks_nothing_is_closed_at_the_header_read_timeout() {
    let mut settings = test_settings();
    settings.header_read_timeout = Duration::from_millis(300);
    let site = Site::start(settings).await;
    let config = client_config(site.roots(), &[b"http/1.1"]);
    let mut tls = tls_connect(site.https(), APP, config).await.unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut received));
    assert!(read.await.is_ok(), "closed by dockhand");
    assert!(received.is_empty());
}
