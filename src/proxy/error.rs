//! Every status dockhand answers by itself, and the one place errors become them:
//! a one-line plain-text body and an `x-dockhand-error` header naming the reason.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::body::ProxyBody;

/// Why a request was not answered by an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyError {
    MissingHost,
    HeadersTooLarge,
    NoHost,
    NoLocation,
    NoUpstream,
    ConnectRefused,
    ConnectTimeout,
    ConnectFailed,
    UpstreamTimeout,
    /// The location's rewrite made the path longer than a request may carry.
    RewrittenPathTooLong,
    /// The upstream closed, reset or answered something that is not HTTP.
    BadResponse,
}

pub const ERROR_HEADER: &str = "x-dockhand-error";

impl ProxyError {
    pub fn status(self) -> StatusCode {
        match self {
            ProxyError::MissingHost => StatusCode::BAD_REQUEST,
            ProxyError::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ProxyError::NoHost | ProxyError::NoLocation => StatusCode::NOT_FOUND,
            ProxyError::NoUpstream => StatusCode::SERVICE_UNAVAILABLE,
            ProxyError::ConnectRefused | ProxyError::ConnectFailed | ProxyError::BadResponse => {
                StatusCode::BAD_GATEWAY
            }
            ProxyError::ConnectTimeout | ProxyError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ProxyError::RewrittenPathTooLong => StatusCode::URI_TOO_LONG,
        }
    }

    /// The upstream could not be reached: nothing of the request was sent.
    pub fn is_connect_failure(self) -> bool {
        matches!(
            self,
            ProxyError::ConnectRefused | ProxyError::ConnectTimeout | ProxyError::ConnectFailed
        )
    }

    /// The machine-readable reason, sent in `x-dockhand-error` and logged.
    pub fn reason(self) -> &'static str {
        match self {
            ProxyError::MissingHost => "missing_host",
            ProxyError::HeadersTooLarge => "headers_too_large",
            ProxyError::NoHost => "no_host",
            ProxyError::NoLocation => "no_location",
            ProxyError::NoUpstream => "no_upstream",
            ProxyError::ConnectRefused => "connect_refused",
            ProxyError::ConnectTimeout => "connect_timeout",
            ProxyError::ConnectFailed => "connect_failed",
            ProxyError::UpstreamTimeout => "upstream_timeout",
            ProxyError::RewrittenPathTooLong => "rewritten_path_too_long",
            ProxyError::BadResponse => "bad_response",
        }
    }

    fn message(self) -> &'static str {
        match self {
            ProxyError::MissingHost => "the request has no Host header\n",
            ProxyError::HeadersTooLarge => "the request headers are over 64 KiB\n",
            ProxyError::NoHost => "no route for this host\n",
            ProxyError::NoLocation => "no route for this path\n",
            ProxyError::NoUpstream => "no upstream is available\n",
            ProxyError::ConnectRefused => "the upstream refused the connection\n",
            ProxyError::ConnectTimeout => "the upstream did not accept a connection in time\n",
            ProxyError::ConnectFailed => "the upstream could not be reached\n",
            ProxyError::UpstreamTimeout => "the upstream did not answer in time\n",
            ProxyError::RewrittenPathTooLong => "the rewritten path is too long\n",
            ProxyError::BadResponse => "the upstream sent no valid answer\n",
        }
    }

    pub fn into_response(self) -> Response<ProxyBody> {
        let mut response = Response::new(ProxyBody::message(Bytes::from_static(
            self.message().as_bytes(),
        )));
        *response.status_mut() = self.status();
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(ERROR_HEADER, HeaderValue::from_static(self.reason()));
        response
    }
}
