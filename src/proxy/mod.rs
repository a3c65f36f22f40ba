//! The data path: the client-facing server, forwarding through the pooled
//! upstream client, header rules, and the statuses dockhand answers itself.
//! Routing decisions come from `routes`; this module only carries them out.

mod access_log;
mod attempt;
mod body;
mod client;
mod connection;
mod error;
mod forward;
mod headers;
mod request_body;
pub mod rewrite;
mod server;
pub mod tls;

pub use access_log::TARGET as ACCESS_LOG_TARGET;
pub use client::UpstreamClient;
pub use error::{ProxyError, ERROR_HEADER};
pub use forward::{ProxyState, MAX_HEADER_BYTES};
pub use server::{serve, ServerSettings};
