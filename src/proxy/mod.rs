//! The data path: the client-facing server (hyper's, and dockhand's own for
//! HTTP/1.1 clients in `http1_server`, with the send timeout that cuts
//! clients that stop reading, and the TLS handshake of HTTPS clients),
//! forwarding (tries, retries,
//! following moved upstreams), the request's host, protocol switches,
//! header rules, rewrites, the statuses dockhand
//! answers itself, what it answers instead of forwarding (`local_answer`),
//! a host's redirect to HTTPS and its HSTS (`to_https`), and the access log.
//! Routing decisions come from `routes`, connections from `connect`; this
//! module carries requests between them.

mod access_log;
mod answer;
mod attempt;
mod body;
mod client_body;
mod client_identity;
mod error;
mod forward;
mod forward_auth;
mod framing;
mod head_wait;
mod headers;
mod host;
mod http1_server;
mod idle;
mod kept_timer;
mod local_answer;
mod request_body;
mod response_body;
pub mod rewrite;
mod send_timeout;
mod server;
mod stall;
mod tls_handshake;
mod to_https;
mod upgrade;

pub use access_log::TARGET as ACCESS_LOG_TARGET;
pub use client_identity::Scheme;
pub use error::{ErrorKind, ProxyError, ERROR_HEADER, RETRY_AFTER_SECS};
pub use forward::{ProxyState, MAX_HEADER_BYTES};
pub use server::{serve, ServerSettings, Transport};
pub use tls_handshake::TlsTermination;
