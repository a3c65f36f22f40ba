//! The client's request body as dockhand reads it: hyper's (HTTP/2, and
//! HTTP/1.1 with `--http1-engine hyper`) or the own HTTP/1.1 server's, with a
//! limit on how long the client may leave it waiting between two frames
//! (`--client-body-timeout`). Its errors are the client's faults (a
//! malformed or cut body, a stall), told apart from the upstream's so they
//! become `400` and `408` and never count against an upstream.

use std::time::Duration;

use http_body_util::Either;
use hyper::body::Incoming;

use super::error::{Cause, ErrorKind, ProxyError};
// From the server's wire layer, not the server: the server calls the
// handler that takes this body, and would be imported back.
use super::http1_server::wire::Http1RequestBody;
use super::stall::{StallErrors, StallLimited};

pub type ClientStream = StallLimited<ClientIncoming, ClientBodyError>;

/// A request body, whichever server read its head: hyper's (`Left`) or
/// the own HTTP/1.1 server's (`Right`).
pub type ClientIncoming = Either<Incoming, Http1RequestBody>;

/// Why the client's body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    /// Malformed (a bad chunk size), or cut (the client closed or reset).
    #[error("the request body could not be read")]
    Broken(#[source] Cause),
    #[error("no request body bytes for {0:?} (--client-body-timeout)")]
    Stalled(Duration),
    #[error("the request body is over the location's max_body_size ({0} bytes)")]
    TooLarge(u64),
}

impl StallErrors for ClientBodyError {
    fn broken(error: Cause) -> Self {
        ClientBodyError::Broken(error)
    }

    fn stalled(limit: Duration) -> Self {
        ClientBodyError::Stalled(limit)
    }

    fn too_large(limit: u64) -> Self {
        ClientBodyError::TooLarge(limit)
    }
}

impl From<ClientBodyError> for ProxyError {
    fn from(error: ClientBodyError) -> ProxyError {
        let kind = match error {
            ClientBodyError::Broken(_) => ErrorKind::BadRequestBody,
            ClientBodyError::Stalled(_) => ErrorKind::RequestBodyTimeout,
            ClientBodyError::TooLarge(_) => ErrorKind::BodyTooLarge,
        };
        ProxyError::new(kind, error)
    }
}
