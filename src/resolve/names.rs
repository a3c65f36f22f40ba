//! The resolver worker for upstreams written as host names (ADR 0006). It owns
//! every watched name's current addresses: it resolves each name every 5
//! seconds and again on demand (a failed connect, a request without upstream,
//! a Docker event), and hands the whole map to an `AddressSink` whenever it
//! changes. It does not know routes, ports or upstream settings: the route
//! table says which names to watch and turns addresses into upstreams. SRV
//! owner names are `srv`'s.
//!
//! Lookups run concurrently inside the worker's task, one at most per name,
//! and each is bounded in time. A failed lookup keeps the last addresses; an
//! answer that the name does not exist empties them at once.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{watch, Notify};
use tokio::time::{Instant, MissedTickBehavior};

use super::{Dns, LookupError};

/// How often every watched name is resolved again. Record TTLs never stretch
/// it: Docker's DNS answers with 10 minutes.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// The least time between a name's last lookup start and one asked for by a
/// failed connect.
pub const FAILED_CONNECT_MIN_INTERVAL: Duration = Duration::from_secs(1);
/// The least time between a name's last lookup start and one asked for by a
/// request that found no upstream.
pub const NO_UPSTREAM_MIN_INTERVAL: Duration = Duration::from_millis(100);
/// A lookup without an answer by then counts as failed.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Every watched name's current addresses (sorted, deduplicated). A name known
/// to have none (NotFound) is present with an empty slice; a name never
/// resolved yet is absent.
pub type ResolvedNames = Arc<HashMap<String, Arc<[IpAddr]>>>;

/// Where the worker hands each new state; called only when something changed.
pub trait AddressSink: Send + Sync + 'static {
    fn addresses_changed(&self, resolved: ResolvedNames);
}

/// A cheap handle to the running worker.
#[derive(Clone)]
pub struct NameResolver {
    handle: Arc<Handle>,
}

impl NameResolver {
    /// Starts the worker on the current tokio runtime. `names` is the set of
    /// names the route table uses (lower-case host names, without ports); the
    /// worker resolves new ones at once and forgets removed ones. It stops when
    /// every handle and the `names` sender are dropped.
    /// `moves` changes when containers moved (started, stopped, changed
    /// networks): every name is then resolved again at once.
    pub fn spawn(
        dns: Arc<dyn Dns>,
        names: watch::Receiver<Arc<BTreeSet<String>>>,
        moves: watch::Receiver<u64>,
        sink: Arc<dyn AddressSink>,
    ) -> NameResolver {
        let requests = Arc::new(Requests::default());
        let answered = Arc::new(Mutex::default());
        tokio::spawn(follow_moves(moves, requests.clone()));
        let worker = Worker::new(dns, sink, requests.clone(), Arc::clone(&answered));
        tokio::spawn(worker.run(names));
        NameResolver {
            handle: Arc::new(Handle { requests, answered }),
        }
    }

    /// When `name` last resolved to addresses (the admin API shows it).
    pub fn last_answer(&self, name: &str) -> Option<SystemTime> {
        crate::sync::lock(&self.handle.answered).get(name).copied()
    }

    /// Connecting to an address of `name` failed: resolve it again now, at
    /// most once a second per name.
    pub fn after_failed_connect(&self, name: &str) {
        self.handle
            .requests
            .ask_for(name, FAILED_CONNECT_MIN_INTERVAL);
    }

    /// A request found no upstream for a location using `name`: resolve it
    /// again now, at most every 100 ms per name.
    pub fn after_no_upstream(&self, name: &str) {
        self.handle.requests.ask_for(name, NO_UPSTREAM_MIN_INTERVAL);
    }
}

/// Asks for every name each time containers moved, until the router goes.
async fn follow_moves(mut moves: watch::Receiver<u64>, requests: Arc<Requests>) {
    while moves.changed().await.is_ok() {
        requests.ask_for_all();
    }
}

/// Shared by every `NameResolver` clone; its drop tells the worker that no
/// more requests can come.
struct Handle {
    requests: Arc<Requests>,
    answered: Arc<LastAnswers>,
}

/// When each watched name last resolved to addresses.
type LastAnswers = Mutex<HashMap<String, SystemTime>>;

impl Drop for Handle {
    fn drop(&mut self) {
        self.requests.handles_dropped.store(true, Ordering::Release);
        self.requests.wake.notify_one();
    }
}

/// On-demand requests waiting for the worker. A set rather than a queue, so a
/// burst of requests costs memory per name, not per request.
#[derive(Default)]
struct Requests {
    pending: Mutex<PendingRequests>,
    wake: Notify,
    handles_dropped: AtomicBool,
}

#[derive(Default)]
struct PendingRequests {
    all: bool,
    /// Each name asked for, with the shortest interval it was asked with.
    names: HashMap<String, Duration>,
}

impl Requests {
    fn ask_for(&self, name: &str, min_interval: Duration) {
        let mut pending = self.lock();
        match pending.names.get_mut(name) {
            Some(interval) => *interval = (*interval).min(min_interval),
            None => {
                pending.names.insert(name.to_owned(), min_interval);
            }
        }
        drop(pending);
        self.wake.notify_one();
    }

    fn ask_for_all(&self) {
        self.lock().all = true;
        self.wake.notify_one();
    }

    fn take(&self) -> PendingRequests {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, PendingRequests> {
        crate::sync::lock(&self.pending)
    }
}

type Lookup = BoxFuture<'static, (String, Result<Vec<IpAddr>, LookupError>)>;

struct Worker {
    dns: Arc<dyn Dns>,
    sink: Arc<dyn AddressSink>,
    requests: Arc<Requests>,
    /// The watched names; the keys are the set the route table last sent.
    names: HashMap<String, NameState>,
    /// Also holds names removed while their lookup ran, so a name removed and
    /// added back never gets a second concurrent lookup.
    in_flight: HashSet<String>,
    lookups: FuturesUnordered<Lookup>,
    resolved: ResolvedNames,
    published: ResolvedNames,
    answered: Arc<LastAnswers>,
}

#[derive(Default)]
struct NameState {
    last_start: Option<Instant>,
    /// When a lookup asked for is to start; it waits for the rate limit and
    /// for a lookup in flight, so a request is never lost, only delayed.
    due: Option<Instant>,
    status: Status,
}

/// What the last lookup said, so each transition is logged once.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Status {
    #[default]
    Unknown,
    Resolved,
    NotFound,
    Failing,
}

impl Worker {
    fn new(
        dns: Arc<dyn Dns>,
        sink: Arc<dyn AddressSink>,
        requests: Arc<Requests>,
        answered: Arc<LastAnswers>,
    ) -> Self {
        let resolved = ResolvedNames::default();
        Worker {
            dns,
            sink,
            requests,
            names: HashMap::new(),
            in_flight: HashSet::new(),
            lookups: FuturesUnordered::new(),
            published: resolved.clone(),
            resolved,
            answered,
        }
    }

    async fn run(mut self, mut watched: watch::Receiver<Arc<BTreeSet<String>>>) {
        let mut refresh =
            tokio::time::interval_at(Instant::now() + REFRESH_INTERVAL, REFRESH_INTERVAL);
        refresh.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watched_open = true;
        let initial = watched.borrow_and_update().clone();
        self.watch(&initial);
        let requests = self.requests.clone();
        loop {
            self.start_due_lookups();
            self.publish_if_changed();
            if !watched_open && requests.handles_dropped.load(Ordering::Acquire) {
                return;
            }
            let next_due = self.next_due();
            tokio::select! {
                changed = watched.changed(), if watched_open => match changed {
                    Ok(()) => {
                        let names = watched.borrow_and_update().clone();
                        self.watch(&names);
                    }
                    Err(_) => watched_open = false,
                },
                () = requests.wake.notified() => self.take_requests(),
                _ = refresh.tick() => self.refresh_all(),
                Some((name, result)) = self.lookups.next(), if !self.lookups.is_empty() => {
                    self.apply(name, result);
                    // Answers that arrived together are published together.
                    while let Some(Some((name, result))) = self.lookups.next().now_or_never() {
                        self.apply(name, result);
                    }
                }
                () = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {}
            }
        }
    }

    fn watch(&mut self, names: &BTreeSet<String>) {
        self.names.retain(|name, _| names.contains(name));
        crate::sync::lock(&self.answered).retain(|name, _| names.contains(name));
        if self.resolved.keys().any(|name| !names.contains(name)) {
            Arc::make_mut(&mut self.resolved).retain(|name, _| names.contains(name));
        }
        let now = Instant::now();
        for name in names {
            self.names.entry(name.clone()).or_insert_with(|| NameState {
                due: Some(now),
                ..NameState::default()
            });
        }
    }

    fn take_requests(&mut self) {
        let pending = self.requests.take();
        let now = Instant::now();
        if pending.all {
            for state in self.names.values_mut() {
                state.due = Some(now);
            }
        }
        for (name, min_interval) in pending.names {
            // Names nobody watches (any more) are not looked up.
            if let Some(state) = self.names.get_mut(&name) {
                let allowed = state
                    .last_start
                    .map_or(now, |start| now.max(start + min_interval));
                state.due = Some(state.due.map_or(allowed, |due| due.min(allowed)));
            }
        }
    }

    /// A tick coalesces with lookups in flight: they started less than a
    /// refresh interval ago.
    fn refresh_all(&mut self) {
        let now = Instant::now();
        for (name, state) in &mut self.names {
            if !self.in_flight.contains(name) {
                state.due = Some(now);
            }
        }
    }

    fn start_due_lookups(&mut self) {
        let now = Instant::now();
        for (name, state) in &mut self.names {
            if state.due.is_some_and(|due| due <= now) && self.in_flight.insert(name.clone()) {
                state.due = None;
                state.last_start = Some(now);
                self.lookups.push(lookup(self.dns.clone(), name.clone()));
            }
        }
    }

    /// The earliest lookup waiting only for its time; those waiting for a
    /// lookup in flight start when it ends.
    fn next_due(&self) -> Option<Instant> {
        self.names
            .iter()
            .filter(|(name, _)| !self.in_flight.contains(*name))
            .filter_map(|(_, state)| state.due)
            .min()
    }

    fn apply(&mut self, name: String, result: Result<Vec<IpAddr>, LookupError>) {
        self.in_flight.remove(&name);
        let Some(state) = self.names.get_mut(&name) else {
            return;
        };
        let previous = state.status;
        match result {
            Ok(addresses) if !addresses.is_empty() => {
                state.status = Status::Resolved;
                crate::sync::lock(&self.answered).insert(name.clone(), SystemTime::now());
                let addresses = sorted_unique(addresses);
                let changed = set_addresses(&mut self.resolved, &name, addresses.clone());
                if changed {
                    tracing::info!(name, ?addresses, "upstream name resolved to new addresses");
                } else if previous == Status::Failing {
                    tracing::info!(name, ?addresses, "upstream name resolves again");
                }
            }
            Ok(_) | Err(LookupError::NotFound) => {
                state.status = Status::NotFound;
                set_addresses(&mut self.resolved, &name, Arc::from([]));
                if previous != Status::NotFound {
                    tracing::warn!(name, "upstream name does not exist or has no addresses");
                }
            }
            Err(LookupError::Failed(reason)) => {
                state.status = Status::Failing;
                if previous != Status::Failing {
                    let kept = self.resolved.get(&name).map(|addresses| &**addresses);
                    tracing::warn!(name, %reason, ?kept, "upstream name lookup failed; keeping the last addresses");
                }
            }
        }
    }

    fn publish_if_changed(&mut self) {
        // The map is copied on its first change after a publish, so the same
        // pointer means no change; a change undone meanwhile is compared.
        if Arc::ptr_eq(&self.resolved, &self.published) || self.resolved == self.published {
            return;
        }
        self.published = self.resolved.clone();
        self.sink.addresses_changed(self.resolved.clone());
    }
}

fn lookup(dns: Arc<dyn Dns>, name: String) -> Lookup {
    async move {
        let result = match tokio::time::timeout(LOOKUP_TIMEOUT, dns.lookup_ip(&name)).await {
            Ok(answer) => answer.map(|answer| answer.addresses),
            Err(_) => Err(LookupError::Failed(format!(
                "no answer within {LOOKUP_TIMEOUT:?}"
            ))),
        };
        (name, result)
    }
    .boxed()
}

fn sorted_unique(mut addresses: Vec<IpAddr>) -> Arc<[IpAddr]> {
    addresses.sort_unstable();
    addresses.dedup();
    addresses.into()
}

/// Whether `name`'s addresses changed.
fn set_addresses(resolved: &mut ResolvedNames, name: &str, addresses: Arc<[IpAddr]>) -> bool {
    if resolved.get(name) == Some(&addresses) {
        return false;
    }
    Arc::make_mut(resolved).insert(name.to_owned(), addresses);
    true
}

#[cfg(test)]
mod tests;
