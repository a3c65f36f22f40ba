//! One access-log event per request, written when its response body ends (so
//! it carries the bytes sent and the whole duration), at target `dockhand::access`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{HeaderValue, Method, StatusCode, Uri};

use crate::upstream::Endpoint;

pub const TARGET: &str = "dockhand::access";

pub struct AccessRecord {
    pub started: Instant,
    pub client: SocketAddr,
    pub method: Method,
    /// The `Host` (or `:authority`) as the client sent it.
    pub host: Option<HeaderValue>,
    /// The URI as the client sent it: the log shows its path, before any rewrite.
    pub uri: Uri,
    pub status: StatusCode,
    /// The last upstream the request was sent to.
    pub upstream: Option<Arc<Endpoint>>,
    pub error: Option<&'static str>,
}

impl AccessRecord {
    pub fn write(&self, bytes_out: u64) {
        let host = self
            .host
            .as_ref()
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let upstream = self.upstream.as_ref().map(|endpoint| endpoint.to_string());
        tracing::info!(
            target: TARGET,
            client = %self.client,
            method = %self.method,
            host,
            path = self.uri.path(),
            status = self.status.as_u16(),
            upstream = upstream.as_deref().unwrap_or(""),
            bytes_out,
            duration_ms = self.started.elapsed().as_secs_f64() * 1000.0,
            error = self.error.unwrap_or(""),
            "request"
        );
    }
}
