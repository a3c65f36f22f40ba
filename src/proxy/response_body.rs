//! The upstream's response body as dockhand reads it (hyper's, or the own
//! HTTP/1.1 exchange's), cut
//! when the upstream leaves it waiting for `--upstream-timeout` between two
//! frames. Without the limit, a body that stalls after its head would hold
//! the client, and the upstream connection, for as long as the upstream
//! likes. Its errors are causes for the access log: the head is sent, so
//! they end the client's connection rather than become a status.

use std::time::Duration;

use crate::connect::UpstreamIncoming;

use super::error::Cause;
use super::stall::{StallErrors, StallLimited};

pub type UpstreamStream = StallLimited<UpstreamIncoming, Cause>;

#[derive(Debug, thiserror::Error)]
#[error("no response body bytes for {0:?} (--upstream-timeout)")]
struct ResponseStalled(Duration);

impl StallErrors for Cause {
    fn broken(error: Cause) -> Self {
        error
    }

    fn stalled(limit: Duration) -> Self {
        ResponseStalled(limit).into()
    }
}
