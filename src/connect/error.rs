//! Why a connection to an upstream could not be opened, or an own HTTP/1.1
//! exchange failed, with the error underneath; the proxy turns each into
//! its status.

use std::io;

use http::Method;

use super::tls::TlsHandshakeError;

/// An error of any kind underneath, as the connect layer passes it on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a connection to an upstream could not be opened. Every variant means
/// nothing of the request was sent.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused")]
    Refused,
    /// `--connect-timeout` ran out during what is named.
    #[error("{0} timed out")]
    TimedOut(&'static str),
    #[error("connect failed")]
    Failed(#[source] io::Error),
    #[error(transparent)]
    Handshake(#[from] TlsHandshakeError),
    /// The SRV owner has no records, or only `.` as its target.
    #[error("the SRV service {0} has no targets")]
    NoTargets(String),
    /// A lookup needed to connect failed: the SRV owner's or a target's, or
    /// that of the DNS server to ask.
    #[error("DNS lookup of {name}")]
    Lookup {
        name: String,
        #[source]
        error: BoxError,
    },
    #[error("upstream URI has no address")]
    NoAddress,
    /// A route table without the address was swapped in while connecting:
    /// its container went away, and the address may already be another's.
    #[error("the address left the routes while connecting to it")]
    Departed,
}

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// Writing the request failed: the connection broke.
    #[error("writing the request: {0}")]
    Write(#[source] io::Error),
    /// The upstream closed the connection before a whole response head.
    #[error("the upstream closed the connection before a response head")]
    Closed,
    /// Reading the answer failed (a reset) before any byte of it came.
    #[error("reading the response head: {0}")]
    Read(#[source] io::Error),
    /// The connection ended (closed or reset) part way through an answer
    /// (a head begun, or an interim `1xx` given): the upstream had the
    /// request, so this is not a kept connection found dead.
    #[error("the upstream's answer ended before a whole response head: {0}")]
    CutAnswer(#[source] io::Error),
    #[error(
        "the response head is larger than {} bytes",
        crate::http1::MAX_HEAD_BYTES
    )]
    HeadTooLarge,
    /// What came back is not an HTTP/1.x response head.
    #[error("invalid HTTP response: {0}")]
    NotHttp(BoxError),
    /// The request body could not be read (the client's fault) or did not
    /// match its length.
    #[error("the request body")]
    Body(#[source] BoxError),
}

impl ExchangeError {
    /// Whether a bodyless request may be sent again on a new connection
    /// after this error on a kept one (which the upstream may have closed
    /// while it was kept): nothing at all came back, and either the request
    /// could not be written or `method` is idempotent (RFC 9110 §9.2.2).
    pub(super) fn allows_resending(&self, method: &Method) -> bool {
        match self {
            ExchangeError::Write(_) => true,
            ExchangeError::Closed | ExchangeError::Read(_) => method.is_idempotent(),
            _ => false,
        }
    }
}
