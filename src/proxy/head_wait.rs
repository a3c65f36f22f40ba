//! The wait for an upstream's response head under `--upstream-timeout`: a
//! future that holds the try's sending future itself, not a copy of it.
//! (An `async fn` that pins the future it is given keeps both its argument
//! and the pinned copy for as long as it runs, and the request's future,
//! which holds this one, grows by the try's whole size.)
//!
//! Its timer is lent: a connection that carries many requests keeps one
//! for all of them (the own HTTP/1.1 server does). tokio's timer takes a
//! lock to enter a timer in its wheel and another to take it out; a kept
//! timer moved later, as each request's deadline is, stays entered, so a
//! request costs neither lock. As a `KeptTimer` it costs a request no
//! atomic update either: the timer only wakes its task once a timeout, to
//! be moved on (one move under the lock).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::kept_timer::KeptTimer;

/// How the wait ended.
#[derive(Debug)]
pub enum Waited<T> {
    /// The sending future ended (with a head, or failed).
    Sent(T),
    /// No head within the limit while the upstream was not waiting for the
    /// client's body.
    TimedOut,
}

pin_project! {
    /// Polls `sent` until it ends, or until it has gone `limit` without a
    /// head while `waits_on_client` says no: an upstream still waiting for
    /// the client's body bytes is given another `limit` each time (the
    /// client's own timeout decides for those).
    pub struct HeadWait<'t, F, W> {
        #[pin]
        sent: F,
        deadline: Pin<&'t mut KeptTimer>,
        limit: Duration,
        waits_on_client: W,
    }
}

impl<'t, F, W> HeadWait<'t, F, W> {
    /// The first wait ends `limit` after `started`, the try's start as
    /// the caller read it already; `timer` is set for it, whatever it was
    /// set for before.
    pub fn new(
        sent: F,
        mut timer: Pin<&'t mut KeptTimer>,
        started: Instant,
        limit: Duration,
        waits_on_client: W,
    ) -> HeadWait<'t, F, W> {
        timer.as_mut().reset(started + limit);
        HeadWait {
            sent,
            deadline: timer,
            limit,
            waits_on_client,
        }
    }
}

impl<F: Future, W: Fn() -> bool> Future for HeadWait<'_, F, W> {
    type Output = Waited<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            if let Poll::Ready(sent) = this.sent.as_mut().poll(cx) {
                return Poll::Ready(Waited::Sent(sent));
            }
            ready!(this.deadline.as_mut().poll(cx));
            if !(this.waits_on_client)() {
                return Poll::Ready(Waited::TimedOut);
            }
            this.deadline.as_mut().reset(Instant::now() + *this.limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::future::pending;
    use std::pin::pin;

    use tokio::time::sleep;

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn a_timer_lent_to_wait_after_wait_times_each_from_its_own_start() {
        // Set far off, then entered in tokio's wheel by a first wait.
        let mut timer = pin!(KeptTimer::new(LIMIT * 10));
        let first = HeadWait::new(
            async { "first" },
            timer.as_mut(),
            Instant::now(),
            LIMIT,
            || false,
        );
        assert!(matches!(first.await, Waited::Sent("first")));
        // Later waits move it later, and each still ends at its own limit.
        for _ in 0..3 {
            tokio::time::advance(LIMIT / 2).await;
            let started = Instant::now();
            let waited = HeadWait::new(pending::<()>(), timer.as_mut(), started, LIMIT, || false);
            assert!(matches!(waited.await, Waited::TimedOut));
            assert_eq!(started.elapsed(), LIMIT);
        }
        // One entered for a wait that ended with its head, then fired with
        // no wait polling it, still times the next wait.
        let quick = HeadWait::new(
            async { "quick" },
            timer.as_mut(),
            Instant::now(),
            LIMIT,
            || false,
        );
        assert!(matches!(quick.await, Waited::Sent("quick")));
        tokio::time::advance(LIMIT * 2).await;
        let started = Instant::now();
        let sent = async {
            sleep(LIMIT - Duration::from_millis(1)).await;
            "in time"
        };
        let waited = HeadWait::new(sent, timer.as_mut(), started, LIMIT, || false);
        assert!(matches!(waited.await, Waited::Sent("in time")));
        let waited = HeadWait::new(
            pending::<()>(),
            timer.as_mut(),
            Instant::now(),
            LIMIT / 5,
            || false,
        );
        assert!(
            matches!(waited.await, Waited::TimedOut),
            "an earlier deadline than the timer's last"
        );
        assert_eq!(
            started.elapsed(),
            LIMIT - Duration::from_millis(1) + LIMIT / 5
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_within_the_limit_is_the_answer() {
        let mut timer = pin!(KeptTimer::new(LIMIT));
        let sent = async {
            tokio::time::sleep(LIMIT / 2).await;
            "head"
        };
        let waited = HeadWait::new(sent, timer.as_mut(), Instant::now(), LIMIT, || false).await;
        assert!(matches!(waited, Waited::Sent("head")));
    }

    #[tokio::test(start_paused = true)]
    async fn no_head_within_the_limit_times_out() {
        let mut timer = pin!(KeptTimer::new(LIMIT));
        let started = Instant::now();
        let waited = HeadWait::new(
            pending::<()>(),
            timer.as_mut(),
            Instant::now(),
            LIMIT,
            || false,
        )
        .await;
        assert!(matches!(waited, Waited::TimedOut));
        assert_eq!(started.elapsed(), LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_starts_again_while_the_upstream_waits_on_the_client() {
        let mut timer = pin!(KeptTimer::new(LIMIT));
        // Waiting on the client for the first two limits, then not.
        let asked = Cell::new(0);
        let waits_on_client = || {
            asked.set(asked.get() + 1);
            asked.get() <= 2
        };
        let started = Instant::now();
        let waited = HeadWait::new(
            pending::<()>(),
            timer.as_mut(),
            Instant::now(),
            LIMIT,
            waits_on_client,
        )
        .await;
        assert!(matches!(waited, Waited::TimedOut));
        assert_eq!(started.elapsed(), LIMIT * 3);

        let asked = Cell::new(0);
        let waits_on_client = || {
            asked.set(asked.get() + 1);
            true
        };
        let sent = async {
            tokio::time::sleep(LIMIT * 4 - Duration::from_millis(1)).await;
            "late head"
        };
        let waited =
            HeadWait::new(sent, timer.as_mut(), Instant::now(), LIMIT, waits_on_client).await;
        assert!(matches!(waited, Waited::Sent("late head")));
        assert_eq!(
            asked.get(),
            3,
            "a fresh limit after each of the first three"
        );
    }
}
