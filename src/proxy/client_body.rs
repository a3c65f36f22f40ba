//! The client's request body as dockhand reads it: hyper's body, with a
//! limit on how long the client may leave it waiting between two frames
//! (`--client-body-timeout`). Its errors are the client's faults (a
//! malformed or cut body, a stall), told apart from the upstream's so they
//! become `400` and `408` and never count against an upstream.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

use super::error::{ErrorKind, ProxyError};

pub struct ClientStream {
    body: Incoming,
    idle_timeout: Duration,
    /// Ends the wait for the client's next frame; made at the first wait,
    /// reset at each later one.
    stall: Option<Pin<Box<Sleep>>>,
    /// Whether the last poll found nothing from the client (the stall timer runs).
    waiting: bool,
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
            idle_timeout,
            stall: None,
            waiting: false,
        }
    }

    /// The client has nothing for us now: fails once it has had nothing for
    /// the whole timeout, counted from the start of this wait.
    fn poll_stall(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let stall = match &mut self.stall {
            Some(stall) if self.waiting => stall,
            Some(stall) => {
                stall.as_mut().reset(Instant::now() + self.idle_timeout);
                stall
            }
            stall @ None => stall.insert(Box::pin(tokio::time::sleep(self.idle_timeout))),
        };
        self.waiting = true;
        ready!(stall.as_mut().poll(cx));
        Poll::Ready(Some(Err(ClientBodyError::Stalled(self.idle_timeout))))
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
                this.waiting = false;
                Poll::Ready(frame.map(|frame| frame.map_err(ClientBodyError::Broken)))
            }
            Poll::Pending => this.poll_stall(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
