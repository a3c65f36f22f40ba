//! A timer that one task keeps for many waits (a connection's, one wait per
//! request), and that enters the task's waker once rather than at every
//! wait. Polling a tokio `Sleep` enters the waker anew each time: two atomic
//! updates of its slot and a count taken on the new waker and given back on
//! the old, four atomic updates a request per timer.
//!
//! A timer keeps the waker it was given until it fires, and moving its
//! deadline keeps it too (a `Sleep`'s `reset` leaves the waker where it is).
//! So once a poll has entered the waker, a later poll that finds the timer
//! not fired can only be answered "not yet", and is answered so without
//! polling the `Sleep`. A timer that fired unseen, between a poll and a
//! `reset`, gave its waker away: `reset` notices, and the next poll enters
//! the waker again.
//!
//! Only for a timer polled by one task: another task's poll would find the
//! first task's waker entered, and wait unwoken.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pin_project! {
    pub struct KeptTimer {
        #[pin]
        sleep: Sleep,
        // Whether a poll has entered the task's waker since the timer
        // last fired.
        waker_entered: bool,
    }
}

impl KeptTimer {
    /// A timer that fires `duration` from now.
    pub fn new(duration: Duration) -> KeptTimer {
        KeptTimer {
            sleep: tokio::time::sleep(duration),
            waker_entered: false,
        }
    }

    /// Moves the timer to fire at `deadline`, whether or not it fired.
    pub fn reset(self: Pin<&mut Self>, deadline: Instant) {
        let this = self.project();
        if this.sleep.is_elapsed() {
            *this.waker_entered = false;
        }
        this.sleep.reset(deadline);
    }
}

impl Future for KeptTimer {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if *this.waker_entered && !this.sleep.is_elapsed() {
            return Poll::Pending;
        }
        let polled = this.sleep.poll(cx);
        *this.waker_entered = polled.is_pending();
        polled
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
    async fn a_timer_moved_to_a_past_deadline_fires_at_once() {
        let mut timer = pin!(KeptTimer::new(WAIT));
        assert!(poll_once(&mut timer).await.is_pending());
        timer.as_mut().reset(Instant::now());
        let fired = tokio::time::timeout(WAIT / 2, timer.as_mut()).await;
        assert!(fired.is_ok());
    }
}
