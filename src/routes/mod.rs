//! From desired hosts to the live `RouteTable`: building it, matching a request's
//! host and path against it, and swapping it atomically. It owns no I/O: sources
//! hand it desired hosts, the proxy reads the current table.

mod host_match;
mod table;

pub use host_match::{normalize_host, MAX_HOST_LEN};
pub use table::{unapplied_settings, Location, RouteMiss, RouteTable};

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::DesiredHosts;

/// Holds the current route table; readers never block and never see a half-built one.
#[derive(Default)]
pub struct Router {
    current: ArcSwap<RouteTable>,
}

impl Router {
    /// The table requests are routed with right now.
    pub fn current(&self) -> arc_swap::Guard<Arc<RouteTable>> {
        self.current.load()
    }

    /// Builds a table from `desired` and makes it current. Requests already
    /// routed keep the table they started with.
    pub fn publish(&self, desired: &DesiredHosts) {
        self.current.store(Arc::new(RouteTable::build(desired)));
    }
}
