//! The upstream's response body as dockhand reads it: hyper's body, cut
//! when the upstream leaves it waiting for `--upstream-timeout` between two
//! frames. Without the limit, a body that stalls after its head would hold
//! the client, and the upstream connection, for as long as the upstream
//! likes. A slow client does not count: the wait starts when dockhand asks
//! for the next frame.

use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::error::Cause;
use super::stall::StallTimer;

pub struct UpstreamStream {
    body: Incoming,
    stall: StallTimer,
}

#[derive(Debug, thiserror::Error)]
#[error("no response body bytes for {0:?} (--upstream-timeout)")]
pub struct ResponseStalled(Duration);

impl UpstreamStream {
    pub fn new(body: Incoming, idle_timeout: Duration) -> UpstreamStream {
        UpstreamStream {
            body,
            stall: StallTimer::new(idle_timeout),
        }
    }
}

impl Body for UpstreamStream {
    type Data = Bytes;
    type Error = Cause;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cause>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.stall.frame_came();
                Poll::Ready(frame.map(|frame| frame.map_err(Cause::from)))
            }
            Poll::Pending => {
                ready!(this.stall.poll_expired(cx));
                let stalled = ResponseStalled(this.stall.limit);
                Poll::Ready(Some(Err(stalled.into())))
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
