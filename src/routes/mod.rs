//! From desired hosts to the live `RouteTable`: merging what each source
//! (the routes file, Docker) wants, building the table, matching a request's
//! host and path against it, and swapping it atomically. It owns no I/O:
//! sources hand it desired hosts, the proxy reads the current table.

mod host_match;
mod table;

pub use host_match::{normalize_host, MAX_HOST_LEN};
pub use table::{unapplied_settings, Location, RouteMiss, RouteTable};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::config::DesiredHosts;

/// Where desired hosts come from. A host both sources define is served as the
/// earlier one (the file) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    File,
    Docker,
}

/// Holds the current route table; readers never block and never see a half-built one.
pub struct Router {
    current: ArcSwap<RouteTable>,
    desired: Mutex<BTreeMap<Source, DesiredHosts>>,
    /// Bumped on every swap, so waiting requests can look again.
    changes: watch::Sender<u64>,
}

impl Default for Router {
    fn default() -> Router {
        Router {
            current: ArcSwap::default(),
            desired: Mutex::default(),
            changes: watch::Sender::new(0),
        }
    }
}

impl Router {
    /// The table requests are routed with right now.
    pub fn current(&self) -> arc_swap::Guard<Arc<RouteTable>> {
        self.current.load()
    }

    /// Replaces what `source` wants and swaps in a new table, unless nothing
    /// changed. Requests already routed keep the table they started with.
    /// Returns whether the table was swapped.
    pub fn publish(&self, source: Source, desired: DesiredHosts) -> bool {
        let mut all = self
            .desired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if all.get(&source) == Some(&desired) {
            return false;
        }
        all.insert(source, desired);
        let table = RouteTable::build_merged(&all);
        self.current.store(Arc::new(table));
        self.changes.send_modify(|version| *version += 1);
        true
    }

    /// Notified after every swap.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;

    fn hosts(json: &str) -> DesiredHosts {
        parse_routes_file(json).unwrap()
    }

    #[test]
    fn the_file_wins_a_host_both_sources_define() {
        let router = Router::default();
        let file =
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#);
        let docker = hosts(
            r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.2:80": {}}}}},
                         "b.com": {"location": {"/": {"upstream": {"10.0.0.3:80": {}}}}}}}"#,
        );
        assert!(router.publish(Source::File, file));
        assert!(router.publish(Source::Docker, docker.clone()));
        let table = router.current();
        let pick = |host| {
            table
                .find(host, "/")
                .unwrap()
                .upstreams
                .pick()
                .unwrap()
                .address
                .to_string()
        };
        assert_eq!(pick("a.com"), "10.0.0.1:80");
        assert_eq!(pick("b.com"), "10.0.0.3:80");
        assert!(!table.find("a.com", "/").unwrap().follows_containers);
        assert!(table.find("b.com", "/").unwrap().follows_containers);
        drop(table);
        assert!(
            !router.publish(Source::Docker, docker),
            "unchanged: no swap"
        );
    }

    #[tokio::test]
    async fn subscribers_hear_of_each_swap() {
        let router = Router::default();
        let mut changes = router.subscribe();
        router.publish(Source::File, hosts(r#"{"host": {}}"#));
        changes.changed().await.unwrap();
        assert_eq!(*changes.borrow_and_update(), 1);
    }
}
