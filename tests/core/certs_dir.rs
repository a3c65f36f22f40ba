//! The certificates directory followed while serving (issue 13, item 2):
//! dockhand in this process serving HTTPS from a `--certs-dir`, its files
//! replaced under it. New handshakes get the new certificate while an open
//! keep-alive connection goes on; a mismatched pair is a diagnostic naming
//! its file while the last good certificate is served, until it is fixed;
//! the admin API lists what is held.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use rustls::RootCertStore;
use serde_json::Value;

use crate::support::*;
use crate::tls_support::*;

const SITE: &str = "site.example.test";

/// A proxy serving `SITE` over HTTPS from pair `0` of its certificates
/// directory (polled every 50 ms), the CA behind it, and the first certificate.
struct Site {
    proxy: Proxy,
    ca: TestCa,
    first: ServerIdentity,
    _backend: Backend,
}

impl Site {
    async fn start() -> Site {
        let backend = Backend::echo("echo").await;
        let ca = TestCa::new("dockhand certs-dir test CA");
        let first = ca.leaf(SITE);
        let mut settings = test_settings();
        settings.tls.certs_poll_interval = Duration::from_millis(50);
        let proxy = Proxy::start_https(&one_route(SITE, backend.addr), &[&first], settings).await;
        Site {
            proxy,
            ca,
            first,
            _backend: backend,
        }
    }

    fn roots(&self) -> Arc<RootCertStore> {
        self.ca.roots()
    }

    /// The leaf (DER) a new handshake for `SITE` gets; a new client each
    /// time, so no session is resumed.
    async fn leaf_served(&self) -> Vec<u8> {
        let config = client_config(self.roots(), &[b"http/1.1"]);
        let tls = tls_connect(self.proxy.https.unwrap(), SITE, config)
            .await
            .unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    async fn admin(&self, path: &str) -> Value {
        let reply = get(self.proxy.admin, "localhost", path).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
        reply.json()
    }

    /// The diagnostics of certificate files in `/api/v1/diagnostics`.
    async fn certificate_diagnostics(&self) -> Vec<Value> {
        let answer = self.admin("/api/v1/diagnostics").await;
        answer["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|diagnostic| diagnostic["source"] == "certificate_file")
            .cloned()
            .collect()
    }
}

#[tokio::test]
async fn a_replaced_pair_serves_new_handshakes_while_an_open_connection_goes_on() {
    let site = Site::start().await;
    let https = site.proxy.https.unwrap();
    assert_eq!(site.leaf_served().await, site.first.chain[0].to_vec());
    let mut open = https_connection(https, SITE, client_config(site.roots(), &[b"http/1.1"])).await;
    assert_eq!(open.get(SITE, "/").await.status, StatusCode::OK);

    let second = site.ca.leaf(SITE);
    second.write_pair(&site.proxy.certs_dir(), "0");
    let expected = second.chain[0].to_vec();
    eventually("new handshakes get the new certificate", || async {
        site.leaf_served().await == expected
    })
    .await;
    // The connection opened before the change was not dropped: it answers
    // again, with the certificate it was opened with.
    assert_eq!(open.get(SITE, "/").await.status, StatusCode::OK);

    let held = site.admin("/api/v1/certificates").await;
    let certificates = held["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 1, "{held}");
    assert_eq!(certificates[0]["source"], "file");
    assert_eq!(certificates[0]["names"], serde_json::json!([SITE]));
    let chain = site.proxy.certs_dir().join("0.crt");
    assert_eq!(certificates[0]["path"], chain.to_str().unwrap());
    assert!(certificates[0]["days_left"].as_i64().unwrap() > 0, "{held}");
    assert_eq!(held["acme"], serde_json::json!([]));
}

#[tokio::test]
async fn a_mismatched_pair_is_a_diagnostic_naming_its_file_while_the_last_good_certificate_is_served(
) {
    let site = Site::start().await;
    // Served: the directory was read before the key is replaced.
    assert_eq!(site.leaf_served().await, site.first.chain[0].to_vec());
    let certs = site.proxy.certs_dir();
    let chain = certs.join("0.crt");
    let other = site.ca.leaf(SITE);
    replace_file(&certs.join("0.key"), &other.key_pem);

    eventually("a diagnostic naming the pair's file", || async {
        site.certificate_diagnostics().await.len() == 1
    })
    .await;
    let diagnostic = &site.certificate_diagnostics().await[0];
    assert_eq!(diagnostic["severity"], "error");
    assert_eq!(diagnostic["path"], chain.to_str().unwrap());
    assert_eq!(
        diagnostic["reason"],
        "the private key does not belong to the certificate; the last good certificate is served"
    );
    assert_eq!(site.leaf_served().await, site.first.chain[0].to_vec());
    let ready = get(site.proxy.admin, "localhost", "/readyz").await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.text());

    // The pair fixed (with a new certificate): the diagnostic goes, and the
    // new certificate is served.
    let fixed = site.ca.leaf(SITE);
    replace_file(&chain, &fixed.chain_pem);
    replace_file(&certs.join("0.key"), &fixed.key_pem);
    let expected = fixed.chain[0].to_vec();
    eventually("the fixed pair served", || async {
        site.leaf_served().await == expected
    })
    .await;
    eventually("the diagnostic cleared", || async {
        site.certificate_diagnostics().await.is_empty()
    })
    .await;
}
