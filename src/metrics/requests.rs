//! What each request counts when it ends: by host, location and status,
//! its duration and its bytes. A location's handles are made once per route
//! table (`LocationCounters`, kept by the table's location), so a request
//! only looks up its status's series; requests that matched no location
//! count under `unmatched`.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{HostLabels, RequestLabels};

/// One location's series, resolved once.
pub struct LocationCounters {
    host: Arc<str>,
    location: Arc<str>,
    requests: Family<RequestLabels, Counter>,
    duration: Histogram,
    bytes_in: Counter,
    bytes_out: Counter,
}

/// The families a location's handles are taken from.
pub(super) struct RequestFamilies {
    pub(super) requests: Family<RequestLabels, Counter>,
    pub(super) duration: Family<HostLabels, Histogram>,
    pub(super) bytes_in: Family<HostLabels, Counter>,
    pub(super) bytes_out: Family<HostLabels, Counter>,
}

impl RequestFamilies {
    pub(super) fn location(&self, host: Arc<str>, location: Arc<str>) -> LocationCounters {
        let by_host = HostLabels { host: host.clone() };
        LocationCounters {
            requests: self.requests.clone(),
            duration: self.duration.get_or_create_owned(&by_host),
            bytes_in: self.bytes_in.get_or_create_owned(&by_host),
            bytes_out: self.bytes_out.get_or_create_owned(&by_host),
            host,
            location,
        }
    }
}

impl LocationCounters {
    /// A request that ended with `status` after `duration`, having sent
    /// `bytes_out` of response body.
    pub fn count(&self, status: u16, duration: Duration, bytes_out: u64) {
        let labels = RequestLabels {
            host: self.host.clone(),
            location: self.location.clone(),
            code: status,
        };
        self.requests.get_or_create(&labels).inc();
        self.duration.observe(duration.as_secs_f64());
        self.bytes_out.inc_by(bytes_out);
    }

    /// Where the request body bytes read from clients are counted.
    /// The host pattern its requests count under.
    pub fn host(&self) -> &Arc<str> {
        &self.host
    }

    pub fn bytes_in(&self) -> &Counter {
        &self.bytes_in
    }
}
