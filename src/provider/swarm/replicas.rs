//! Services and their tasks into the replicas the label pipeline reads, so
//! services get the same keys, checks and diagnostics as containers. How
//! a service is reached is its `<prefix>.swarm.upstream` label:
//!
//! - `tasks` (the default): one replica per task, at its container's
//!   address on the network it shares with dockhand, with that container's
//!   health and exposed ports. A task is served while Docker runs it and
//!   means to keep it running, and its container is not stopping. Tasks on
//!   other nodes have no container here to read an address from: while the
//!   service has any, it is reached as with `dns`.
//! - `dns`: one replica for the service, reached through the name
//!   `tasks.<service>` (Docker's DNS answers every task's address), which
//!   the resolver asks again every few seconds and whenever the tasks here
//!   change.
//! - `vip`: one replica for the service, at its virtual IP (Docker
//!   balances), serving while any of its tasks is.
//!
//! Pure: the provider gathers the facts, this decides.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::api::{ServiceFacts, TaskFacts};
use crate::config::{Diagnostic, Origin, Severity};
use crate::labels::{ContainerFacts, SWARM_UPSTREAM_KEY};

/// How requests reach a service's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    Tasks,
    Name,
    VirtualIp,
}

/// What the provider knows at one moment.
pub struct SwarmFacts<'a> {
    pub services: &'a [ServiceFacts],
    pub tasks: &'a [TaskFacts],
    /// Task containers on this engine, inspected, by container id.
    pub containers: &'a HashMap<String, ContainerFacts>,
    /// Containers told to stop whose stop is not over yet.
    pub stopping: &'a HashSet<String>,
}

/// Every service's replicas, and the problems of their `swarm.upstream`
/// label (the pipeline reports the rest).
pub fn replicas(facts: &SwarmFacts<'_>, prefix: &str) -> (Vec<ContainerFacts>, Vec<Diagnostic>) {
    let upstream_label = format!("{prefix}.{SWARM_UPSTREAM_KEY}");
    let mut replicas = Vec::new();
    let mut diagnostics = Vec::new();
    for service in facts.services {
        let labels = &service.labels;
        let reached = match labels.get(&upstream_label).map(|value| value.trim()) {
            None | Some("tasks") => Reached::Tasks,
            Some("dns") => Reached::Name,
            Some("vip") => Reached::VirtualIp,
            Some(other) => {
                diagnostics.push(Diagnostic {
                    origin: Origin::Service {
                        name: service.service.name.clone(),
                        id: service.service.id.clone(),
                    },
                    key: upstream_label.clone(),
                    severity: Severity::Error,
                    reason: "expected `tasks`, `dns` or `vip`; the service is not routed"
                        .to_owned(),
                    value: Some(other.to_owned()),
                    suggestion: None,
                });
                continue;
            }
        };
        let tasks: Vec<&TaskFacts> = facts
            .tasks
            .iter()
            .filter(|task| task.service_id == service.service.id)
            .collect();
        let all_here = tasks
            .iter()
            .all(|task| !task.serving || task_container(task, facts).is_some());
        let service_replicas = match reached {
            Reached::Tasks if all_here => task_replicas(service, labels, &tasks, facts),
            Reached::Tasks | Reached::Name => {
                vec![named_replica(service, labels, &tasks, facts)]
            }
            Reached::VirtualIp => vec![virtual_ip_replica(service, labels, &tasks, facts)],
        };
        replicas.extend(service_replicas);
    }
    (replicas, diagnostics)
}

/// The task's container as it is, with the service's labels and name; a
/// service none of whose tasks has a container here still has its hosts
/// (answering `503`) through one replica that does not serve.
fn task_replicas(
    service: &ServiceFacts,
    labels: &BTreeMap<String, String>,
    tasks: &[&TaskFacts],
    facts: &SwarmFacts<'_>,
) -> Vec<ContainerFacts> {
    let replicas: Vec<ContainerFacts> = tasks
        .iter()
        .filter_map(|task| {
            let container = task_container(task, facts)?;
            Some(ContainerFacts {
                running: container.running
                    && task.serving
                    && !facts.stopping.contains(&container.id),
                labels: labels.clone(),
                created: service.created,
                compose_project: labels
                    .get(STACK_NAMESPACE_LABEL)
                    .or(container.compose_project.as_ref())
                    .cloned(),
                service: Some(service.service.clone()),
                ..container.clone()
            })
        })
        .collect();
    match replicas.is_empty() {
        true => vec![not_serving(service, labels)],
        false => replicas,
    }
}

/// The task's container, when it runs on this engine.
fn task_container<'f>(task: &TaskFacts, facts: &SwarmFacts<'f>) -> Option<&'f ContainerFacts> {
    facts.containers.get(task.container_id.as_ref()?)
}

/// The service at its virtual IPs.
fn virtual_ip_replica(
    service: &ServiceFacts,
    labels: &BTreeMap<String, String>,
    tasks: &[&TaskFacts],
    facts: &SwarmFacts<'_>,
) -> ContainerFacts {
    ContainerFacts {
        networks: service
            .virtual_ips
            .iter()
            .map(|(network, address)| (network.clone(), Some(*address)))
            .collect(),
        ..whole_service(service, labels, tasks, facts)
    }
}

/// The service through its `tasks.<service>` name, with the networks of
/// its task containers here: their addresses changing (a task replaced)
/// has the name asked again at once.
fn named_replica(
    service: &ServiceFacts,
    labels: &BTreeMap<String, String>,
    tasks: &[&TaskFacts],
    facts: &SwarmFacts<'_>,
) -> ContainerFacts {
    let containers = tasks.iter().filter_map(|task| task_container(task, facts));
    ContainerFacts {
        networks: containers
            .flat_map(|container| container.networks.clone())
            .collect(),
        reached_by_name: Some(format!("tasks.{}", service.service.name)),
        ..whole_service(service, labels, tasks, facts)
    }
}

/// One replica for the whole service, serving while any task does, with
/// the ports its task containers here expose (a service has none of its own).
fn whole_service(
    service: &ServiceFacts,
    labels: &BTreeMap<String, String>,
    tasks: &[&TaskFacts],
    facts: &SwarmFacts<'_>,
) -> ContainerFacts {
    ContainerFacts {
        running: tasks.iter().any(|task| task.serving),
        exposed_ports: tasks
            .iter()
            .filter_map(|task| task_container(task, facts))
            .flat_map(|container| container.exposed_ports.iter().copied())
            .collect(),
        ..not_serving(service, labels)
    }
}

fn not_serving(service: &ServiceFacts, labels: &BTreeMap<String, String>) -> ContainerFacts {
    ContainerFacts {
        id: service.service.id.clone(),
        name: service.service.name.clone(),
        created: service.created,
        labels: labels.clone(),
        running: false,
        network_mode: "default".to_owned(),
        compose_project: labels.get(STACK_NAMESPACE_LABEL).cloned(),
        service: Some(service.service.clone()),
        ..ContainerFacts::default()
    }
}

/// The stack a service was deployed in; its networks are named
/// `<stack>_<network>`, as compose names its project's.
const STACK_NAMESPACE_LABEL: &str = "com.docker.stack.namespace";
