//! From desired hosts to the live `RouteTable`: merging what each source
//! (the routes file, Docker) wants with the current addresses of the names
//! they use, building the table, matching a request's host and path against
//! it, and swapping it atomically. It owns no I/O: sources hand it desired
//! hosts, the resolver hands it addresses (and learns from it which names to
//! watch), the proxy reads the current table.

mod host_match;
mod table;

pub use host_match::{normalize_host, MAX_HOST_LEN};
pub use table::{Location, RouteMiss, RouteTable};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::config::{DesiredHosts, UpstreamTarget};
use crate::resolve::{AddressSink, ResolvedNames};
use crate::upstream::{BuildContext, EndpointRegistry};

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
    inputs: Mutex<Inputs>,
    registry: Arc<EndpointRegistry>,
    /// Bumped on every swap, so waiting requests can look again.
    changes: watch::Sender<u64>,
    /// The names the desired hosts use, for the resolver to watch.
    names: watch::Sender<Arc<BTreeSet<String>>>,
}

/// Everything a table is built from.
#[derive(Default)]
struct Inputs {
    desired: BTreeMap<Source, DesiredHosts>,
    resolved: ResolvedNames,
}

impl Router {
    pub fn new(registry: Arc<EndpointRegistry>) -> Router {
        Router {
            current: ArcSwap::default(),
            inputs: Mutex::default(),
            registry,
            changes: watch::Sender::new(0),
            names: watch::Sender::new(Arc::default()),
        }
    }

    /// The table requests are routed with right now.
    pub fn current(&self) -> arc_swap::Guard<Arc<RouteTable>> {
        self.current.load()
    }

    /// Replaces what `source` wants and swaps in a new table, unless nothing
    /// changed. Requests already routed keep the table they started with.
    /// Returns whether the table was swapped.
    pub fn publish(&self, source: Source, desired: DesiredHosts) -> bool {
        let mut inputs = self.lock_inputs();
        if inputs.desired.get(&source) == Some(&desired) {
            return false;
        }
        inputs.desired.insert(source, desired);
        let names = names_used(&inputs.desired);
        self.names.send_if_modified(|watched| {
            let changed = **watched != names;
            if changed {
                *watched = Arc::new(names);
            }
            changed
        });
        self.swap(&inputs);
        true
    }

    /// Takes the names' current addresses, and swaps in a new table if any
    /// name the table uses has new ones.
    pub fn set_resolved(&self, resolved: ResolvedNames) -> bool {
        let mut inputs = self.lock_inputs();
        if inputs.resolved == resolved {
            return false;
        }
        inputs.resolved = resolved;
        self.swap(&inputs);
        true
    }

    fn swap(&self, inputs: &Inputs) {
        let context = BuildContext {
            resolved: &inputs.resolved,
            registry: &self.registry,
        };
        let table = RouteTable::build(&inputs.desired, &context);
        // The old table's endpoints go with it, unless the new one kept them.
        drop(self.current.swap(Arc::new(table)));
        self.registry.sweep();
        self.changes.send_modify(|version| *version += 1);
    }

    fn lock_inputs(&self) -> std::sync::MutexGuard<'_, Inputs> {
        crate::sync::lock(&self.inputs)
    }

    /// Notified after every swap.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The set of names the desired hosts use, kept current.
    pub fn watch_names(&self) -> watch::Receiver<Arc<BTreeSet<String>>> {
        self.names.subscribe()
    }
}

/// The resolver hands the names' addresses straight to the table.
impl AddressSink for Router {
    fn addresses_changed(&self, resolved: ResolvedNames) {
        self.set_resolved(resolved);
    }
}

#[cfg(test)]
impl Default for Router {
    fn default() -> Router {
        Router::new(Arc::new(EndpointRegistry::always_reachable()))
    }
}

/// Every name an upstream of `desired` is written with.
fn names_used(desired: &BTreeMap<Source, DesiredHosts>) -> BTreeSet<String> {
    desired
        .values()
        .flat_map(|hosts| &hosts.hosts)
        .flat_map(|host| &host.locations)
        .flat_map(|location| &location.upstreams)
        .filter_map(|upstream| match &upstream.target {
            UpstreamTarget::Name { host, .. } => Some(host.clone()),
            UpstreamTarget::Address(_) | UpstreamTarget::Srv { .. } => None,
        })
        .collect()
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
                .pick(&[])
                .unwrap()
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

    #[test]
    fn names_are_watched_and_their_addresses_used() {
        let router = Router::default();
        let names = router.watch_names();
        router.publish(
            Source::File,
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"app:8080": {}, "10.0.0.1:80": {}}}}}}}"#),
        );
        assert_eq!(**names.borrow(), BTreeSet::from(["app".to_owned()]));
        let endpoints = |router: &Router| -> Vec<String> {
            let table = router.current();
            let location = table.find("a.com", "/").unwrap();
            location
                .upstreams
                .endpoints()
                .iter()
                .map(|e| e.to_string())
                .collect()
        };
        assert_eq!(endpoints(&router), ["10.0.0.1:80"]);
        let resolved: ResolvedNames = Arc::new(
            [(
                "app".to_owned(),
                Arc::from(vec!["10.2.0.7".parse().unwrap()]),
            )]
            .into(),
        );
        assert!(router.set_resolved(resolved.clone()));
        assert_eq!(endpoints(&router), ["10.2.0.7:8080", "10.0.0.1:80"]);
        assert!(!router.set_resolved(resolved), "same addresses: no swap");
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
