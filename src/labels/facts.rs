//! What the labels pipeline reads: the facts the Docker provider gathers about
//! each container (from `docker inspect`) and about dockhand itself. Plain data,
//! so the pipeline can be fed by tests as easily as by the Docker client.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// One container as dockhand sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerFacts {
    pub id: String,
    /// Without Docker's leading `/`.
    pub name: String,
    /// Unix seconds. The oldest replica's location settings win; ties go to the smaller id.
    pub created: i64,
    pub labels: BTreeMap<String, String>,
    /// Running and not paused.
    pub running: bool,
    /// `None`: the image has no HEALTHCHECK.
    pub health: Option<Health>,
    /// Network name to the container's address on it (IPv4 preferred); `None`
    /// when Docker reports no address there.
    pub networks: BTreeMap<String, Option<IpAddr>>,
    /// `HostConfig.NetworkMode`: `host`, `bridge`, `default`, a network name or `container:<id>`.
    pub network_mode: String,
    /// TCP ports from `Config.ExposedPorts`.
    pub exposed_ports: BTreeSet<u16>,
    /// The `com.docker.compose.project` label (or a stack's namespace), for
    /// short network names.
    pub compose_project: Option<String>,
    /// Set for a Swarm task: the service whose labels these are, which its
    /// diagnostics name (every task of it has the same).
    pub service: Option<ServiceRef>,
    /// Reached through this DNS name (a Swarm service's `tasks.<service>`)
    /// rather than an address of its own: each address the name has is an
    /// upstream, followed by the resolver.
    pub reached_by_name: Option<String>,
}

/// A Swarm service, by name and id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceRef {
    pub name: String,
    pub id: String,
}

impl ContainerFacts {
    /// Whether the container takes requests now: running, and healthy if it has a check.
    pub fn takes_requests(&self) -> bool {
        self.running && matches!(self.health, None | Some(Health::Healthy))
    }

    pub fn uses_host_network(&self) -> bool {
        self.network_mode == "host"
    }

    /// The container whose network stack this one joins (`container:<id>` mode).
    pub fn joined_container(&self) -> Option<&str> {
        self.network_mode.strip_prefix("container:")
    }
}

/// Docker's health status of a container with a HEALTHCHECK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Starting,
    Healthy,
    Unhealthy,
}

/// What the pipeline needs to know about dockhand itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyFacts {
    /// `--label-prefix`: labels are `<prefix>.host`, `<prefix>.port`...
    pub label_prefix: String,
    /// The networks dockhand is on, in preference order (`--network` order,
    /// else by name); empty when dockhand runs outside a container.
    pub proxy_networks: Vec<String>,
    /// dockhand runs with the host's network stack (network mode `host`, or
    /// outside any container), so it reaches host-network containers on loopback.
    pub proxy_on_host_network: bool,
}

impl Default for ProxyFacts {
    fn default() -> Self {
        ProxyFacts {
            label_prefix: "dockhand".to_owned(),
            proxy_networks: Vec::new(),
            proxy_on_host_network: false,
        }
    }
}
