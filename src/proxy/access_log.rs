//! One access-log event per request, written when its response body ends (so
//! it carries the bytes sent and the whole duration), at target
//! `dockhand::access`, with where it went (location prefix, upstream, tries,
//! the last try's time to its response head) and dockhand's error reason and
//! cause; and the WARN for each failed try and for a body cut
//! after its head went out, logged once each with where the request went
//! and why it failed (a client body that failed is logged as the client's,
//! at INFO).

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::time::Instant;

use http::{HeaderValue, Method, StatusCode, Uri};

use super::error::{describe, ProxyError, CLIENT_SEND_TIMEOUT, RESET_MID_RESPONSE};
use super::send_timeout::ClientCut;
use crate::metrics::LocationCounters;
use crate::upstream::Endpoint;

pub const TARGET: &str = "dockhand::access";

/// Where the WARNs about failed tries go: the proxy's, not the access log's.
const FAILURE_TARGET: &str = "dockhand::proxy";

pub struct AccessRecord {
    /// When the request came (tokio's clock: its deadlines are reckoned from it).
    pub started: Instant,
    pub client: SocketAddr,
    /// Set if the client's connection is cut for not reading.
    pub client_cut: Arc<ClientCut>,
    pub method: Method,
    /// The `Host` (or `:authority`) as the client sent it.
    pub host: Option<HeaderValue>,
    /// The URI as the client sent it: the log shows its path, before any rewrite.
    pub uri: Uri,
    pub status: StatusCode,
    /// The matched location's prefix, once the request is routed to one.
    pub location: Option<Arc<str>>,
    /// The last upstream the request was sent to.
    pub upstream: Option<Arc<Endpoint>>,
    /// Tries made so far (1 for the first).
    pub attempt: u32,
    /// From sending the last try (connecting included, when it needed a new
    /// connection) to its response head; `None` when it got none.
    pub upstream_ms: Option<f64>,
    /// The reason of dockhand's own status, or of a body cut mid-response.
    pub error: Option<&'static str>,
    /// What failed underneath `error`, when something did.
    pub cause: Option<String>,
    /// The metric series the request counts in: its location's once it is
    /// routed to one. `answer` puts `unmatched`'s in for a request routed
    /// nowhere when the record goes with the response (only then: a count
    /// on memory every worker writes).
    pub counters: Option<Arc<LocationCounters>>,
}

impl AccessRecord {
    fn host_text(&self) -> &str {
        self.host
            .as_ref()
            .and_then(|h| h.to_str().ok())
            .unwrap_or("")
    }

    fn upstream_text(&self) -> String {
        self.upstream
            .as_ref()
            .map_or_else(String::new, |endpoint| endpoint.to_string())
    }

    pub fn write(&self, bytes_out: u64) {
        // Written when the response ends: if it ended because the client
        // was cut, that is why (its status was sent before).
        let cut_cause;
        let (error, cause) = match self.error {
            None if self.client_cut.is_cut() => {
                cut_cause = self.client_cut.cause();
                (CLIENT_SEND_TIMEOUT, cut_cause.as_str())
            }
            error => (error.unwrap_or(""), self.cause.as_deref().unwrap_or("")),
        };
        tracing::info!(
            target: TARGET,
            client = %self.client,
            method = %self.method,
            host = self.host_text(),
            path = self.uri.path(),
            status = self.status.as_u16(),
            location = self.location.as_deref().unwrap_or(""),
            upstream = self.upstream_text(),
            attempt = self.attempt,
            upstream_ms = self.upstream_ms,
            bytes_out,
            duration_ms = self.started.elapsed().as_secs_f64() * 1000.0,
            error,
            cause,
            "request"
        );
    }

    /// The series the request counts in so far: its location's, or `unmatched`.
    pub fn counters_or<'a>(
        &'a self,
        unmatched: &'a Arc<LocationCounters>,
    ) -> &'a Arc<LocationCounters> {
        self.counters.as_ref().unwrap_or(unmatched)
    }

    /// The current try (to `self.upstream`, in `self.location`) failed: a WARN
    /// when the upstream failed, an INFO naming the client when its body
    /// could not be read (the upstream is then only where it was going).
    pub fn log_failed_try(&self, error: &ProxyError) {
        let cause = error.cause_text();
        macro_rules! failure {
            ($level:ident, $message:literal) => {
                tracing::$level!(
                    target: FAILURE_TARGET,
                    host = self.host_text(),
                    location = self.location.as_deref().unwrap_or(""),
                    upstream = self.upstream_text(),
                    attempt = self.attempt,
                    error = error.reason(),
                    cause = cause.as_deref().unwrap_or(""),
                    $message
                )
            };
        }
        if error.is_client_fault() {
            failure!(info, "client request body failed");
        } else {
            failure!(warn, "upstream try failed");
        }
    }

    /// The upstream's body failed, or stalled, after its head was sent to the client.
    pub fn body_cut(&mut self, error: &(dyn std::error::Error + 'static)) {
        let cause = describe(error);
        tracing::warn!(
            target: FAILURE_TARGET,
            host = self.host_text(),
            location = self.location.as_deref().unwrap_or(""),
            upstream = self.upstream_text(),
            attempt = self.attempt,
            error = RESET_MID_RESPONSE,
            cause,
            "upstream body cut after the response head"
        );
        self.error = Some(RESET_MID_RESPONSE);
        self.cause = Some(cause);
    }
}
