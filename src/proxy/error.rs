//! Every status dockhand answers by itself, and the one place errors become
//! them: a one-line plain-text body, an `x-dockhand-error` header naming the
//! reason, and `Retry-After` on every 503. A `ProxyError` is a kind (which
//! picks the status and the reason) and, when something failed underneath, a
//! cause (the I/O, TLS, DNS or protocol error), kept as its `source()` for
//! the log and the access log. Which failures are which kind is decided
//! where they are met (`forward::classify`, `connect::ConnectError`).

use std::error::Error;
use std::fmt;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

pub const ERROR_HEADER: &str = "x-dockhand-error";

/// Seconds a client is asked to wait after a 503. Names are resolved again
/// every 5 s and an SRV service without targets is cached for its 5 s
/// negative TTL, so asking sooner mostly meets the same answer.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The reason logged, and written to the access log, when an upstream's body
/// is cut after its head was sent on: no status can be answered any more, so
/// the client's connection is ended abnormally instead.
pub const RESET_MID_RESPONSE: &str = "reset_mid_response";

/// The reason written to the access log for a response that ended because
/// its client accepted no bytes for `--client-send-timeout` and was cut.
pub const CLIENT_SEND_TIMEOUT: &str = "client_send_timeout";

/// The error underneath a status.
pub type Cause = Box<dyn Error + Send + Sync>;

/// Why a request was not answered by an upstream: what kind of failure (its
/// status and reason) and, when there is one, what failed underneath.
#[derive(Debug)]
pub struct ProxyError {
    kind: ErrorKind,
    cause: Option<Cause>,
    /// A header the answer needs besides the usual ones (`Retry-After`
    /// past a rate limit, `WWW-Authenticate` for a login).
    header: Option<(HeaderName, HeaderValue)>,
}

/// What went wrong, as far as the client's answer is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No `Host` header (nor an authority in the request line).
    MissingHost,
    /// A `Host` that can't be a host name (`a:b:c`, a port that is not a
    /// number), or an HTTP/2 `Host` naming another host than `:authority`.
    BadHost,
    /// More than one `Host` line (RFC 9112 §3.2): which one is meant is
    /// ambiguous, so none is.
    RepeatedHost,
    /// The client's body could not be read: malformed (a bad chunk size) or
    /// cut (the client closed or reset mid-body).
    BadRequestBody,
    /// The client sent nothing of its body for `--client-body-timeout`.
    RequestBodyTimeout,
    /// The request's body is over its location's `max_body_size`, as
    /// declared or as sent.
    BodyTooLarge,
    /// The client's address is not in its location's `ip_allow`.
    NotAllowed,
    /// The client's bucket of its location's `rate_limit` is empty.
    RateLimited,
    /// No credentials, or wrong ones, for its location's `basic_auth`.
    Unauthorized,
    /// The location's `forward_auth` service could not be asked (no
    /// address, refused, reset, not HTTP): the request does not go through.
    ForwardAuthFailed,
    /// The `forward_auth` service did not answer within `--upstream-timeout`.
    ForwardAuthTimeout,
    /// The request's `Transfer-Encoding` has a coding besides one final
    /// `chunked` (RFC 9112 §6.1): dockhand implements no other.
    UnsupportedTransferCoding,
    HeadersTooLarge,
    NoHost,
    NoLocation,
    /// The location's upstream names have no address (yet).
    NoUpstream,
    /// The location has no upstream at all: its containers are stopped,
    /// paused, starting, unhealthy, unreachable, or in their grace period.
    NoHealthyUpstream,
    ConnectRefused,
    ConnectTimeout,
    /// Connecting failed some other way (unreachable network or host).
    ConnectFailed,
    /// The upstream left the location (its container went away) while it
    /// was being connected to, and none took its place within
    /// `--upstream-wait`. Nothing was sent.
    UpstreamLeft,
    TlsHandshake,
    /// The SRV service has no records, or only `.` as its target.
    DnsNoRecords,
    /// A lookup the connection needed failed (timeout, SERVFAIL, no server).
    DnsFailure,
    UpstreamTimeout,
    /// The location's rewrite made the path longer than a request may carry.
    RewrittenPathTooLong,
    /// The upstream closed or reset the connection before its response head.
    ResetBeforeResponse,
    /// The upstream answered bytes that are not HTTP.
    NotHttp,
    /// The upstream's response head does not fit in what an upstream
    /// connection buffers (64 KiB, and at most one more read: 128 KiB).
    UpstreamHeadTooLarge,
    /// The upstream's response has a transfer coding besides `chunked`,
    /// which dockhand never asks for and does not pass on.
    UpstreamTransferCoding,
    /// The upstream's response body failed (malformed, or cut) before any
    /// of the response was sent on.
    BadResponseBody,
    /// The upstream switched protocols (`101`) where no switch was
    /// forwarded, or to a protocol not offered: passing it on would tunnel
    /// the client past routing.
    UnexpectedUpgrade,
}

impl ErrorKind {
    /// Every kind, so each reason can be listed (metrics show them all from the start).
    pub const ALL: [ErrorKind; 32] = [
        ErrorKind::MissingHost,
        ErrorKind::BadHost,
        ErrorKind::RepeatedHost,
        ErrorKind::BadRequestBody,
        ErrorKind::RequestBodyTimeout,
        ErrorKind::BodyTooLarge,
        ErrorKind::NotAllowed,
        ErrorKind::RateLimited,
        ErrorKind::Unauthorized,
        ErrorKind::ForwardAuthFailed,
        ErrorKind::ForwardAuthTimeout,
        ErrorKind::UnsupportedTransferCoding,
        ErrorKind::HeadersTooLarge,
        ErrorKind::NoHost,
        ErrorKind::NoLocation,
        ErrorKind::NoUpstream,
        ErrorKind::NoHealthyUpstream,
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::ConnectFailed,
        ErrorKind::UpstreamLeft,
        ErrorKind::TlsHandshake,
        ErrorKind::DnsNoRecords,
        ErrorKind::DnsFailure,
        ErrorKind::UpstreamTimeout,
        ErrorKind::RewrittenPathTooLong,
        ErrorKind::ResetBeforeResponse,
        ErrorKind::NotHttp,
        ErrorKind::UpstreamHeadTooLarge,
        ErrorKind::UpstreamTransferCoding,
        ErrorKind::BadResponseBody,
        ErrorKind::UnexpectedUpgrade,
    ];

    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::MissingHost
            | ErrorKind::BadHost
            | ErrorKind::RepeatedHost
            | ErrorKind::BadRequestBody => StatusCode::BAD_REQUEST,
            ErrorKind::RequestBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::BodyTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::NotAllowed => StatusCode::FORBIDDEN,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::ForwardAuthFailed => StatusCode::BAD_GATEWAY,
            ErrorKind::ForwardAuthTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ErrorKind::NoHost | ErrorKind::NoLocation => StatusCode::NOT_FOUND,
            // Known, but nothing can serve it now: worth asking again.
            ErrorKind::NoUpstream
            | ErrorKind::NoHealthyUpstream
            | ErrorKind::UpstreamLeft
            | ErrorKind::DnsNoRecords => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::ConnectRefused
            | ErrorKind::ConnectFailed
            | ErrorKind::TlsHandshake
            | ErrorKind::DnsFailure
            | ErrorKind::ResetBeforeResponse
            | ErrorKind::NotHttp
            | ErrorKind::UpstreamHeadTooLarge
            | ErrorKind::UpstreamTransferCoding
            | ErrorKind::BadResponseBody
            | ErrorKind::UnexpectedUpgrade => StatusCode::BAD_GATEWAY,
            ErrorKind::ConnectTimeout | ErrorKind::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::RewrittenPathTooLong => StatusCode::URI_TOO_LONG,
        }
    }

    /// The machine-readable reason, sent in `x-dockhand-error` and logged.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorKind::MissingHost => "missing_host",
            ErrorKind::BadHost => "bad_host",
            ErrorKind::RepeatedHost => "repeated_host",
            ErrorKind::BadRequestBody => "bad_request_body",
            ErrorKind::RequestBodyTimeout => "request_body_timeout",
            ErrorKind::BodyTooLarge => "body_too_large",
            ErrorKind::NotAllowed => "not_allowed",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::ForwardAuthFailed => "forward_auth_failed",
            ErrorKind::ForwardAuthTimeout => "forward_auth_timeout",
            ErrorKind::UnsupportedTransferCoding => "unsupported_transfer_coding",
            ErrorKind::HeadersTooLarge => "headers_too_large",
            ErrorKind::NoHost => "no_host",
            ErrorKind::NoLocation => "no_location",
            ErrorKind::NoUpstream => "no_upstream",
            ErrorKind::NoHealthyUpstream => "no_healthy_upstream",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::ConnectFailed => "connect_failed",
            ErrorKind::UpstreamLeft => "upstream_left",
            ErrorKind::TlsHandshake => "tls_handshake",
            ErrorKind::DnsNoRecords => "dns_no_records",
            ErrorKind::DnsFailure => "dns_failure",
            ErrorKind::UpstreamTimeout => "upstream_timeout",
            ErrorKind::RewrittenPathTooLong => "rewritten_path_too_long",
            ErrorKind::ResetBeforeResponse => "reset_before_response",
            ErrorKind::NotHttp => "not_http",
            ErrorKind::UpstreamHeadTooLarge => "upstream_head_too_large",
            ErrorKind::UpstreamTransferCoding => "upstream_transfer_coding",
            ErrorKind::BadResponseBody => "bad_response_body",
            ErrorKind::UnexpectedUpgrade => "unexpected_upgrade",
        }
    }

    /// The body's one line, with its newline.
    fn message(self) -> &'static str {
        match self {
            ErrorKind::MissingHost => "the request has no Host header\n",
            ErrorKind::BadHost => "the request's Host is not a host name\n",
            ErrorKind::RepeatedHost => "the request has more than one Host header\n",
            ErrorKind::BadRequestBody => "the request's body is malformed or incomplete\n",
            ErrorKind::RequestBodyTimeout => "the request's body did not arrive in time\n",
            ErrorKind::BodyTooLarge => "the request's body is over this location's limit\n",
            ErrorKind::NotAllowed => "this address may not use this location\n",
            ErrorKind::RateLimited => "too many requests; ask again after Retry-After\n",
            ErrorKind::Unauthorized => "this location needs a user name and password\n",
            ErrorKind::ForwardAuthFailed => "the authentication service could not be asked\n",
            ErrorKind::ForwardAuthTimeout => "the authentication service did not answer in time\n",
            ErrorKind::UnsupportedTransferCoding => {
                "the request's transfer coding is not implemented (only chunked is)\n"
            }
            ErrorKind::HeadersTooLarge => "the request headers are over 64 KiB\n",
            ErrorKind::NoHost => "no route for this host\n",
            ErrorKind::NoLocation => "no route for this path\n",
            ErrorKind::NoUpstream => "no upstream is available\n",
            ErrorKind::NoHealthyUpstream => "no upstream can serve this now\n",
            ErrorKind::ConnectRefused => "the upstream refused the connection\n",
            ErrorKind::ConnectTimeout => "the upstream did not accept a connection in time\n",
            ErrorKind::ConnectFailed => "the upstream could not be reached\n",
            ErrorKind::UpstreamLeft => "the upstream went away and none took its place\n",
            ErrorKind::TlsHandshake => "the TLS handshake with the upstream failed\n",
            ErrorKind::DnsNoRecords => "the upstream's DNS name has no records\n",
            ErrorKind::DnsFailure => "the upstream's DNS lookup failed\n",
            ErrorKind::UpstreamTimeout => "the upstream did not answer in time\n",
            ErrorKind::RewrittenPathTooLong => "the rewritten path is too long\n",
            ErrorKind::ResetBeforeResponse => {
                "the upstream closed the connection without answering\n"
            }
            ErrorKind::NotHttp => "the upstream's answer is not HTTP\n",
            ErrorKind::UpstreamHeadTooLarge => "the upstream's response head is too large\n",
            ErrorKind::UpstreamTransferCoding => {
                "the upstream's answer has a transfer coding that is not passed on\n"
            }
            ErrorKind::BadResponseBody => "the upstream's response body is malformed or cut\n",
            ErrorKind::UnexpectedUpgrade => {
                "the upstream switched to a protocol the request may not switch to\n"
            }
        }
    }
}

impl From<ErrorKind> for ProxyError {
    fn from(kind: ErrorKind) -> ProxyError {
        ProxyError {
            kind,
            cause: None,
            header: None,
        }
    }
}

impl ProxyError {
    pub fn new(kind: ErrorKind, cause: impl Into<Cause>) -> ProxyError {
        ProxyError {
            kind,
            cause: Some(cause.into()),
            header: None,
        }
    }

    /// Answered with this header too.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> ProxyError {
        self.header = Some((name, value));
        self
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    pub fn reason(&self) -> &'static str {
        self.kind.reason()
    }

    /// The upstream could not be reached: nothing of the request was sent.
    pub fn is_connect_failure(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::ConnectRefused
                | ErrorKind::ConnectTimeout
                | ErrorKind::ConnectFailed
                | ErrorKind::TlsHandshake
                | ErrorKind::DnsFailure
        )
    }

    /// Reading the client's body failed (or it was too large): the
    /// client's fault, never counted
    /// against an upstream nor tried on another.
    pub fn is_client_fault(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::BadRequestBody | ErrorKind::RequestBodyTimeout | ErrorKind::BodyTooLarge
        )
    }

    /// The middleware that refused the request, if one did (as its key
    /// is written: `ip_allow`, `max_body_size`).
    pub fn refused_by(&self) -> Option<&'static str> {
        match self.kind {
            ErrorKind::NotAllowed => Some("ip_allow"),
            ErrorKind::RateLimited => Some("rate_limit"),
            ErrorKind::Unauthorized => Some("basic_auth"),
            ErrorKind::BodyTooLarge => Some("max_body_size"),
            _ => None,
        }
    }

    /// The upstream left its location while being connected to: nothing
    /// was sent, and nothing is held against it.
    pub fn is_upstream_left(&self) -> bool {
        self.kind == ErrorKind::UpstreamLeft
    }

    /// The connection ended after the request was sent and before any
    /// answer: the upstream may have received it.
    pub fn is_lost_before_answer(&self) -> bool {
        self.kind == ErrorKind::ResetBeforeResponse
    }

    /// The cause and its own causes in one line, for the log and the access log.
    pub fn cause_text(&self) -> Option<String> {
        self.cause.as_deref().map(|cause| describe(cause))
    }

    /// The response dockhand answers, its one-line message wrapped by `body`
    /// in the body type of the caller.
    pub fn into_response<B>(self, body: impl FnOnce(Bytes) -> B) -> Response<B> {
        let mut response = Response::new(body(Bytes::from_static(self.kind.message().as_bytes())));
        let status = self.status();
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.insert(ERROR_HEADER, HeaderValue::from_static(self.reason()));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if let Some((name, value)) = self.header {
            headers.insert(name, value);
        }
        response
    }
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.message().trim_end())
    }
}

impl Error for ProxyError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn Error + 'static))
    }
}

/// The first error of type `T` among `error` and its sources.
pub fn find_source<'e, T: Error + 'static>(error: &'e (dyn Error + 'static)) -> Option<&'e T> {
    let mut link = Some(error);
    while let Some(current) = link {
        if let Some(found) = current.downcast_ref::<T>() {
            return Some(found);
        }
        link = current.source();
    }
    None
}

/// `error` and its sources joined by `: `. hyper-util's client error adds
/// only "client error (Connect)" and is left out; a source whose text its
/// error already showed is not repeated.
pub fn describe(error: &(dyn Error + 'static)) -> String {
    let mut text = String::new();
    let mut link = Some(error);
    while let Some(current) = link {
        link = current.source();
        let wrapper = current.is::<hyper_util::client::legacy::Error>() && link.is_some();
        let shown = current.to_string();
        if wrapper || shown.is_empty() || text.contains(&shown) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&shown);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("outer showing its source: {0}")]
    struct Showing(#[source] io::Error);

    #[test]
    fn every_kind_has_its_own_reason_and_a_one_line_body() {
        let mut reasons = std::collections::BTreeSet::new();
        for kind in ErrorKind::ALL {
            reasons.insert(kind.reason());
            let message = kind.message();
            assert!(message.ends_with('\n'), "{kind:?}");
            assert_eq!(message.lines().count(), 1, "{kind:?}");
            assert_eq!(ProxyError::from(kind).to_string(), message.trim_end());
        }
        assert_eq!(reasons.len(), ErrorKind::ALL.len(), "no reason is shared");
        assert!(!reasons.contains(RESET_MID_RESPONSE));
        assert!(!reasons.contains(CLIENT_SEND_TIMEOUT));
    }

    #[test]
    fn every_503_asks_to_retry_after_a_few_seconds() {
        for kind in [
            ErrorKind::NoUpstream,
            ErrorKind::NoHealthyUpstream,
            ErrorKind::UpstreamLeft,
            ErrorKind::DnsNoRecords,
        ] {
            let response = ProxyError::from(kind).into_response(|message| message);
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()[RETRY_AFTER], "5", "{kind:?}");
        }
        let response = ProxyError::from(ErrorKind::ConnectRefused).into_response(|message| message);
        assert!(response.headers().get(RETRY_AFTER).is_none());
    }

    #[test]
    fn the_cause_is_the_source_and_its_chain_is_one_line() {
        let refused = io::Error::new(io::ErrorKind::ConnectionRefused, "refused here");
        let error = ProxyError::new(ErrorKind::ConnectRefused, Outer(refused));
        assert_eq!(error.source().unwrap().to_string(), "outer");
        assert_eq!(error.cause_text().as_deref(), Some("outer: refused here"));
        assert_eq!(ProxyError::from(ErrorKind::NoHost).cause_text(), None);
    }

    #[test]
    fn a_source_is_found_by_its_type() {
        let outer = Outer(io::Error::new(io::ErrorKind::TimedOut, "slow"));
        let found = find_source::<io::Error>(&outer).map(io::Error::kind);
        assert_eq!(found, Some(io::ErrorKind::TimedOut));
        assert!(find_source::<Outer>(&outer).is_some(), "the error itself");
        assert!(find_source::<Showing>(&outer).is_none());
    }

    #[test]
    fn a_source_already_shown_is_not_repeated() {
        let inner = io::Error::other("inner");
        assert_eq!(describe(&Showing(inner)), "outer showing its source: inner");
    }

    #[test]
    fn connect_failures_and_lost_requests_are_told_apart() {
        let connect = [
            ErrorKind::ConnectRefused,
            ErrorKind::ConnectTimeout,
            ErrorKind::ConnectFailed,
            ErrorKind::TlsHandshake,
            ErrorKind::DnsFailure,
        ];
        for kind in connect {
            assert!(ProxyError::from(kind).is_connect_failure(), "{kind:?}");
            assert!(!ProxyError::from(kind).is_lost_before_answer(), "{kind:?}");
        }
        for kind in [
            ErrorKind::DnsNoRecords,
            ErrorKind::NotHttp,
            ErrorKind::UpstreamTimeout,
            ErrorKind::NoUpstream,
        ] {
            assert!(!ProxyError::from(kind).is_connect_failure(), "{kind:?}");
            assert!(!ProxyError::from(kind).is_lost_before_answer(), "{kind:?}");
        }
        let reset = ProxyError::from(ErrorKind::ResetBeforeResponse);
        assert!(reset.is_lost_before_answer() && !reset.is_connect_failure());
    }

    #[test]
    fn only_client_body_failures_are_the_clients_faults() {
        let clients = [
            ErrorKind::BadRequestBody,
            ErrorKind::RequestBodyTimeout,
            ErrorKind::BodyTooLarge,
        ];
        for kind in ErrorKind::ALL {
            let error = ProxyError::from(kind);
            assert_eq!(error.is_client_fault(), clients.contains(&kind), "{kind:?}");
            assert!(!(error.is_client_fault() && error.is_connect_failure()));
        }
        assert_eq!(ErrorKind::BadRequestBody.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            ErrorKind::RequestBodyTimeout.status(),
            StatusCode::REQUEST_TIMEOUT
        );
    }
}
