//! What dockhand knows about one endpoint across route-table rebuilds: whether
//! it is healthy, and how many requests it has in flight. Health comes from
//! active checks (a TCP connection every interval) and from failed connects
//! seen by requests; two failures in a row make an endpoint unhealthy, one
//! success makes it healthy again. Choosing among endpoints is `balance`'s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::registry::AddressLease;

/// Failures in a row that take an endpoint out of rotation.
const FAILURES_TO_UNHEALTHY: u32 = 2;

#[derive(Debug, Default)]
pub struct EndpointState {
    in_flight: AtomicUsize,
    failures_in_a_row: AtomicU32,
    unhealthy: AtomicBool,
    /// Without checks, health is not tracked: failed connects then speak for
    /// themselves on each request, and nothing would bring an endpoint back.
    checked: bool,
    /// Keeps the endpoint's pooled connections open while it is in use.
    _lease: Option<Arc<AddressLease>>,
}

impl EndpointState {
    pub fn new(checked: bool, lease: Option<Arc<AddressLease>>) -> EndpointState {
        EndpointState {
            checked,
            _lease: lease,
            ..EndpointState::default()
        }
    }

    pub fn is_healthy(&self) -> bool {
        !self.unhealthy.load(Ordering::Relaxed)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The result of a check, or of a connect a request made.
    pub fn record(&self, reachable: bool) {
        if !self.checked {
            return;
        }
        if reachable {
            self.failures_in_a_row.store(0, Ordering::Relaxed);
            if self.unhealthy.swap(false, Ordering::Relaxed) {
                tracing::info!("upstream healthy again");
            }
        } else {
            let failures = self.failures_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
            if failures >= FAILURES_TO_UNHEALTHY && !self.unhealthy.swap(true, Ordering::Relaxed) {
                tracing::warn!(failures, "upstream unhealthy");
            }
        }
    }

    /// Counts a request as in flight until the returned guard is dropped.
    pub fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
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

/// Checks `address` every `interval` for as long as its state is in use.
pub fn spawn_checks(
    state: Weak<EndpointState>,
    address: SocketAddr,
    interval: Duration,
    probe: Probe,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if state.strong_count() == 0 {
                return;
            }
            let reachable = probe(address).await;
            match state.upgrade() {
                Some(state) => state.record(reachable),
                None => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn scripted_probe(answers: Arc<Mutex<bool>>, calls: Arc<AtomicUsize>) -> Probe {
        Arc::new(move |_| {
            let reachable = *answers.lock().unwrap();
            calls.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move { reachable })
        })
    }

    #[test]
    fn two_failures_in_a_row_then_one_success() {
        let state = EndpointState::new(true, None);
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
        let state = EndpointState::new(false, None);
        for _ in 0..5 {
            state.record(false);
        }
        assert!(state.is_healthy());
    }

    #[test]
    fn in_flight_counts_until_the_guard_drops() {
        let state = Arc::new(EndpointState::new(true, None));
        let first = state.start_request();
        let second = state.start_request();
        assert_eq!(state.in_flight(), 2);
        drop(first);
        assert_eq!(state.in_flight(), 1);
        drop(second);
        assert_eq!(state.in_flight(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn checks_run_every_interval_and_stop_with_the_state() {
        let reachable = Arc::new(Mutex::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let state = Arc::new(EndpointState::new(true, None));
        let address = "10.0.0.1:80".parse().unwrap();
        let probe = scripted_probe(reachable.clone(), calls.clone());
        spawn_checks(
            Arc::downgrade(&state),
            address,
            Duration::from_secs(15),
            probe,
        );

        tokio::time::sleep(Duration::from_millis(14_900)).await;
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "no check before the interval"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        *reachable.lock().unwrap() = false;
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(state.is_healthy(), "one failed check");
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(!state.is_healthy(), "two failed checks in a row");
        *reachable.lock().unwrap() = true;
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(state.is_healthy(), "one good check");
        assert_eq!(calls.load(Ordering::Relaxed), 4);

        drop(state);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 4, "no checks once unused");
    }
}
