//! The client's request body as dockhand reads it: hyper's (HTTP/2, and
//! HTTP/1.1 with `--http1-engine hyper`) or the own HTTP/1.1 server's, with a
//! limit on how long the client may leave it waiting between two frames
//! (`--client-body-timeout`). Its errors are the client's faults (a
//! malformed or cut body, a stall), told apart from the upstream's so they
//! become `400` and `408` and never count against an upstream.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::error::{Cause, ErrorKind, ProxyError};
use super::http1_server::Http1RequestBody;
use super::stall::{StallErrors, StallLimited};

pub type ClientStream = StallLimited<ClientIncoming, ClientBodyError>;

/// A request body, whichever server read its head.
pub enum ClientIncoming {
    Hyper(Incoming),
    Http1(Http1RequestBody),
}

impl Body for ClientIncoming {
    type Data = Bytes;
    type Error = Cause;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cause>>> {
        match self.get_mut() {
            ClientIncoming::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Cause::from),
            ClientIncoming::Http1(body) => Pin::new(body).poll_frame(cx).map_err(Cause::from),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientIncoming::Hyper(body) => body.is_end_stream(),
            ClientIncoming::Http1(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientIncoming::Hyper(body) => body.size_hint(),
            ClientIncoming::Http1(body) => body.size_hint(),
        }
    }
}

/// Why the client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// Malformed (a bad chunk size), or cut (the client closed or reset).
    #[error("the request body could not be read")]
    Broken(#[source] Cause),
    #[error("no request body bytes for {0:?} (--client-body-timeout)")]
    Stalled(Duration),
}

impl StallErrors for ClientBodyError {
    fn broken(error: Cause) -> Self {
        ClientBodyError::Broken(error)
    }

    fn stalled(limit: Duration) -> Self {
        ClientBodyError::Stalled(limit)
    }
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
