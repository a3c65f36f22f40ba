//! Pebble, Let's Encrypt's ACME test server (Debian's `pebble`), run as a
//! process on loopback for one test, for any suite that needs a real CA.
//!
//! Its own HTTPS certificate is signed by a test CA made here: give
//! dockhand `pebble.ca_file` as `--acme-ca`. It validates challenges by
//! looking names up at `dns` (the tests' `DnsServer`: point the names at
//! 127.0.0.1) and connecting to `http_port` (HTTP-01) or `tls_port`
//! (TLS-ALPN-01): dockhand's listeners. Validation does not sleep
//! (`PEBBLE_VA_NOSLEEP`), valid nonces are not rejected unless asked, and
//! authorizations are never reused, so every order is validated. `root()`
//! is the root that signs what it issues, for a client to trust. The
//! process is killed when the value is dropped. Its directory listens on
//! loopback unless `PebbleConfig::listen` says otherwise (the Docker
//! suite's dockhand reaches it from a container).
//!
//! ```ignore
//! let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
//! let dns = DnsServer::start().await;
//! dns.set_a("app.example.com", ["127.0.0.1"], 60);
//! let pebble = Pebble::start(PebbleConfig::new(&http, &https, &dns)).await;
//! // dockhand with --acme-directory pebble.directory --acme-ca pebble.ca_file
//! let roots = pebble.root().await;
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;
use tokio::net::{TcpListener, TcpStream};

// `super::`, not `crate::`: the Docker suite compiles this module too, with
// its siblings from this folder under a module of its own.
use super::dns_server::DnsServer;
use super::support::{eventually, free_port};
use super::tls_support::{client_config, https_connection, TestCa};

/// How Pebble is run.
pub struct PebbleConfig {
    /// Where it sends HTTP-01 validations.
    pub http_port: u16,
    /// Where it sends TLS-ALPN-01 validations.
    pub tls_port: u16,
    /// The DNS server it looks names up at.
    pub dns: SocketAddr,
    /// How long what it issues is valid (Pebble's default: 5 years).
    pub validity: Option<Duration>,
    /// Rejects every nonce (`PEBBLE_WFE_NONCEREJECT=100`): every request
    /// that needs one, the account's creation first, is refused.
    pub reject_nonces: bool,
    /// The address its ACME directory listens on, named by its HTTPS
    /// certificate: loopback, or the Docker network's gateway for a
    /// dockhand in a container.
    pub listen: IpAddr,
}

impl PebbleConfig {
    /// Validations to `http` and `https`'s ports, names looked up at `dns`.
    pub fn new(http: &TcpListener, https: &TcpListener, dns: &DnsServer) -> PebbleConfig {
        PebbleConfig {
            http_port: http.local_addr().unwrap().port(),
            tls_port: https.local_addr().unwrap().port(),
            dns: dns.address(),
            validity: None,
            reject_nonces: false,
            listen: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }
}

pub struct Pebble {
    /// The ACME directory URL.
    pub directory: String,
    /// The PEM root Pebble's own HTTPS certificate is signed by (`--acme-ca`).
    pub ca_file: PathBuf,
    management: SocketAddr,
    https_roots: Arc<RootCertStore>,
    log: PathBuf,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Pebble {
    /// Starts Pebble and waits (10 s at most) until it accepts connections.
    pub async fn start(config: PebbleConfig) -> Pebble {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("Pebble's HTTPS test CA");
        // The management interface stays on loopback; the directory may not.
        let listen_name = config.listen.to_string();
        let identity = ca.leaf_for(&["127.0.0.1", listen_name.as_str()]);
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("cert.pem"), &identity.chain_pem).unwrap();
        std::fs::write(path("key.pem"), &identity.key_pem).unwrap();
        std::fs::write(path("ca.pem"), ca.pem()).unwrap();
        let listen = SocketAddr::new(config.listen, free_port().port());
        let management = free_port();
        let mut settings = serde_json::json!({
            "listenAddress": listen.to_string(),
            "managementListenAddress": management.to_string(),
            "certificate": path("cert.pem"),
            "privateKey": path("key.pem"),
            "httpPort": config.http_port,
            "tlsPort": config.tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        });
        if let Some(validity) = config.validity {
            settings["certificateValidityPeriod"] = validity.as_secs().into();
        }
        let config_path = path("pebble-config.json");
        std::fs::write(
            &config_path,
            serde_json::json!({ "pebble": settings }).to_string(),
        )
        .unwrap();
        let log = path("pebble.log");
        let output = std::fs::File::create(&log).unwrap();
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .arg("-dnsserver")
            .arg(config.dns.to_string())
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env(
                "PEBBLE_WFE_NONCEREJECT",
                if config.reject_nonces { "100" } else { "0" },
            )
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdin(Stdio::null())
            .stdout(output.try_clone().unwrap())
            .stderr(output)
            .spawn()
            .expect("pebble runs (apt-get install pebble)");
        let pebble = Pebble {
            directory: format!("https://{listen}/dir"),
            ca_file: path("ca.pem"),
            management,
            https_roots: ca.roots(),
            log,
            child,
            _dir: dir,
        };
        eventually("Pebble listens", || async {
            TcpStream::connect(listen).await.is_ok() && TcpStream::connect(management).await.is_ok()
        })
        .await;
        pebble
    }

    /// The root of what Pebble issues (made anew at each start), from its
    /// management interface.
    pub async fn root(&self) -> Arc<RootCertStore> {
        let config = client_config(self.https_roots.clone(), &[b"http/1.1"]);
        let mut connection = https_connection(self.management, "127.0.0.1", config).await;
        let reply = connection
            .get(&self.management.to_string(), "/roots/0")
            .await;
        assert!(reply.status.is_success(), "{}", reply.text());
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(&reply.body) {
            roots.add(certificate.unwrap()).unwrap();
        }
        assert!(!roots.is_empty(), "a root from Pebble");
        Arc::new(roots)
    }

    /// What Pebble wrote so far, for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops Pebble, as a CA that went away.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop();
    }
}
