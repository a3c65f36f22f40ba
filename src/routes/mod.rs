//! From what providers want to the live `RouteTable`. Each provider (the
//! routes file, Docker) publishes its `Desired` whole under its id; the
//! router keeps, as data anyone can read, every provider's current
//! diagnostics and every conflict between providers (the same host from
//! two: the file wins), keeps vanished locations whose upstreams move for a
//! grace period (`grace`), merges all of it with the current addresses of
//! the names used, builds the table, and swaps it atomically. It tells the
//! resolver which names to watch, and when a provider's containers moved.
//! It owns no I/O beyond one timer task for grace deadlines.

mod grace;
mod host_match;
mod table;

pub use host_match::{normalize_host, MAX_HOST_LEN};
pub use table::{BuildInputs, Conflict, ForwardAuthRoute, Location, RouteMiss, RouteTable};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{
    Desired, DesiredHosts, Diagnostic, ProviderId, Severity, SeverityCounts, UpstreamTarget,
};
use crate::metrics::{CurrentState, DiagnosticCounts, Metrics, UpstreamReading};
use crate::middleware::RateLimiters;
use crate::resolve::{AddressSink, ResolvedNames};
use crate::upstream::{EndpointInputs, EndpointRegistry};
use grace::Grace;

/// Holds the current route table; readers never block and never see a half-built one.
pub struct Router {
    current: ArcSwap<RouteTable>,
    inputs: Mutex<Inputs>,
    registry: Arc<EndpointRegistry>,
    /// Rate limits' buckets, kept across builds.
    limiters: RateLimiters,
    grace_period: Duration,
    /// Bumped on every swap, so waiting requests can look again.
    changes: watch::Sender<u64>,
    /// The names the desired hosts use, for the resolver to watch.
    names: watch::Sender<Arc<BTreeSet<String>>>,
    /// Bumped when a provider's containers moved, so names that may point at
    /// them are resolved again at once.
    moves: watch::Sender<u64>,
    /// The earliest end of a grace period, for `expire_grace`.
    grace_deadline: watch::Sender<Option<Instant>>,
    /// Counts swaps and the time each table took to build.
    metrics: Arc<Metrics>,
}

/// Everything a table is built from, and what the last build found.
#[derive(Default)]
struct Inputs {
    providers: BTreeMap<ProviderId, Published>,
    resolved: ResolvedNames,
    conflicts: Vec<Conflict>,
    last_swap: Option<Swap>,
}

/// One route table swapped in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Swap {
    /// Counts from 1 at the first table.
    pub number: u64,
    pub at: SystemTime,
    /// How long building the table took.
    pub build: Duration,
}

/// What is served now, as one consistent picture (the admin API's).
pub struct Snapshot {
    /// Each provider's hosts as served (locations in their grace period
    /// included), in `ProviderId` order: a host two define is served as the first says.
    pub providers: Vec<(ProviderId, DesiredHosts)>,
    pub conflicts: Vec<Conflict>,
    pub table: Arc<RouteTable>,
    pub last_swap: Option<Swap>,
}

/// One provider's last `Desired`, and its locations in their grace period.
struct Published {
    desired: Desired,
    grace: Grace,
    /// `desired.hosts` with the locations in their grace period; `None`
    /// when none is (then `desired.hosts` is what is served, uncopied).
    with_grace: Option<DesiredHosts>,
}

impl Published {
    fn served(&self) -> &DesiredHosts {
        self.with_grace.as_ref().unwrap_or(&self.desired.hosts)
    }
}

impl Router {
    /// `grace_period`: how long a vanished location whose upstreams move
    /// is kept (without upstreams: requests wait for one).
    pub fn new(registry: Arc<EndpointRegistry>, grace_period: Duration) -> Router {
        Router {
            current: ArcSwap::default(),
            inputs: Mutex::default(),
            registry,
            limiters: RateLimiters::default(),
            grace_period,
            changes: watch::Sender::new(0),
            names: watch::Sender::new(Arc::default()),
            moves: watch::Sender::new(0),
            grace_deadline: watch::Sender::new(None),
            metrics: Arc::default(),
        }
    }

    /// Counts its swaps in `metrics` (else in metrics of its own, unread).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Router {
        self.metrics = metrics;
        self
    }

    /// The table requests are routed with right now.
    pub fn current(&self) -> arc_swap::Guard<Arc<RouteTable>> {
        self.current.load()
    }

    /// Replaces what `provider` wants and swaps in a new table, unless the
    /// hosts served did not change. Requests already routed keep the table
    /// they started with. Returns whether the table was swapped.
    pub fn publish(&self, provider: ProviderId, desired: Desired) -> bool {
        let mut inputs = self.lock_inputs();
        let grace_period = self.grace_period;
        let first = !inputs.providers.contains_key(&provider);
        let published = inputs
            .providers
            .entry(provider)
            .or_insert_with(|| Published {
                desired: Desired::default(),
                grace: Grace::new(grace_period),
                with_grace: None,
            });
        let hosts_changed = published.desired.hosts != desired.hosts;
        if !hosts_changed && published.desired == desired && !first {
            return false;
        }
        log_new_diagnostics(&published.desired.diagnostics, &desired.diagnostics);
        // A provider's first containers moved nothing: names are resolved
        // when they are first watched anyway.
        if !first && published.desired.container_addresses != desired.container_addresses {
            self.moves.send_modify(|moves| *moves += 1);
        }
        let before = std::mem::replace(&mut published.desired, desired);
        if !hosts_changed {
            return false;
        }
        published
            .grace
            .update(&before.hosts, &published.desired.hosts, Instant::now());
        let served_before = published.with_grace.take();
        published.with_grace = published.grace.served(&published.desired.hosts);
        // What is served may not change when the hosts do: a location whose
        // last container stopped, then was removed, is served the same
        // (empty) during its grace period.
        let changed = match (&served_before, &published.with_grace) {
            (None, None) => true,
            _ => published.served() != served_before.as_ref().unwrap_or(&before.hosts),
        };
        if changed {
            self.watch_names_of(&inputs);
            self.swap(&mut inputs);
        }
        self.schedule_grace_expiry(&inputs);
        changed
    }

    /// Takes the names' current addresses, and swaps in a new table if any
    /// name the table uses has new ones.
    pub fn set_resolved(&self, resolved: ResolvedNames) -> bool {
        let mut inputs = self.lock_inputs();
        if inputs.resolved == resolved {
            return false;
        }
        inputs.resolved = resolved;
        self.swap(&mut inputs);
        true
    }

    /// Removes the locations whose grace period ended by now; returns
    /// whether the table changed.
    fn expire_grace(&self) -> bool {
        let mut inputs = self.lock_inputs();
        let now = Instant::now();
        let mut changed = false;
        for published in inputs.providers.values_mut() {
            if published.grace.expire(now) {
                published.with_grace = published.grace.served(&published.desired.hosts);
                changed = true;
            }
        }
        if changed {
            self.watch_names_of(&inputs);
            self.swap(&mut inputs);
        }
        self.schedule_grace_expiry(&inputs);
        changed
    }

    /// Tells `expire_grace_periods` when the next grace period ends.
    fn schedule_grace_expiry(&self, inputs: &Inputs) {
        let deadline = inputs
            .providers
            .values()
            .filter_map(|published| published.grace.next_deadline())
            .min();
        self.grace_deadline.send_if_modified(|current| {
            let changed = *current != deadline;
            *current = deadline;
            changed
        });
    }

    /// Ends grace periods when they are due; runs for as long as the router.
    pub async fn expire_grace_periods(&self) {
        let mut deadline = self.grace_deadline.subscribe();
        loop {
            let next = *deadline.borrow_and_update();
            match next {
                Some(next) => tokio::select! {
                    () = tokio::time::sleep_until(next) => {
                        self.expire_grace();
                    }
                    _ = deadline.changed() => {}
                },
                None => {
                    if deadline.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn swap(&self, inputs: &mut Inputs) {
        let started = std::time::Instant::now();
        let context = BuildInputs {
            endpoints: EndpointInputs {
                resolved: &inputs.resolved,
                registry: &self.registry,
            },
            limiters: self.limiters.build(),
        };
        let served = inputs
            .providers
            .iter()
            .map(|(provider, published)| (*provider, published.served()))
            .collect();
        let (table, conflicts) = RouteTable::build(&served, &context);
        drop(context);
        let build = started.elapsed();
        self.metrics.table_swapped(build);
        // The old table's endpoints go with it, unless the new one kept them;
        // connects to addresses it alone had are abandoned.
        drop(self.current.swap(Arc::new(table)));
        self.registry.finish_table();
        self.registry.sweep();
        for conflict in conflicts.iter().filter(|c| !inputs.conflicts.contains(c)) {
            tracing::warn!(host = %conflict.host, served_by = %conflict.served_by, ignored = %conflict.ignored, "host defined by two providers; the first is served");
        }
        inputs.conflicts = conflicts;
        self.changes.send_modify(|version| *version += 1);
        inputs.last_swap = Some(Swap {
            number: *self.changes.borrow(),
            at: SystemTime::now(),
            build,
        });
    }

    /// What is served now: hosts, conflicts, the table and its swap, taken together.
    pub fn snapshot(&self) -> Snapshot {
        let inputs = self.lock_inputs();
        Snapshot {
            providers: inputs
                .providers
                .iter()
                .map(|(provider, published)| (*provider, published.served().clone()))
                .collect(),
            conflicts: inputs.conflicts.clone(),
            table: self.current.load_full(),
            last_swap: inputs.last_swap,
        }
    }

    /// Whether `provider` has published at least once (its first load or
    /// sync is done: readiness).
    pub fn has_published(&self, provider: ProviderId) -> bool {
        self.lock_inputs().providers.contains_key(&provider)
    }

    fn watch_names_of(&self, inputs: &Inputs) {
        let names = names_used(inputs.providers.values().map(Published::served));
        self.names.send_if_modified(|watched| {
            let changed = **watched != names;
            if changed {
                *watched = Arc::new(names);
            }
            changed
        });
    }

    fn lock_inputs(&self) -> std::sync::MutexGuard<'_, Inputs> {
        crate::sync::lock(&self.inputs)
    }

    /// Every provider's current diagnostics, by provider.
    pub fn diagnostics(&self) -> Vec<(ProviderId, Diagnostic)> {
        let inputs = self.lock_inputs();
        inputs
            .providers
            .iter()
            .flat_map(|(provider, published)| {
                published
                    .desired
                    .diagnostics
                    .iter()
                    .map(|diagnostic| (*provider, diagnostic.clone()))
            })
            .collect()
    }

    /// Every host two providers define, as of the current table.
    pub fn conflicts(&self) -> Vec<Conflict> {
        self.lock_inputs().conflicts.clone()
    }

    /// Notified after every swap.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The set of names the desired hosts use, kept current.
    pub fn watch_names(&self) -> watch::Receiver<Arc<BTreeSet<String>>> {
        self.names.subscribe()
    }

    /// Changes whenever a provider's containers moved (started, stopped,
    /// changed networks): names may point at them.
    pub fn watch_moves(&self) -> watch::Receiver<u64> {
        self.moves.subscribe()
    }
}

/// Logs each diagnostic of `now` that `before` did not have: a problem is
/// logged once for as long as it lasts.
fn log_new_diagnostics(before: &[Diagnostic], now: &[Diagnostic]) {
    for diagnostic in now.iter().filter(|d| !before.contains(d)) {
        match diagnostic.severity {
            Severity::Warning => tracing::warn!(%diagnostic, "configuration diagnostic"),
            Severity::Error => tracing::error!(%diagnostic, "configuration diagnostic"),
        }
    }
}

/// The metrics' gauges of state are read from the current table and diagnostics.
impl CurrentState for Router {
    fn each_upstream(&self, each: &mut dyn FnMut(UpstreamReading<'_>)) {
        let table = self.current();
        for (_, locations) in table.hosts() {
            for location in locations {
                for endpoint in location.upstreams.endpoints() {
                    each(UpstreamReading {
                        host: &location.host,
                        location: &location.prefix,
                        address: endpoint.to_string(),
                        healthy: endpoint.state.is_healthy(),
                        in_flight: endpoint.state.in_flight() as u64,
                    });
                }
            }
        }
    }

    fn diagnostic_counts(&self) -> DiagnosticCounts {
        let inputs = self.lock_inputs();
        let every = inputs
            .providers
            .values()
            .flat_map(|published| &published.desired.diagnostics);
        let counts = SeverityCounts::of(every);
        DiagnosticCounts {
            errors: counts.errors as u64,
            warnings: counts.warnings as u64,
        }
    }
}

/// The resolver hands the names' addresses straight to the table.
impl AddressSink for Router {
    fn addresses_changed(&self, resolved: ResolvedNames) {
        self.set_resolved(resolved);
    }
}

#[cfg(test)]
impl Default for Router {
    fn default() -> Router {
        Router::new(Arc::new(EndpointRegistry::new()), Duration::from_secs(5))
    }
}

/// Every name an upstream (or a location's auth service) of `served` is
/// written with.
fn names_used<'a>(served: impl Iterator<Item = &'a DesiredHosts>) -> BTreeSet<String> {
    served
        .flat_map(|hosts| &hosts.hosts)
        .flat_map(|host| &host.locations)
        .flat_map(|location| {
            let auth = location.middlewares.forward_auth.as_ref();
            let targets = location.upstreams.iter().map(|upstream| &upstream.target);
            targets.chain(auth.map(|auth| &auth.target))
        })
        .filter_map(|target| match target {
            UpstreamTarget::Name { host, .. } => Some(host.clone()),
            UpstreamTarget::Address(_) | UpstreamTarget::Srv { .. } => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_routes_file, Origin};

    fn hosts(json: &str) -> Desired {
        Desired {
            hosts: parse_routes_file(json).unwrap(),
            ..Desired::default()
        }
    }

    /// As the Docker provider publishes them: upstreams that move.
    fn containers(json: &str) -> Desired {
        let mut desired = hosts(json);
        for host in &mut desired.hosts.hosts {
            for location in &mut host.locations {
                location.upstreams_move = true;
            }
        }
        desired
    }

    fn pick(router: &Router, host: &str) -> Result<String, RouteMiss> {
        let table = router.current();
        let location = table.find(host, "/")?;
        Ok(location
            .upstreams
            .pick(&[])
            .map_or("none".to_owned(), |endpoint| endpoint.to_string()))
    }

    #[test]
    fn the_file_wins_a_host_both_providers_define_and_the_conflict_is_data() {
        let router = Router::default();
        let file =
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#);
        let docker = containers(
            r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.2:80": {}}}}},
                         "b.com": {"location": {"/": {"upstream": {"10.0.0.3:80": {}}}}}}}"#,
        );
        assert!(router.publish(ProviderId::File, file));
        assert!(router.publish(ProviderId::Docker, docker.clone()));
        assert_eq!(pick(&router, "a.com").unwrap(), "10.0.0.1:80");
        assert_eq!(pick(&router, "b.com").unwrap(), "10.0.0.3:80");
        let table = router.current();
        assert!(!table.find("a.com", "/").unwrap().upstreams_move);
        assert!(table.find("b.com", "/").unwrap().upstreams_move);
        drop(table);
        let conflict = Conflict {
            host: crate::config::HostPattern::Exact("a.com".into()),
            served_by: ProviderId::File,
            ignored: ProviderId::Docker,
        };
        assert_eq!(router.conflicts(), std::slice::from_ref(&conflict));
        assert!(
            !router.publish(ProviderId::Docker, docker),
            "unchanged: no swap"
        );
        let names: ResolvedNames = Arc::new([("x".to_owned(), Arc::from(vec![]))].into());
        router.set_resolved(names);
        assert_eq!(
            router.conflicts(),
            [conflict],
            "listed once across rebuilds"
        );
        router.publish(ProviderId::File, hosts(r#"{"host": {}}"#));
        assert_eq!(router.conflicts(), []);
        assert_eq!(pick(&router, "a.com").unwrap(), "10.0.0.2:80");
    }

    #[test]
    fn diagnostics_are_held_per_provider_until_fixed() {
        let router = Router::default();
        let diagnostic = Diagnostic {
            origin: Origin::Container {
                name: "web".into(),
                id: "1234".into(),
            },
            key: "dockhand.prot".into(),
            severity: Severity::Warning,
            reason: "unknown key, ignored".into(),
            value: Some("8080".into()),
            suggestion: Some("dockhand.port".into()),
        };
        let mut desired = containers(r#"{"host": {}}"#);
        desired.diagnostics = vec![diagnostic.clone()];
        assert!(
            !router.publish(ProviderId::Docker, desired.clone()),
            "no host changed"
        );
        assert_eq!(router.diagnostics(), [(ProviderId::Docker, diagnostic)]);
        desired.diagnostics.clear();
        router.publish(ProviderId::Docker, desired);
        assert_eq!(router.diagnostics(), []);
    }

    #[test]
    fn certificate_diagnostics_are_counted_with_the_others_and_never_swap_the_table() {
        let router = Router::default();
        router.publish(
            ProviderId::File,
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#),
        );
        let swaps = router.subscribe();
        let broken = |path: &str, severity| Diagnostic {
            origin: Origin::CertificateFile { path: path.into() },
            key: String::new(),
            severity,
            reason: "the private key does not belong to the certificate".into(),
            value: None,
            suggestion: None,
        };
        let desired = Desired {
            diagnostics: vec![
                broken("/certs/a.crt", Severity::Error),
                broken("/certs/b.crt", Severity::Warning),
            ],
            ..Desired::default()
        };
        assert!(!router.publish(ProviderId::Certificates, desired));
        assert!(router.has_published(ProviderId::Certificates));
        assert!(!swaps.has_changed().unwrap(), "no table swapped");
        assert_eq!(router.diagnostics().len(), 2);
        let counts = router.diagnostic_counts();
        assert_eq!((counts.errors, counts.warnings), (1, 1));
        assert_eq!(pick(&router, "a.com").unwrap(), "10.0.0.1:80");
        router.publish(ProviderId::Certificates, Desired::default());
        assert_eq!(router.diagnostic_counts().errors, 0);
    }

    #[test]
    fn names_are_watched_and_their_addresses_used() {
        let router = Router::default();
        let names = router.watch_names();
        router.publish(
            ProviderId::File,
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"app:8080": {}, "10.0.0.1:80": {}}}}}}}"#),
        );
        assert_eq!(**names.borrow(), BTreeSet::from(["app".to_owned()]));
        let endpoints = |router: &Router| -> Vec<String> {
            let table = router.current();
            let location = table.find("a.com", "/").unwrap();
            location
                .upstreams
                .endpoints()
                .iter()
                .map(|e| e.to_string())
                .collect()
        };
        assert_eq!(endpoints(&router), ["10.0.0.1:80"]);
        let resolved: ResolvedNames = Arc::new(
            [(
                "app".to_owned(),
                Arc::from(vec!["10.2.0.7".parse().unwrap()]),
            )]
            .into(),
        );
        assert!(router.set_resolved(resolved.clone()));
        assert_eq!(endpoints(&router), ["10.2.0.7:8080", "10.0.0.1:80"]);
        assert!(!router.set_resolved(resolved), "same addresses: no swap");
    }

    #[test]
    fn moved_containers_are_told_to_the_resolver() {
        let router = Router::default();
        let mut moves = router.watch_moves();
        let mut desired = containers(r#"{"host": {}}"#);
        router.publish(ProviderId::Docker, desired.clone());
        desired.container_addresses = ["10.0.0.5".parse().unwrap()].into();
        router.publish(ProviderId::Docker, desired.clone());
        assert!(moves.has_changed().unwrap());
        moves.borrow_and_update();
        desired.diagnostics.push(Diagnostic {
            origin: Origin::Container {
                name: "web".into(),
                id: "1234".into(),
            },
            key: "dockhand.host".into(),
            severity: Severity::Error,
            reason: "bad".into(),
            value: None,
            suggestion: None,
        });
        router.publish(ProviderId::Docker, desired.clone());
        assert!(!moves.has_changed().unwrap(), "the same addresses: no move");
        desired.container_addresses = ["10.0.0.6".parse().unwrap()].into();
        router.publish(ProviderId::Docker, desired);
        assert!(moves.has_changed().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_vanished_location_that_moves_is_kept_for_the_grace_period() {
        let router = Arc::new(Router::default());
        tokio::spawn({
            let router = router.clone();
            async move { router.expire_grace_periods().await }
        });
        let one = r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#;
        router.publish(ProviderId::Docker, containers(one));
        router.publish(
            ProviderId::File,
            hosts(one.replace("a.com", "f.com").as_str()),
        );
        router.publish(ProviderId::Docker, containers(r#"{"host": {}}"#));
        router.publish(ProviderId::File, hosts(r#"{"host": {}}"#));
        assert_eq!(pick(&router, "a.com"), Ok("none".to_owned()), "kept, empty");
        assert_eq!(
            pick(&router, "f.com"),
            Err(RouteMiss::NoHost),
            "the file's went at once"
        );
        tokio::time::sleep(Duration::from_millis(4_900)).await;
        assert_eq!(pick(&router, "a.com"), Ok("none".to_owned()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            pick(&router, "a.com"),
            Err(RouteMiss::NoHost),
            "gone after the period"
        );
    }

    #[tokio::test]
    async fn subscribers_hear_of_each_swap() {
        let router = Router::default();
        let mut changes = router.subscribe();
        router.publish(
            ProviderId::File,
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#),
        );
        changes.changed().await.unwrap();
        assert_eq!(*changes.borrow_and_update(), 1);
    }
}
