//! The body sent upstream: the client's body streamed as it arrives, or none
//! (a request sent again after its first upstream failed; only bodyless
//! requests are sent again).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

pub enum UpstreamBody {
    Streamed(Incoming),
    Empty,
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            UpstreamBody::Streamed(body) => Pin::new(body).poll_frame(cx),
            UpstreamBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Streamed(body) => body.is_end_stream(),
            UpstreamBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Streamed(body) => body.size_hint(),
            UpstreamBody::Empty => SizeHint::with_exact(0),
        }
    }
}
