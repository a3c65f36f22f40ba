//! What dockhand knows about one endpoint across route-table rebuilds: whether
//! it is healthy, and how many requests it has in flight. Health comes from
//! active checks (a TCP connection every interval, run by the `checks`
//! service) and from failed connects seen by requests (passive health); two
//! failures in a row make an endpoint unhealthy, one success makes it healthy
//! again. Choosing among endpoints is `balance`'s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::lease::AddressLease;
use crate::sync::lock;

/// Failures in a row that take an endpoint out of rotation.
const FAILURES_TO_UNHEALTHY: u32 = 2;

#[derive(Debug, Default)]
pub struct EndpointState {
    in_flight: AtomicUsize,
    failures_in_a_row: AtomicU32,
    unhealthy: AtomicBool,
    /// Without checks, health is not tracked: failed connects then speak for
    /// themselves on each request, and nothing would bring an endpoint back.
    check: Option<Check>,
    /// Keeps the endpoint's pooled connections open while it is in use,
    /// and tells connection attempts when the address left the tables.
    lease: Option<Arc<AddressLease>>,
    /// The locations of the newest route table that use this endpoint:
    /// health log lines name them, as an address alone says little.
    used_by: Mutex<UsedBy>,
}

/// The locations (`host/prefix`) of route table number `table` that use an endpoint.
#[derive(Debug, Default)]
struct UsedBy {
    table: u64,
    locations: Vec<Arc<str>>,
}

/// An endpoint's active check: where, how often, and when next.
#[derive(Debug)]
pub struct Check {
    pub address: SocketAddr,
    pub interval: Duration,
    /// `None` while a check runs.
    next: Mutex<Option<Instant>>,
    /// When the last check ended, for the admin API.
    last: Mutex<Option<SystemTime>>,
}

impl Check {
    /// The first check is one interval from now.
    pub fn new(address: SocketAddr, interval: Duration) -> Check {
        Check {
            address,
            interval,
            next: Mutex::new(Some(Instant::now() + interval)),
            last: Mutex::new(None),
        }
    }
}

impl EndpointState {
    pub fn new(check: Option<Check>, lease: Option<Arc<AddressLease>>) -> EndpointState {
        EndpointState {
            check,
            lease,
            ..EndpointState::default()
        }
    }

    /// Notes that `location` of route table number `table` uses this
    /// endpoint (and so its address); a newer table's locations replace an
    /// older one's.
    pub(super) fn used_by(&self, table: u64, location: &Arc<str>) {
        if let Some(lease) = &self.lease {
            lease.used_by_table(table);
        }
        let mut used_by = lock(&self.used_by);
        if used_by.table != table {
            *used_by = UsedBy {
                table,
                locations: Vec::new(),
            };
        }
        if !used_by.locations.contains(location) {
            used_by.locations.push(location.clone());
        }
    }

    /// The locations that use this endpoint, for a log line.
    pub(super) fn locations(&self) -> String {
        lock(&self.used_by).locations.join(", ")
    }

    pub fn is_checked(&self) -> bool {
        self.check.is_some()
    }

    /// When this endpoint is checked next; `None` when it is not checked or
    /// a check is running.
    pub(super) fn next_check(&self) -> Option<Instant> {
        self.check.as_ref().and_then(|check| *lock(&check.next))
    }

    /// The address to check now, if a check is due: it is then marked as running.
    pub(super) fn start_check_if_due(&self, now: Instant) -> Option<SocketAddr> {
        let check = self.check.as_ref()?;
        let mut next = lock(&check.next);
        match *next {
            Some(due) if due <= now => {
                *next = None;
                Some(check.address)
            }
            _ => None,
        }
    }

    pub(super) fn finish_check(&self, reachable: bool) {
        self.record(reachable);
        if let Some(check) = &self.check {
            *lock(&check.next) = Some(Instant::now() + check.interval);
            *lock(&check.last) = Some(SystemTime::now());
        }
    }

    /// Healthy, unhealthy, or not checked at all.
    pub fn health(&self) -> Health {
        match (&self.check, self.is_healthy()) {
            (None, _) => Health::Unchecked,
            (Some(_), true) => Health::Healthy,
            (Some(_), false) => Health::Unhealthy,
        }
    }

    /// Failed checks and connects in a row.
    pub fn failures(&self) -> u32 {
        self.failures_in_a_row.load(Ordering::Relaxed)
    }

    /// When the last active check ended; `None` before the first, or unchecked.
    pub fn last_check(&self) -> Option<SystemTime> {
        self.check.as_ref().and_then(|check| *lock(&check.last))
    }

    pub fn is_healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The result of a check, or of a connect a request made.
    pub fn record(&self, reachable: bool) {
        let Some(check) = &self.check else {
            return;
        };
        if reachable {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            if self.unhealthy.swap(false, Ordering::Relaxed) {
                tracing::info!(upstream = %check.address, location = %self.locations(), "upstream healthy again");
            }
        } else {
            let failures = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
            if failures >= FAILURES_TO_UNHEALTHY && !self.unhealthy.swap(true, Ordering::Relaxed) {
                tracing::warn!(upstream = %check.address, location = %self.locations(), failures, "upstream unhealthy");
            }
        }
    }

    /// Counts a request as in flight until the returned guard is dropped.
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }
}

/// An endpoint's health as the admin API and metrics show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy,
    /// Checks are off: failed connects speak for themselves on each request.
    Unchecked,
}

impl Health {
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Unhealthy => "unhealthy",
            Health::Unchecked => "unchecked",
        }
    }
}

/// A request in flight to an endpoint (least connections counts these).
#[derive(Debug)]
pub struct InFlight(Arc<EndpointState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an address accepts a connection; a trait object so unit tests can
/// answer without sockets.
pub type Probe = Arc<dyn Fn(SocketAddr) -> BoxFuture<'static, bool> + Send + Sync>;

/// A TCP connection to the address within `timeout`.
pub fn tcp_probe(timeout: Duration) -> Probe {
    Arc::new(move |address| {
        Box::pin(async move {
            matches!(
                tokio::time::timeout(timeout, tokio::net::TcpStream::connect(address)).await,
                Ok(Ok(_))
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked() -> Option<Check> {
        Some(Check::new(
            "10.0.0.1:80".parse().unwrap(),
            Duration::from_secs(15),
        ))
    }

    #[test]
    fn two_failures_in_a_row_then_one_success() {
        let state = EndpointState::new(checked(), None);
        state.record(false);
        assert!(state.is_healthy(), "one failure is not enough");
        state.record(true);
        state.record(false);
        assert!(state.is_healthy(), "a success in between resets the count");
        state.record(false);
        assert!(!state.is_healthy());
        state.record(true);
        assert!(state.is_healthy());
    }

    #[test]
    fn without_checks_health_is_not_tracked() {
        let state = EndpointState::new(None, None);
        for _ in 0..5 {
            state.record(false);
        }
        assert!(state.is_healthy());
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let state = Arc::new(EndpointState::new(checked(), None));
        let first = state.start_request();
        let second = state.start_request();
        assert_eq!(state.in_flight(), 2);
        drop(first);
        assert_eq!(state.in_flight(), 1);
        drop(second);
        assert_eq!(state.in_flight(), 0);
    }
}
