//! What an upstream answered, whichever client read it: a response whose
//! body is hyper's (HTTP/2, TLS, SRV destinations, protocol switches, or
//! every upstream with `--http1-engine hyper`) or dockhand's own HTTP/1.1
//! exchange's; and why a send failed, in the terms of the client that
//! tried.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::error::BoxError as Cause;
use super::error::ExchangeError;
use super::http1_body::Http1Body;

pub type UpstreamResponse = Response<UpstreamIncoming>;

pub enum UpstreamIncoming {
    Hyper(Incoming),
    Http1(Http1Body),
}

/// Why a request got no response head.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Hyper(#[from] hyper_util::client::legacy::Error),
    #[error(transparent)]
    Http1(#[from] ExchangeError),
}

impl Body for UpstreamIncoming {
    type Data = Bytes;
    type Error = Cause;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cause>>> {
        match self.get_mut() {
            UpstreamIncoming::Hyper(body) => Pin::new(body).poll_frame(cx).map_err(Cause::from),
            UpstreamIncoming::Http1(body) => Pin::new(body).poll_frame(cx).map_err(Cause::from),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamIncoming::Hyper(body) => body.is_end_stream(),
            UpstreamIncoming::Http1(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamIncoming::Hyper(body) => body.size_hint(),
            UpstreamIncoming::Http1(body) => body.size_hint(),
        }
    }
}
