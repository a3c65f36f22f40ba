//! The client's request body as dockhand reads it: hyper's body, with a
//! limit on how long the client may leave it waiting between two frames
//! (`--client-body-timeout`). Its errors are the client's faults (a
//! malformed or cut body, a stall), told apart from the upstream's so they
//! become `400` and `408` and never count against an upstream.

use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::error::{ErrorKind, ProxyError};
use super::stall::StallTimer;

pub struct ClientStream {
    body: Incoming,
    stall: StallTimer,
}

/// Why the client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// Malformed (a bad chunk size), or cut (the client closed or reset).
    #[error("the request body could not be read")]
    Broken(#[source] hyper::Error),
    #[error("no request body bytes for {0:?} (--client-body-timeout)")]
    Stalled(Duration),
}

impl From<ClientBodyError> for ProxyError {
    fn from(error: ClientBodyError) -> ProxyError {
        let kind = match error {
            ClientBodyError::Broken(_) => ErrorKind::BadRequestBody,
            ClientBodyError::Stalled(_) => ErrorKind::RequestBodyTimeout,
        };
        ProxyError::new(kind, error)
    }
}

impl ClientStream {
    pub fn new(body: Incoming, idle_timeout: Duration) -> ClientStream {
        ClientStream {
            body,
            stall: StallTimer::new(idle_timeout),
        }
    }
}

impl Body for ClientStream {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.stall.frame_came();
                Poll::Ready(frame.map(|frame| frame.map_err(ClientBodyError::Broken)))
            }
            // The client has nothing for us now: it fails once it has had
            // nothing for the whole timeout.
            Poll::Pending => {
                ready!(this.stall.poll_expired(cx));
                let stalled = ClientBodyError::Stalled(this.stall.limit);
                Poll::Ready(Some(Err(stalled)))
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
