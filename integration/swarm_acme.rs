//! dockhand as several replicas with ACME (issue 15): one swarm service of
//! two dockhand tasks on the swarm engine, sharing one `--acme-storage` (a
//! folder of this machine bind-mounted into both), in front of a labelled
//! service of the test backend. They order the host's certificate from
//! Pebble once: the replica that takes the order lock in the storage orders,
//! the other waits and picks up what it stored, and both serve the host
//! with that certificate.
//!
//! Pebble runs on this machine (the core suite's harness, shared), its
//! directory on the swarm's `docker_gwbridge` gateway, where the tasks reach
//! it. This machine reaches each task at its own address on that bridge (no
//! ingress mesh here: see `swarm_support`), and that is where Pebble checks
//! HTTP-01 (RFC 8555 §8.3): port 80 of the one address the harness's DNS
//! server gives for the host.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::core_harness::dns_server::{DnsServer, RecordType};
use crate::core_harness::pebble::{Pebble, PebbleConfig};
use crate::core_harness::tls_support::{client_config, https_connection, tls_connect};
use crate::support::*;
use crate::swarm_support::*;

const TOKEN: &str = "swarm-acme-token";

/// Where the tasks mount the shared storage.
const STORAGE_IN_TASKS: &str = "/var/lib/dockhand/acme";

/// How long the order may take once the tasks run: the backend's first
/// health check (1 s, its label says), a 2 s settle, Pebble's validation,
/// then one 2 s poll of the lock by the replica that waits.
const ORDERED_WITHIN: Duration = Duration::from_secs(20);

/// How often the storage is read for the order lock: it is held only while
/// the order runs, a second or so against Pebble.
const LOCK_POLL: Duration = Duration::from_millis(2);

#[test]
fn two_replicas_sharing_acme_storage_order_once_and_both_serve_the_certificate() {
    let Some(run) = swarm_run("swarm-acme-replicas") else {
        return;
    };
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let network = run.overlay_network("net");
    let host = run.host("app");
    // Declared before the services, so removed after them.
    let storage = SharedStorage::new();

    let dns = runtime.block_on(DnsServer::start());
    let pebble = runtime.block_on(Pebble::start(PebbleConfig {
        http_port: 80,
        tls_port: 443,
        dns: dns.address(),
        validity: None,
        reject_nonces: false,
        listen: swarm_host_address(),
    }));

    // Checked every second, so that its host is ordered soon (only a host
    // that had a healthy upstream is).
    let backend = routed_service(&run, "app", &host, &network)
        .label("dockhand.health_check.interval_secs", "1")
        .create();
    let ca_in_tasks = "/pebble-ca.pem";
    let dockhand = run
        .dockhand_service(
            "dockhand",
            &network,
            &[
                "--docker-mode",
                "swarm",
                "--acme-email",
                "ops@example.com",
                "--acme-directory",
                &pebble.directory,
                "--acme-ca",
                ca_in_tasks,
                "--acme-storage",
                STORAGE_IN_TASKS,
                "--admin-listen",
                "0.0.0.0:8081",
                "--admin-token",
                TOKEN,
            ],
        )
        .replicas(2)
        .bind_mount(storage.path(), STORAGE_IN_TASKS, Access::ReadWrite)
        .bind_mount(&pebble.ca_file, ca_in_tasks, Access::ReadOnly)
        .create();
    let backend_tasks = backend.wait_for_tasks(1);
    let replicas: Vec<Replica> = dockhand
        .wait_for_tasks(2)
        .into_iter()
        .map(Replica::new)
        .collect();
    let tasks_ran = Instant::now();

    // Which replica orders is a race. The CA is sent to the first one until
    // the lock names the winner, then to the other, whose answer to the
    // challenge can only come from the storage's challenges/ folder.
    dns.set_a(&host, [replicas[0].address.to_string().as_str()], 60);
    let lock_holder = poll_every(LOCK_POLL, ORDERED_WITHIN, || storage.lock_holder(&host))
        .unwrap_or_else(|error| {
            panic!(
                "no order lock within {ORDERED_WITHIN:?}: {error}\n{}",
                logs(&replicas, &pebble)
            )
        });
    let asked = match &lock_holder {
        Some(holder) => {
            let waiting = replicas
                .iter()
                .find(|replica| &replica.task != holder)
                .expect("two replicas");
            dns.set_a(&host, [waiting.address.to_string().as_str()], 60);
            // Counted after the switch: none means the CA asked only since.
            match dns.queries(&host, RecordType::A) {
                0 => "the replica that did not order",
                _ => "the first replica, before the lock was seen",
            }
        }
        None => "the first replica: the order ended before the lock was seen",
    };

    let orders = wait_until_within(
        ORDERED_WITHIN,
        "one replica to order, the other to pick up",
        || {
            let orders: Vec<Orders> = replicas
                .iter()
                .map(Replica::orders)
                .collect::<Result<_, _>>()?;
            let ended: u64 = orders.iter().map(Orders::ended).sum();
            if ended >= 2 {
                Ok(orders)
            } else {
                Err(format!("{orders:?}"))
            }
        },
    );
    record_figure(&format!(
        "swarm ACME, 2 replicas: ordered and picked up {:.1} s after the tasks ran; \
         the CA checked HTTP-01 at {asked}",
        tasks_ran.elapsed().as_secs_f64()
    ));
    let ordering = orders
        .iter()
        .position(|orders| orders.issued == 1)
        .unwrap_or_else(|| {
            panic!(
                "no replica ordered: {orders:?}\n{}",
                logs(&replicas, &pebble)
            )
        });
    let waiting = 1 - ordering;
    let context = || format!("{orders:?}\n{}", logs(&replicas, &pebble));
    assert_eq!(orders[ordering], Orders::ISSUED_ONCE, "{}", context());
    assert_eq!(orders[waiting], Orders::PICKED_UP_ONCE, "{}", context());
    if let Some(holder) = &lock_holder {
        assert_eq!(&replicas[ordering].task, holder, "{}", context());
    }
    // The CA's own count: one order, one certificate.
    let pebble_log = pebble.log();
    assert_eq!(
        pebble_log.matches("orders in the db").count(),
        1,
        "{pebble_log}"
    );
    assert_eq!(
        pebble_log.matches("Issued certificate serial").count(),
        1,
        "{pebble_log}"
    );

    // The one certificate, stored once and served by both.
    assert_eq!(storage.files("certificates"), [format!("{host}.pem")]);
    assert!(
        storage.files("locks").is_empty(),
        "the lock is given back: {:?}",
        storage.files("locks")
    );
    let stored = storage.stored_leaf(&host);
    let roots = runtime.block_on(pebble.root());
    for replica in &replicas {
        let (leaf, reply) = runtime.block_on(replica.https_get(&host, &roots));
        assert_eq!(leaf, stored, "{} serves another certificate", replica.task);
        assert_eq!(reply.status, 200, "{}: {}", replica.task, reply.text());
        let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
        let hostname = body["hostname"].as_str().unwrap_or_default();
        assert!(backend_tasks.contains(hostname), "{body}");
        assert_eq!(body["headers"]["x-forwarded-proto"], "https", "{body}");

        // Plain HTTP for a host with a certificate: the same 308 to HTTPS.
        let plain = http_get(replica.http(), &host, "/x?y=1").unwrap();
        assert_eq!(plain.status, 308, "{}: {}", replica.task, plain.text());
        assert_eq!(
            plain.header("location"),
            Some(format!("https://{host}/x?y=1").as_str())
        );
    }
    record_figure(&format!(
        "swarm ACME, 2 replicas: the scenario took {:.1} s before its clean-up",
        started.elapsed().as_secs_f64()
    ));
}

/// One dockhand task, reached at its address on `docker_gwbridge`.
struct Replica {
    /// Its hostname (short container id), which the lock's holder begins with.
    task: String,
    address: IpAddr,
}

impl Replica {
    fn new(task: String) -> Replica {
        let address = gateway_bridge_address(&SWARM, &task);
        Replica { task, address }
    }

    fn http(&self) -> SocketAddr {
        SocketAddr::new(self.address, 80)
    }

    /// Its `dockhand_acme_orders_total` series, from `/metrics`.
    fn orders(&self) -> Result<Orders, String> {
        let authorization = format!("Bearer {TOKEN}");
        let admin = SocketAddr::new(self.address, 8081);
        let headers = [("authorization", authorization.as_str())];
        let response = http_request(admin, "GET", "localhost", "/metrics", &headers, b"")
            .map_err(|error| format!("{}: {error}", self.task))?;
        if response.status != 200 {
            return Err(format!(
                "{}: {} {}",
                self.task,
                response.status,
                response.text()
            ));
        }
        let text = response.text();
        let count = |result: &str| {
            let series = format!("dockhand_acme_orders_total{{result=\"{result}\"}} ");
            text.lines()
                .filter_map(|line| line.strip_prefix(series.as_str()))
                .filter_map(|value| value.trim().parse::<u64>().ok())
                .sum()
        };
        Ok(Orders {
            issued: count("issued"),
            picked_up: count("picked_up"),
            failed: count("failed"),
        })
    }

    /// `GET /` for `host` over HTTPS verified against `roots`, SNI = host:
    /// the leaf it showed and the reply.
    async fn https_get(
        &self,
        host: &str,
        roots: &Arc<RootCertStore>,
    ) -> (Vec<u8>, crate::core_harness::support::Reply) {
        let https = SocketAddr::new(self.address, 443);
        let config = client_config(Arc::clone(roots), &[b"http/1.1"]);
        let tls = tls_connect(https, host, Arc::clone(&config))
            .await
            .unwrap_or_else(|error| panic!("{}: handshake for {host}: {error}", self.task));
        let leaf = tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec();
        let reply = https_connection(https, host, config)
            .await
            .get(host, "/")
            .await;
        (leaf, reply)
    }
}

/// A replica's ACME orders by result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Orders {
    issued: u64,
    picked_up: u64,
    failed: u64,
}

impl Orders {
    const ISSUED_ONCE: Orders = Orders {
        issued: 1,
        picked_up: 0,
        failed: 0,
    };
    const PICKED_UP_ONCE: Orders = Orders {
        issued: 0,
        picked_up: 1,
        failed: 0,
    };

    /// Orders that ended, however.
    fn ended(&self) -> u64 {
        self.issued + self.picked_up + self.failed
    }
}

/// What both replicas and Pebble logged, for a failing assertion to show.
fn logs(replicas: &[Replica], pebble: &Pebble) -> String {
    let mut text = String::new();
    for replica in replicas {
        let log = SWARM.logs(&replica.task);
        text.push_str(&format!("dockhand {}:\n{log}\n", replica.task));
    }
    text.push_str(&format!("pebble:\n{}", pebble.log()));
    text
}

/// The `--acme-storage` both replicas mount, as this machine sees it:
/// `<storage>/<CA directory URL as a file name>/{account.json,
/// certificates/, locks/, challenges/}`. The tasks write it as root, as
/// this suite runs (the swarm engine needs root), so it is removed on drop.
struct SharedStorage {
    dir: tempfile::TempDir,
}

impl SharedStorage {
    fn new() -> SharedStorage {
        SharedStorage {
            dir: tempfile::tempdir().expect("a folder for the shared storage"),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The one CA directory's part of the storage, once a replica made it.
    fn ca_part(&self) -> Option<PathBuf> {
        let mut parts = std::fs::read_dir(self.path()).ok()?.flatten();
        parts.next().map(|entry| entry.path())
    }

    /// The names of the files in `folder` of the CA's part, sorted.
    fn files(&self, folder: &str) -> Vec<String> {
        let Some(dir) = self.ca_part().map(|part| part.join(folder)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// The task holding the order lock of `name` (the hostname its holder
    /// begins with: `<hostname>/<pid>/<random>`); `None` when the
    /// certificate is stored already, the lock given back unseen.
    fn lock_holder(&self, name: &str) -> Result<Option<String>, String> {
        let part = self.ca_part().ok_or("no storage made yet")?;
        let lock = part.join("locks").join(format!("{name}.lock"));
        // A lock being written may read empty: then it is not seen yet.
        if let Ok(text) = std::fs::read_to_string(lock) {
            if let Some((hostname, _)) = text.split_once('/') {
                return Ok(Some(hostname.to_owned()));
            }
        }
        if part
            .join("certificates")
            .join(format!("{name}.pem"))
            .exists()
        {
            return Ok(None);
        }
        Err("no lock yet".to_owned())
    }

    /// The leaf of the certificate stored for `name` (its file holds the
    /// key, then the chain, leaf first).
    #[track_caller]
    fn stored_leaf(&self, name: &str) -> Vec<u8> {
        let file = self
            .ca_part()
            .expect("the storage")
            .join("certificates")
            .join(format!("{name}.pem"));
        let pem = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let leaf = CertificateDer::pem_slice_iter(&pem)
            .next()
            .unwrap_or_else(|| panic!("no certificate in {}", file.display()))
            .unwrap_or_else(|e| panic!("{}: {e:?}", file.display()));
        leaf.to_vec()
    }
}
