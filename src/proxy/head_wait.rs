//! The wait for an upstream's response head under `--upstream-timeout`: a
//! future that holds the try's sending future itself, not a copy of it.
//! (An `async fn` that pins the future it is given keeps both its argument
//! and the pinned copy for as long as it runs, and the request's future,
//! which holds this one, grows by the try's whole size.)

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Instant, Sleep};

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
    pub struct HeadWait<F, W> {
        #[pin]
        sent: F,
        #[pin]
        deadline: Sleep,
        limit: Duration,
        waits_on_client: W,
    }
}

impl<F, W> HeadWait<F, W> {
    /// The first wait ends `limit` after `started`, the try's start as
    /// the caller read it already.
    pub fn new(sent: F, started: Instant, limit: Duration, waits_on_client: W) -> HeadWait<F, W> {
        HeadWait {
            sent,
            deadline: sleep_until(started + limit),
            limit,
            waits_on_client,
        }
    }
}

impl<F: Future, W: Fn() -> bool> Future for HeadWait<F, W> {
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

    use super::*;

    const LIMIT: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn a_head_within_the_limit_is_the_answer() {
        let sent = async {
            tokio::time::sleep(LIMIT / 2).await;
            "head"
        };
        let waited = HeadWait::new(sent, Instant::now(), LIMIT, || false).await;
        assert!(matches!(waited, Waited::Sent("head")));
    }

    #[tokio::test(start_paused = true)]
    async fn no_head_within_the_limit_times_out() {
        let started = Instant::now();
        let waited = HeadWait::new(std::future::pending::<()>(), Instant::now(), LIMIT, || {
            false
        })
        .await;
        assert!(matches!(waited, Waited::TimedOut));
        assert_eq!(started.elapsed(), LIMIT);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_starts_again_while_the_upstream_waits_on_the_client() {
        // Waiting on the client for the first two limits, then not.
        let asked = Cell::new(0);
        let waits_on_client = || {
            asked.set(asked.get() + 1);
            asked.get() <= 2
        };
        let started = Instant::now();
        let waited = HeadWait::new(
            std::future::pending::<()>(),
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
        let waited = HeadWait::new(sent, Instant::now(), LIMIT, waits_on_client).await;
        assert!(matches!(waited, Waited::Sent("late head")));
        assert_eq!(
            asked.get(),
            3,
            "a fresh limit after each of the first three"
        );
    }
}
