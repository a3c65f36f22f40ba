//! Fuzz input for the labels target, as text an example can be written in:
//! one `key=value` label a line, a `---` line between containers. Every
//! container runs, is on the network `edge` and exposes port 80, so what
//! varies is only its labels.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use dockhand::config::middleware::MIDDLEWARE_KEYS;
use dockhand::labels::{ContainerFacts, ProxyFacts, ROUTE_KEYS};

/// More containers find nothing new: conflicts are between two.
const MAX_CONTAINERS: usize = 4;

pub const NETWORK: &str = "edge";

/// The containers `text` describes, named `c0`, `c1`...
pub fn containers(text: &str) -> Vec<ContainerFacts> {
    text.split("\n---\n")
        .take(MAX_CONTAINERS)
        .enumerate()
        .map(|(index, labels)| container(index, labels))
        .collect()
}

fn container(index: usize, labels: &str) -> ContainerFacts {
    let labels: BTreeMap<String, String> = labels
        .lines()
        .map(|line| match line.split_once('=') {
            Some((key, value)) => (key.to_owned(), value.to_owned()),
            None => (line.to_owned(), String::new()),
        })
        .collect();
    let address = IpAddr::V4(Ipv4Addr::new(172, 20, 0, 10 + index as u8));
    ContainerFacts {
        id: format!("id{index}"),
        name: format!("c{index}"),
        created: index as i64,
        labels,
        running: true,
        health: None,
        networks: BTreeMap::from([(NETWORK.to_owned(), Some(address))]),
        network_mode: "default".to_owned(),
        exposed_ports: BTreeSet::from([80]),
        compose_project: None,
        service: None,
        reached_by_name: None,
    }
}

/// dockhand in a container on `edge`, with the default label prefix.
pub fn proxy() -> ProxyFacts {
    ProxyFacts {
        proxy_networks: vec![NETWORK.to_owned()],
        ..ProxyFacts::default()
    }
}

/// The labels a diagnostic can be about on a container with `labels`: one
/// written there; the common start of a group of them (`dockhand.rewrite`
/// for `dockhand.rewrite.match` and `.replace`); or a key of a route that has
/// labels there (or a group of such keys, `rewrite`), though not written: the
/// one that fixes the problem (`host`, which every route needs; `network` or
/// `port` when the container can't be reached; a setting whose default
/// differs from another replica's setting).
pub fn is_real_label(labels: &BTreeMap<String, String>, key: &str) -> bool {
    if labels.contains_key(key) {
        return true;
    }
    let group = format!("{key}.");
    if labels.keys().any(|label| label.starts_with(&group)) {
        return true;
    }
    let groups = ROUTE_KEYS
        .iter()
        .chain(MIDDLEWARE_KEYS)
        .flat_map(|route_key| {
            let ends = route_key.match_indices('.').map(|(end, _)| end);
            ends.chain([route_key.len()]).map(|end| &route_key[..end])
        });
    groups.into_iter().any(|route_key| {
        key.strip_suffix(route_key)
            .filter(|route_start| route_start.ends_with('.'))
            .is_some_and(|route_start| labels.keys().any(|label| label.starts_with(route_start)))
    })
}
