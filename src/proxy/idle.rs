//! When a client connection is idle: it has no request in flight (a request
//! counts from its head until its response body ends) and has had none for
//! `--header-read-timeout`. hyper closes an idle HTTP/1.1 connection itself
//! when the next head does not come in time, but an HTTP/2 connection with
//! no stream has no such limit: without this, a client could hold any number
//! of them, each with its buffers and a descriptor, for as long as it liked.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The requests of one client connection.
#[derive(Debug)]
pub struct ConnectionActivity {
    /// When the connection was accepted; the times below count from it.
    opened: Instant,
    in_flight: AtomicUsize,
    asked: AtomicBool,
    /// When the last request ended (or the connection opened), as
    /// nanoseconds since `opened`.
    quiet_since_nanos: AtomicU64,
}

/// What an idle connection's timer found.
#[derive(Debug, PartialEq, Eq)]
pub enum Idle {
    /// Not idle for the whole timeout: look again at this time.
    Until(Instant),
    /// Idle for the timeout without ever asking anything.
    NeverAsked,
    /// Idle for the timeout since its last request ended.
    SinceLastRequest,
}

impl ConnectionActivity {
    pub fn new() -> Arc<ConnectionActivity> {
        Arc::new(ConnectionActivity {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            asked: AtomicBool::new(false),
            quiet_since_nanos: AtomicU64::new(0),
        })
    }

    /// Counts a request as in flight until the returned guard is dropped
    /// (with the response body that carries it).
    pub fn start_request(self: &Arc<Self>) -> ActiveRequest {
        self.asked.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        ActiveRequest(self.clone())
    }

    /// Whether the connection has been idle for `timeout` at `now`.
    pub fn idle(&self, timeout: Duration, now: Instant) -> Idle {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return Idle::Until(now + timeout);
        }
        let quiet_since =
            self.opened + Duration::from_nanos(self.quiet_since_nanos.load(Ordering::Relaxed));
        let idle_at = quiet_since + timeout;
        if idle_at > now {
            Idle::Until(idle_at)
        } else if self.asked.load(Ordering::Relaxed) {
            Idle::SinceLastRequest
        } else {
            Idle::NeverAsked
        }
    }
}

/// A request in flight on its client connection.
#[derive(Debug)]
pub struct ActiveRequest(Arc<ConnectionActivity>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        let activity = &self.0;
        let since_open = activity.opened.elapsed().as_nanos();
        activity.quiet_since_nanos.store(
            u64::try_from(since_open).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        activity.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_asks_nothing_is_idle_after_the_timeout() {
        let activity = ConnectionActivity::new();
        let opened = Instant::now();
        assert_eq!(
            activity.idle(TIMEOUT, opened),
            Idle::Until(opened + TIMEOUT)
        );
        tokio::time::advance(TIMEOUT).await;
        assert_eq!(activity.idle(TIMEOUT, Instant::now()), Idle::NeverAsked);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_in_flight_keeps_it_busy_and_its_end_starts_the_clock() {
        let activity = ConnectionActivity::new();
        let request = activity.start_request();
        tokio::time::advance(3 * TIMEOUT).await;
        let now = Instant::now();
        assert_eq!(activity.idle(TIMEOUT, now), Idle::Until(now + TIMEOUT));
        drop(request);
        let ended = Instant::now();
        assert_eq!(activity.idle(TIMEOUT, ended), Idle::Until(ended + TIMEOUT));
        tokio::time::advance(TIMEOUT).await;
        assert_eq!(
            activity.idle(TIMEOUT, Instant::now()),
            Idle::SinceLastRequest
        );
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_requests_count_until_the_last_ends() {
        let activity = ConnectionActivity::new();
        let first = activity.start_request();
        let second = activity.start_request();
        drop(first);
        tokio::time::advance(2 * TIMEOUT).await;
        let now = Instant::now();
        assert_eq!(activity.idle(TIMEOUT, now), Idle::Until(now + TIMEOUT));
        drop(second);
        tokio::time::advance(TIMEOUT).await;
        assert_eq!(
            activity.idle(TIMEOUT, Instant::now()),
            Idle::SinceLastRequest
        );
    }
}
