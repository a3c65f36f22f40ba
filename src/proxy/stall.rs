//! The timer of a body read frame by frame: how long it has left its reader
//! waiting for the next frame. The wait is counted from when the reader
//! first found nothing, so time the reader spent elsewhere (a slow client
//! not asking for more) is never blamed on the body.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub struct StallTimer {
    pub limit: Duration,
    /// Ends the current wait; made at the first wait, reset at each later one.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Whether the last poll found nothing (the timer runs).
    waiting: bool,
}

impl StallTimer {
    pub fn new(limit: Duration) -> StallTimer {
        StallTimer {
            limit,
            deadline: None,
            waiting: false,
        }
    }

    /// The body gave a frame (or ended): the next wait starts afresh.
    pub fn frame_came(&mut self) {
        self.waiting = false;
    }

    /// The body has nothing now: ready once it has had nothing for the
    /// whole limit, counted from the start of this wait.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = match &mut self.deadline {
            Some(deadline) if self.waiting => deadline,
            Some(deadline) => {
                deadline.as_mut().reset(Instant::now() + self.limit);
                deadline
            }
            deadline @ None => deadline.insert(Box::pin(tokio::time::sleep(self.limit))),
        };
        self.waiting = true;
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    async fn expired(timer: &mut StallTimer) -> bool {
        poll_fn(|cx| Poll::Ready(timer.poll_expired(cx).is_ready())).await
    }

    async fn advance(millis: u64) {
        tokio::time::advance(Duration::from_millis(millis)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn one_wait_runs_across_polls_until_the_limit() {
        let mut timer = StallTimer::new(Duration::from_secs(1));
        assert!(!expired(&mut timer).await);
        advance(900).await;
        assert!(!expired(&mut timer).await, "polling again does not restart it");
        advance(200).await;
        assert!(expired(&mut timer).await);
    }

    #[tokio::test(start_paused = true)]
    async fn time_between_a_frame_and_the_next_wait_does_not_count() {
        let mut timer = StallTimer::new(Duration::from_secs(1));
        assert!(!expired(&mut timer).await);
        advance(900).await;
        timer.frame_came();
        // The reader is busy elsewhere (a slow client) far past the limit.
        advance(5_000).await;
        assert!(!expired(&mut timer).await, "the new wait starts now");
        advance(900).await;
        assert!(!expired(&mut timer).await);
        advance(200).await;
        assert!(expired(&mut timer).await);
    }
}
