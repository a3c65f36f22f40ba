//! A body read frame by frame with a limit on how long it may leave its
//! reader waiting for the next frame: the client's request body
//! (`--client-body-timeout`) and the upstream's response body
//! (`--upstream-timeout`). The wait is counted from when the reader first
//! found nothing, so time the reader spent elsewhere (a slow peer on the
//! other side not asking for more) is never blamed on the body.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::counter::Counter;
use tokio::time::{Instant, Sleep};

use super::error::Cause;

/// What a stall-limited body's errors are, so that each side can say whose
/// fault they are.
pub trait StallErrors: Sized {
    /// The body could not be read (malformed, or the peer closed or reset).
    fn broken(error: Cause) -> Self;
    /// Nothing came for the whole `limit`.
    fn stalled(limit: Duration) -> Self;
    /// More than `limit` bytes came (only bodies given a size limit).
    fn too_large(limit: u64) -> Self {
        Self::broken(format!("the body is over {limit} bytes").into())
    }
}

/// A body (hyper's, or the own HTTP/1.1 exchange's), failing with
/// `E::stalled` once it has had nothing for its limit.
pub struct StallLimited<B, E> {
    body: B,
    stall: StallTimer,
    /// Where the data bytes read are counted, if anywhere.
    bytes_read: Option<Counter>,
    /// The most data bytes the body may have (`max_body_size`), and how
    /// many it has had.
    size_limit: Option<u64>,
    size: u64,
    errors: PhantomData<fn() -> E>,
}

impl<B, E> StallLimited<B, E> {
    pub fn new(body: B, limit: Duration) -> StallLimited<B, E> {
        StallLimited {
            body,
            stall: StallTimer::new(limit),
            bytes_read: None,
            size_limit: None,
            size: 0,
            errors: PhantomData,
        }
    }

    /// Fails with `E::too_large` once more than `limit` data bytes came.
    pub fn limited_to(mut self, limit: Option<u64>) -> StallLimited<B, E> {
        self.size_limit = limit;
        self
    }

    /// Counts the data bytes read into `counter`.
    pub fn counting_into(mut self, counter: Counter) -> StallLimited<B, E> {
        self.bytes_read = Some(counter);
        self
    }
}

impl<B, E> Body for StallLimited<B, E>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Cause>,
    E: StallErrors,
{
    type Data = Bytes;
    type Error = E;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.stall.frame_came();
                let data_len = match &frame {
                    Some(Ok(frame)) => frame.data_ref().map_or(0, |data| data.len() as u64),
                    _ => 0,
                };
                if let Some(counter) = &this.bytes_read {
                    counter.inc_by(data_len);
                }
                this.size += data_len;
                if let Some(limit) = this.size_limit.filter(|limit| this.size > *limit) {
                    return Poll::Ready(Some(Err(E::too_large(limit))));
                }
                Poll::Ready(frame.map(|frame| frame.map_err(|error| E::broken(error.into()))))
            }
            Poll::Pending => {
                ready!(this.stall.poll_expired(cx));
                Poll::Ready(Some(Err(E::stalled(this.stall.limit))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// How long the current wait for a frame has lasted.
struct StallTimer {
    limit: Duration,
    /// Ends the current wait; made at the first wait, reset at each later one.
    deadline: Option<Pin<Box<Sleep>>>,
    /// Whether the last poll found nothing (the timer runs).
    waiting: bool,
}

impl StallTimer {
    fn new(limit: Duration) -> StallTimer {
        StallTimer {
            limit,
            deadline: None,
            waiting: false,
        }
    }

    /// The body gave a frame (or ended): the next wait starts afresh.
    fn frame_came(&mut self) {
        self.waiting = false;
    }

    /// The body has nothing now: ready once it has had nothing for the
    /// whole limit, counted from the start of this wait.
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
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
        assert!(
            !expired(&mut timer).await,
            "polling again does not restart it"
        );
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
