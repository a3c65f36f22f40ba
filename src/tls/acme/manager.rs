//! The ACME service: one task that looks at what is served whenever the
//! route table or the certificates change, a timer it set is due, or an
//! order ends; asks `plan` what to do; and does it: orders run as tasks of
//! their own (serving never waits for one), their certificates are stored
//! and then swapped into the store whole, each name's state is set for the
//! admin API, and failures and wildcard hosts are published as diagnostics.
//! The CA's renewal window (RFC 9773) is asked for each certificate held
//! when the CA offers it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use instant_acme::{Account, CertificateIdentifier};
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc;

use super::client::{self, CaSettings, Refusals};
use super::names::{eligibility, Eligibility};
use super::order;
use super::plan::{self, Held, OrderRequest, Planner, Refusal, Served};
use super::storage::{Locked, Storage, StoredCertificate};
use crate::config::{Desired, ProviderId};
use crate::metrics::{AcmeOrder, Metrics};
use crate::routes::Router;
use crate::settings::{AcmeChallenge, AcmeSettings};
use crate::tls::{Certificate, CertificateSource, TlsState};
use crate::upstream::{EndpointState, Health};

/// How soon a CA that gave no hint is asked again for a renewal window.
const RENEWAL_INFO_RECHECK: Duration = Duration::from_secs(6 * 60 * 60);
/// The longest an order may take, account and storage included: a CA that
/// stops answering fails the order rather than hold its names forever.
const ORDER_LIMIT: Duration = Duration::from_secs(5 * 60);
/// The longest the CA may take to give a renewal window.
const RENEWAL_INFO_LIMIT: Duration = Duration::from_secs(60);
/// How long an order lock in shared storage lasts: the order's own limit,
/// with room. A replica that dies holding one keeps it until then.
const LOCK_LIFETIME: Duration = ORDER_LIMIT.saturating_add(Duration::from_secs(60));
/// How often an order waiting for another replica's lock looks again.
const LOCK_POLL: Duration = Duration::from_secs(2);

/// The ACME certificates read from storage, ready to serve.
pub struct Loaded {
    storage: Storage,
    held: BTreeMap<String, HeldCertificate>,
}

/// A certificate held, with what is known of its renewal.
struct HeldCertificate {
    certificate: Arc<Certificate>,
    renew_at: SystemTime,
    /// The CA's renewal window was used: the next order says it replaces this one.
    renewal_info: Option<RenewalInfo>,
}

#[derive(Clone, Copy)]
struct RenewalInfo {
    /// When to ask the CA again.
    next_check: SystemTime,
    /// The CA offers renewal information.
    offered: bool,
}

/// Reads the stored certificates of the configured CA and serves them at
/// once, before anything is ordered. A file that can't be used is logged
/// and left for the next order of its names to replace.
pub async fn load(settings: &AcmeSettings, tls: &TlsState) -> Loaded {
    let storage = Storage::new(&settings.storage, &settings.directory);
    let stored = {
        let storage = storage.clone();
        tokio::task::spawn_blocking(move || storage.certificates()).await
    };
    let stored = match stored {
        Ok(Ok(stored)) => stored,
        Ok(Err(error)) => {
            tracing::warn!(%error, storage = %settings.storage.display(), "ACME storage unreadable; certificates will be ordered");
            Vec::new()
        }
        Err(error) => {
            tracing::warn!(%error, "reading ACME storage failed");
            Vec::new()
        }
    };
    let now = SystemTime::now();
    let mut held = BTreeMap::new();
    for stored in stored {
        match stored.parse() {
            Ok(certificate) if certificate.not_after > now => {
                held.insert(stored.id, HeldCertificate::new(Arc::new(certificate)));
            }
            Ok(_) => {
                tracing::info!(id = %stored.id, "stored ACME certificate expired; it will be ordered again")
            }
            Err(error) => {
                tracing::warn!(id = %stored.id, %error, "stored ACME certificate unusable; it will be ordered again")
            }
        }
    }
    let loaded = Loaded { storage, held };
    tls.certificates
        .replace(CertificateSource::Acme, loaded.certificates());
    if !loaded.held.is_empty() {
        tracing::info!(count = loaded.held.len(), "stored ACME certificates served");
    }
    loaded
}

impl Loaded {
    fn certificates(&self) -> Vec<Arc<Certificate>> {
        self.held
            .values()
            .map(|held| held.certificate.clone())
            .collect()
    }
}

impl HeldCertificate {
    fn new(certificate: Arc<Certificate>) -> HeldCertificate {
        HeldCertificate {
            renew_at: plan::renewal_time(certificate.not_before, certificate.not_after),
            certificate,
            renewal_info: None,
        }
    }

    fn leaf(&self) -> Option<&CertificateDer<'static>> {
        self.certificate.key.cert.first()
    }
}

/// What the order and renewal-window tasks share.
struct Shared {
    ca: CaSettings,
    storage: Storage,
    challenge: AcmeChallenge,
    tls: Arc<TlsState>,
    refusals: Arc<Refusals>,
    /// Made at the first need, then kept; an unreachable CA is retried then.
    account: tokio::sync::Mutex<Option<Account>>,
    /// This replica, in the order locks it takes in shared storage.
    holder: String,
}

impl Shared {
    async fn account(&self) -> Result<Account, String> {
        let mut account = self.account.lock().await;
        if let Some(account) = &*account {
            return Ok(account.clone());
        }
        let made = client::account(&self.ca, &self.storage, self.refusals.clone()).await?;
        *account = Some(made.clone());
        Ok(made)
    }
}

/// What the tasks report back.
enum Event {
    OrderEnded {
        request: OrderRequest,
        started: SystemTime,
        result: Result<Obtained, String>,
    },
    RenewalWindow {
        id: String,
        renew_at: Option<SystemTime>,
        info: RenewalInfo,
    },
}

/// Runs for as long as dockhand: orders and renews the certificates of
/// the hosts served. Never returns an error: a CA that can't be reached is
/// a failure of each order, retried with backoff.
pub async fn run(
    settings: AcmeSettings,
    loaded: Loaded,
    tls: Arc<TlsState>,
    router: Arc<Router>,
    metrics: Arc<Metrics>,
) {
    let mut routes = router.subscribe();
    let mut certificates = tls.certificates.subscribe();
    tls.challenges
        .share_http01_through(loaded.storage.challenges_dir());
    let (events, mut ended) = mpsc::unbounded_channel();
    let mut manager = Manager {
        shared: Arc::new(Shared {
            ca: CaSettings {
                directory: settings.directory.clone(),
                email: settings.email.clone(),
                extra_roots: settings.ca.clone(),
            },
            storage: loaded.storage.clone(),
            challenge: settings.challenge,
            tls,
            refusals: Arc::default(),
            account: tokio::sync::Mutex::new(None),
            holder: lock_holder(),
        }),
        router,
        metrics,
        held: loaded.held,
        planner: Planner::default(),
        named: BTreeSet::new(),
        renewal_info_asked: BTreeSet::new(),
        events,
    };
    loop {
        let wake_at = manager.look();
        let sleep = wake_at.map(|at| at.duration_since(SystemTime::now()).unwrap_or_default());
        tokio::select! {
            changed = routes.changed() => if changed.is_err() { return },
            _ = certificates.changed() => {}
            Some(event) = ended.recv() => manager.handle(event),
            () = sleep_for(sleep) => {}
        }
    }
}

async fn sleep_for(duration: Option<Duration>) {
    match duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => std::future::pending().await,
    }
}

/// The service's state between looks.
struct Manager {
    shared: Arc<Shared>,
    router: Arc<Router>,
    metrics: Arc<Metrics>,
    held: BTreeMap<String, HeldCertificate>,
    planner: Planner,
    /// The names whose state is set in `tls.acme`.
    named: BTreeSet<String>,
    /// Certificates whose renewal window is being asked for.
    renewal_info_asked: BTreeSet<String>,
    events: mpsc::UnboundedSender<Event>,
}

impl Manager {
    /// Plans and acts on the plan; returns when to look again at the latest.
    fn look(&mut self) -> Option<SystemTime> {
        let now = SystemTime::now();
        let tls = &self.shared.tls;
        let (served, wildcards) = served_names(&self.router, tls);
        let plan = self
            .planner
            .plan(now, &served, &wildcards, &held_views(&self.held));
        for gone in self
            .named
            .iter()
            .filter(|name| !plan.states.contains_key(*name))
        {
            tls.acme.remove(gone);
        }
        for (name, state) in &plan.states {
            tls.acme.set(name, state.clone());
        }
        self.named = plan.states.keys().cloned().collect();
        self.router.publish(
            ProviderId::Acme,
            Desired {
                diagnostics: plan.diagnostics,
                ..Desired::default()
            },
        );
        for request in plan.orders {
            self.start_order(request);
        }
        let renewal_info_due = self.ask_renewal_windows(now);
        match (plan.wake_at, renewal_info_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn start_order(&self, request: OrderRequest) {
        let renewed = request.renews.as_ref().and_then(|id| self.held.get(id));
        let renewing = renewed.and_then(|held| held.leaf()).cloned();
        // Said only to a CA that offers renewal information (RFC 9773 §5).
        let replaces = renewed
            .filter(|held| held.renewal_info.is_some_and(|info| info.offered))
            .and(renewing.as_ref())
            .and_then(|leaf| CertificateIdentifier::try_from(leaf).ok())
            .map(CertificateIdentifier::into_owned);
        tracing::info!(names = ?request.names, renewal = request.renews.is_some(), "ordering a certificate over ACME");
        tokio::spawn(order_task(
            self.shared.clone(),
            request,
            replaces,
            renewing,
            self.events.clone(),
        ));
    }

    /// Asks the CA for the renewal window of each certificate not asked
    /// about yet, or due to be asked again; returns when the next is due.
    fn ask_renewal_windows(&mut self, now: SystemTime) -> Option<SystemTime> {
        let mut next = None;
        for (id, certificate) in &self.held {
            match certificate.renewal_info {
                Some(info) if !info.offered => {}
                Some(info) if info.next_check > now => {
                    next = Some(info.next_check.min(next.unwrap_or(info.next_check)));
                }
                _ if self.renewal_info_asked.contains(id) => {}
                _ => {
                    if let Some(leaf) = certificate.leaf() {
                        self.renewal_info_asked.insert(id.clone());
                        tokio::spawn(renewal_window_task(
                            self.shared.clone(),
                            id.clone(),
                            leaf.clone(),
                            self.events.clone(),
                        ));
                    }
                }
            }
        }
        next
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::OrderEnded {
                request,
                result: Ok(obtained),
                ..
            } => self.issued(&request, obtained),
            Event::OrderEnded {
                request,
                started,
                result: Err(detail),
            } => {
                let retry_after = self.shared.refusals.retry_after_since(started);
                tracing::warn!(names = ?request.names, %detail, "ACME order failed");
                self.planner.order_ended(
                    &request.names,
                    SystemTime::now(),
                    Err(Refusal {
                        detail,
                        retry_after,
                    }),
                );
                self.metrics.acme_order(AcmeOrder::Failed);
            }
            Event::RenewalWindow { id, renew_at, info } => {
                self.renewal_info_asked.remove(&id);
                if let Some(certificate) = self.held.get_mut(&id) {
                    certificate.renewal_info = Some(info);
                    if let Some(renew_at) = renew_at {
                        certificate.renew_at = renew_at;
                    }
                }
            }
        }
    }

    /// A certificate was issued and stored (or found stored by another
    /// replica): it is served from now on.
    fn issued(&mut self, request: &OrderRequest, obtained: Obtained) {
        let Obtained {
            id,
            certificate,
            picked_up,
        } = obtained;
        let not_after = humantime::format_rfc3339_seconds(certificate.not_after);
        match picked_up {
            false => {
                tracing::info!(names = ?certificate.names, %not_after, "ACME certificate issued")
            }
            true => {
                tracing::info!(names = ?certificate.names, %not_after, "ACME certificate another replica ordered is served")
            }
        }
        // Certificates whose names the new one covers are done with.
        let replaced: Vec<String> = self
            .held
            .iter()
            .filter(|(held_id, held)| {
                **held_id != id
                    && held
                        .certificate
                        .names
                        .iter()
                        .all(|name| certificate.names.contains(name))
            })
            .map(|(held_id, _)| held_id.clone())
            .collect();
        for old in replaced {
            self.held.remove(&old);
            let storage = self.shared.storage.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(error) = storage.remove_certificate(&old) {
                    tracing::warn!(%error, id = %old, "a replaced ACME certificate could not be removed");
                }
            });
        }
        self.held.insert(id, HeldCertificate::new(certificate));
        // Stored first (by the order), served now: the old certificate
        // answered every handshake until this swap.
        self.shared.tls.certificates.replace(
            CertificateSource::Acme,
            self.held
                .values()
                .map(|held| held.certificate.clone())
                .collect(),
        );
        self.planner
            .order_ended(&request.names, SystemTime::now(), Ok(()));
        self.metrics.acme_order(match picked_up {
            false => AcmeOrder::Issued,
            true => AcmeOrder::PickedUp,
        });
    }
}

/// A certificate an order ended with.
struct Obtained {
    id: String,
    certificate: Arc<Certificate>,
    /// Another replica sharing the storage ordered it.
    picked_up: bool,
}

/// This process, told apart from other replicas (on other hosts, or in
/// other containers) and from another ACME service in the same process.
fn lock_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!(
        "{}/{}/{:08x}",
        host.trim(),
        std::process::id(),
        rand::random::<u32>()
    )
}

/// What the storage shared with other replicas says of an order.
enum Claim {
    /// This replica holds the order's lock: it orders.
    Ours,
    /// Another replica stored a certificate for the names, not due for
    /// renewal (and not the one being renewed).
    Stored(Obtained),
}

/// Takes the order's lock in storage, unless a certificate for its names
/// is stored already; while another replica holds the lock, waits (it may
/// store the certificate) for as long as a lock can last.
async fn claim(
    shared: &Shared,
    request: &OrderRequest,
    renewing: Option<&CertificateDer<'static>>,
) -> Result<Claim, String> {
    let id = StoredCertificate::id_of(&request.names);
    let give_up_at = tokio::time::Instant::now() + LOCK_LIFETIME;
    loop {
        if let Some(obtained) = stored_for(shared, &id, &request.names, renewing).await? {
            return Ok(Claim::Stored(obtained));
        }
        let now = unix_seconds(SystemTime::now());
        let expires = now + LOCK_LIFETIME.as_secs();
        let (storage, lock_id, holder) =
            (shared.storage.clone(), id.clone(), shared.holder.clone());
        let locked =
            tokio::task::spawn_blocking(move || storage.try_lock(&lock_id, &holder, expires, now))
                .await
                .map_err(|error| error.to_string())?
                .map_err(|error| format!("taking the order lock in storage: {error}"))?;
        match locked {
            Locked::Taken => {
                // Another replica may have stored it just before letting go.
                return match stored_for(shared, &id, &request.names, renewing).await? {
                    Some(obtained) => {
                        unlock(shared, &id).await;
                        Ok(Claim::Stored(obtained))
                    }
                    None => Ok(Claim::Ours),
                };
            }
            Locked::HeldBy { holder, until } => {
                if tokio::time::Instant::now() >= give_up_at {
                    return Err(format!(
                        "another replica ({holder}) holds the order lock until {until} (Unix time)"
                    ));
                }
                tracing::debug!(names = ?request.names, %holder, "another replica is ordering; waiting for its certificate");
                tokio::time::sleep(LOCK_POLL).await;
            }
        }
    }
}

/// The certificate `id` as stored, when it covers `names`, is not due for
/// renewal and is not the one being renewed.
async fn stored_for(
    shared: &Shared,
    id: &str,
    names: &[String],
    renewing: Option<&CertificateDer<'static>>,
) -> Result<Option<Obtained>, String> {
    let (storage, stored_id) = (shared.storage.clone(), id.to_owned());
    let stored = tokio::task::spawn_blocking(move || storage.certificate(&stored_id))
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| format!("reading the storage: {error}"))?;
    let Some(Ok(certificate)) = stored.map(|stored| stored.parse()) else {
        return Ok(None);
    };
    let now = SystemTime::now();
    let usable = names.iter().all(|name| certificate.names.contains(name))
        && plan::renewal_time(certificate.not_before, certificate.not_after) > now
        && renewing != certificate.key.cert.first();
    Ok(usable.then(|| Obtained {
        id: id.to_owned(),
        certificate: Arc::new(certificate),
        picked_up: true,
    }))
}

async fn unlock(shared: &Shared, id: &str) {
    let (storage, id, holder) = (shared.storage.clone(), id.to_owned(), shared.holder.clone());
    let unlocked = tokio::task::spawn_blocking(move || storage.unlock(&id, &holder)).await;
    if let Ok(Err(error)) = unlocked {
        tracing::warn!(%error, "an ACME order lock could not be removed; it ends at its expiry");
    }
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

async fn order_task(
    shared: Arc<Shared>,
    request: OrderRequest,
    replaces: Option<CertificateIdentifier<'static>>,
    renewing: Option<CertificateDer<'static>>,
    events: mpsc::UnboundedSender<Event>,
) {
    let started = SystemTime::now();
    let result = match claim(&shared, &request, renewing.as_ref()).await {
        Ok(Claim::Ours) => {
            let ordered = order_under_lock(&shared, &request, replaces).await;
            unlock(&shared, &StoredCertificate::id_of(&request.names)).await;
            ordered
        }
        Ok(Claim::Stored(obtained)) => Ok(obtained),
        Err(error) => Err(error),
    };
    let _ = events.send(Event::OrderEnded {
        request,
        started,
        result,
    });
}

/// Orders, stores and reads back the certificate, within `ORDER_LIMIT`.
async fn order_under_lock(
    shared: &Shared,
    request: &OrderRequest,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Obtained, String> {
    let ordering = async {
        let account = shared.account().await?;
        let issued = order::order(
            &account,
            &request.names,
            replaces,
            shared.challenge,
            &shared.tls,
            &shared.storage,
        )
        .await?;
        let stored = StoredCertificate::new(&request.names, &issued.chain, &issued.key);
        let certificate = stored.parse().map_err(|error| {
            format!("the CA issued a certificate that can't be served: {error}")
        })?;
        let storage = shared.storage.clone();
        let id = stored.id.clone();
        tokio::task::spawn_blocking(move || storage.save_certificate(&stored))
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| format!("storing the certificate: {error}"))?;
        Ok(Obtained {
            id,
            certificate: Arc::new(certificate),
            picked_up: false,
        })
    };
    tokio::time::timeout(ORDER_LIMIT, ordering)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "the CA did not complete the order within {}",
                humantime::format_duration(ORDER_LIMIT)
            ))
        })
}

/// Asks the CA for a certificate's renewal window (RFC 9773 §4.2), and
/// picks a time in it at random.
async fn renewal_window_task(
    shared: Arc<Shared>,
    id: String,
    leaf: CertificateDer<'static>,
    events: mpsc::UnboundedSender<Event>,
) {
    let now = SystemTime::now();
    let window = tokio::time::timeout(RENEWAL_INFO_LIMIT, renewal_window(&shared, &leaf))
        .await
        .unwrap_or_else(|_| Err("no answer".to_owned()));
    let (renew_at, info) = match window {
        Ok(Some((start, end, recheck))) => (
            Some(plan::time_in_window(start, end, rand::random::<f64>())),
            RenewalInfo {
                next_check: now + recheck.max(Duration::from_secs(60)),
                offered: true,
            },
        ),
        Ok(None) => (
            None,
            RenewalInfo {
                next_check: now,
                offered: false,
            },
        ),
        Err(error) => {
            tracing::debug!(%error, %id, "no ACME renewal window");
            (
                None,
                RenewalInfo {
                    next_check: now + RENEWAL_INFO_RECHECK,
                    offered: true,
                },
            )
        }
    };
    let _ = events.send(Event::RenewalWindow { id, renew_at, info });
}

/// `None` when the CA offers no renewal information.
async fn renewal_window(
    shared: &Shared,
    leaf: &CertificateDer<'static>,
) -> Result<Option<(SystemTime, SystemTime, Duration)>, String> {
    let account = shared.account().await?;
    let identifier = CertificateIdentifier::try_from(leaf)?;
    match account.renewal_info(&identifier).await {
        Ok((info, recheck)) => Ok(Some((
            info.suggested_window.start.into(),
            info.suggested_window.end.into(),
            recheck,
        ))),
        Err(instant_acme::Error::Unsupported(_)) => Ok(None),
        Err(error) => Err(client::describe(&error)),
    }
}

fn held_views(held: &BTreeMap<String, HeldCertificate>) -> Vec<Held> {
    held.iter()
        .map(|(id, held)| Held {
            id: id.clone(),
            names: held.certificate.names.clone(),
            not_after: held.certificate.not_after,
            renew_at: held.renew_at,
        })
        .collect()
}

/// The orderable names served, and the wildcard hosts.
fn served_names(router: &Router, tls: &TlsState) -> (Vec<Served>, Vec<String>) {
    let files: Vec<Arc<Certificate>> = tls
        .certificates
        .all()
        .into_iter()
        .filter(|(source, _)| *source == CertificateSource::Files)
        .map(|(_, certificate)| certificate)
        .collect();
    let table = router.current();
    let mut served = Vec::new();
    let mut wildcards = Vec::new();
    for (pattern, locations) in table.hosts() {
        match eligibility(pattern) {
            Eligibility::Orderable(name) => served.push(Served {
                healthy_now: locations.iter().any(|location| {
                    location
                        .upstreams
                        .endpoints()
                        .iter()
                        .any(|endpoint| has_answered(&endpoint.state))
                }),
                file_covered: files.iter().any(|file| file.covers(&name)),
                name,
            }),
            // A wildcard certificate in the directory serves it: nothing to say.
            Eligibility::Wildcard(name) if files.iter().any(|file| file.names.contains(&name)) => {}
            Eligibility::Wildcard(name) => wildcards.push(name),
            Eligibility::Private => {}
        }
    }
    (served, wildcards)
}

/// Whether an endpoint counts as a healthy upstream: its last check
/// succeeded (a new endpoint is presumed healthy before its first check,
/// which is not enough here), or checks are off.
fn has_answered(state: &EndpointState) -> bool {
    match state.health() {
        Health::Unchecked => true,
        Health::Healthy => state.last_check().is_some() && state.failures() == 0,
        Health::Unhealthy => false,
    }
}
