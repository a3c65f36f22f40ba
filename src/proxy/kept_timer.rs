//! A timer that one task keeps for many waits (a connection's, one wait per
//! request), whose deadline moves at each, and that costs a wait neither a
//! move of tokio's timer nor an entry of the task's waker in it.
//!
//! - **Moves.** Moving a tokio `Sleep` later takes a count on the runtime's
//!   handle and gives it back, and marks the timer (three atomic updates).
//!   A `KeptTimer` moved later only notes its new deadline: the `Sleep`
//!   fires at the old one, and is moved on then (once a timeout, on a busy
//!   connection). A move earlier moves the `Sleep` at once.
//! - **Waits.** Polling a `Sleep` enters the waker anew each time: two
//!   atomic updates of its slot, a count taken on the new waker and one
//!   given back on the old. A timer keeps the waker it was given until it
//!   fires, and moving it keeps it too. So once a poll has entered the
//!   waker, a later poll that finds the timer not fired can only be
//!   answered "not yet", and is answered so without polling the `Sleep`.
//!   A timer that fired unseen gave its waker away: the next move or poll
//!   notices, and enters the waker again.
//!
//! Only for a timer polled by one task: another task's poll would find the
//! first task's waker entered, and wait unwoken. And only with tokio's
//! timer as built here: its alternative timer (`tokio_unstable`) would not
//! keep the waker across a move.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pin_project! {
    pub struct KeptTimer {
        // Set for `due` or earlier.
        #[pin]
        sleep: Sleep,
        due: Instant,
        // Whether a poll has entered the task's waker since the timer
        // last fired.
        waker_entered: bool,
    }
}

impl KeptTimer {
    /// A timer that fires `duration` from now.
    pub fn new(duration: Duration) -> KeptTimer {
        let due = Instant::now() + duration;
        KeptTimer {
            sleep: tokio::time::sleep_until(due),
            due,
            waker_entered: false,
        }
    }

    /// Makes the timer fire at `deadline`, whether or not it fired.
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        let this = self.project();
        *this.due = deadline;
        if this.sleep.is_elapsed() {
            *this.waker_entered = false;
            this.sleep.reset(deadline);
        } else if deadline < this.sleep.deadline() {
            this.sleep.reset(deadline);
        }
    }
}

impl Future for KeptTimer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        loop {
            if *this.waker_entered && !this.sleep.is_elapsed() {
                return Poll::Pending;
            }
            // A task out of its budget (tokio's `coop`) is told "not yet"
            // by the `Sleep` before it enters any waker.
            let budget_left = tokio::task::coop::has_budget_remaining();
            let polled = this.sleep.as_mut().poll(cx);
            *this.waker_entered = polled.is_pending() && budget_left;
            if polled.is_pending() || *this.due <= this.sleep.deadline() {
                return polled;
            }
            // Fired at a deadline since moved later: on to that one.
            this.sleep.as_mut().reset(*this.due);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::pin::pin;

    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    /// Polls `timer` once.
    async fn poll_once(timer: &mut Pin<&mut KeptTimer>) -> Poll<()> {
        poll_fn(|cx| Poll::Ready(timer.as_mut().poll(cx))).await
    }

    #[tokio::test(start_paused = true)]
    async fn it_fires_at_its_deadline_after_being_polled_many_times() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        for _ in 0..3 {
            assert!(poll_once(&mut timer).await.is_pending());
        }
        let started = Instant::now();
        timer.as_mut().await;
        assert_eq!(started.elapsed(), WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_is_the_one_it_fires_at() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        assert!(poll_once(&mut timer).await.is_pending());
        let started = Instant::now();
        timer.as_mut().reset(started + 3 * WAIT);
        tokio::time::advance(2 * WAIT).await;
        assert!(poll_once(&mut timer).await.is_pending(), "not yet");
        timer.as_mut().await;
        assert_eq!(started.elapsed(), 3 * WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_that_fired_unseen_and_was_moved_wakes_the_next_wait() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        assert!(poll_once(&mut timer).await.is_pending());
        // It fires while no one waits on it (its waker is used up)...
        tokio::time::sleep(2 * WAIT).await;
        // ...and is moved before it is polled again: the wait after that
        // is woken at the new deadline, not left waiting for good.
        let started = Instant::now();
        timer.as_mut().reset(started + WAIT);
        let fired = tokio::time::timeout(10 * WAIT, timer.as_mut()).await;
        assert!(fired.is_ok(), "the timer woke its wait");
        assert_eq!(started.elapsed(), WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_later_many_times_is_the_last_one() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        let started = Instant::now();
        for _ in 0..4 {
            assert!(poll_once(&mut timer).await.is_pending());
            tokio::time::advance(WAIT / 2).await;
            timer.as_mut().reset(Instant::now() + WAIT);
        }
        timer.as_mut().await;
        assert_eq!(started.elapsed(), 3 * WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_earlier_fires_then() {
        let mut timer = pin!(KeptTimer::new(3 * WAIT));
        assert!(poll_once(&mut timer).await.is_pending());
        let started = Instant::now();
        timer.as_mut().reset(started + WAIT);
        timer.as_mut().await;
        assert_eq!(started.elapsed(), WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_made_out_of_budget_is_made_again() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        // The task's budget spent before its first wait: the `Sleep`
        // answers "not yet" without a waker, and the next poll must ask it
        // again.
        let started = Instant::now();
        let mut spent = false;
        let fired = tokio::time::timeout(
            3 * WAIT,
            poll_fn(|cx| {
                if !std::mem::replace(&mut spent, true) {
                    while tokio::task::coop::has_budget_remaining() {
                        let _ = pin!(tokio::task::coop::consume_budget()).poll(cx);
                    }
                }
                timer.as_mut().poll(cx)
            }),
        )
        .await;
        assert!(fired.is_ok(), "the timer woke its wait");
        assert_eq!(started.elapsed(), WAIT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_timer_moved_to_a_past_deadline_fires_at_once() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        assert!(poll_once(&mut timer).await.is_pending());
        timer.as_mut().reset(Instant::now());
        let fired = tokio::time::timeout(WAIT / 2, timer.as_mut()).await;
        assert!(fired.is_ok());
    }
}
