//! Why a connection to an upstream could not be opened, with the error
//! underneath; the proxy turns each into its status.

use std::io;

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
