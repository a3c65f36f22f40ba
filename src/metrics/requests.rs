//! What each request counts when it ends: by host, location and status,
//! its duration and its bytes. A location's handles are made once per route
//! table (`LocationCounters`, kept by the table's location), and so are those
//! of the first few statuses it answers, so a request usually looks nothing
//! up (its status's series would be a lock and a hash of its labels);
//! requests that matched no location count under `unmatched`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::{HostLabels, RequestLabels};

/// How many statuses of a location keep their series at hand.
const STATUSES_AT_HAND: usize = 4;

/// One location's series, resolved once.
pub struct LocationCounters {
    host: Arc<str>,
    location: Arc<str>,
    requests: Family<RequestLabels, Counter>,
    /// The series of the first statuses answered, each with its status
    /// (the family never drops a series, so a handle stays the one it
    /// shows).
    statuses: [OnceLock<(u16, Counter)>; STATUSES_AT_HAND],
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
            statuses: Default::default(),
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
        self.count_status(status);
        self.duration.observe(duration.as_secs_f64());
        self.bytes_out.inc_by(bytes_out);
    }

    fn count_status(&self, status: u16) {
        let labels = || RequestLabels {
            host: self.host.clone(),
            location: self.location.clone(),
            code: status,
        };
        for slot in &self.statuses {
            match slot.get() {
                Some((code, counter)) if *code == status => {
                    counter.inc();
                    return;
                }
                Some(_) => continue,
                None => {
                    let counter = self.requests.get_or_create_owned(&labels());
                    counter.inc();
                    // Another status may have taken the slot meanwhile: this
                    // one is counted, and takes the next slot next time.
                    let _ = slot.set((status, counter));
                    return;
                }
            }
        }
        self.requests.get_or_create(&labels()).inc();
    }

    /// The host pattern its requests count under.
    pub fn host(&self) -> &Arc<str> {
        &self.host
    }

    /// Where the request body bytes read from clients are counted.
    pub fn bytes_in(&self) -> &Counter {
        &self.bytes_in
    }
}
