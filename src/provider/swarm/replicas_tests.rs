//! Services and tasks into replicas: which tasks serve, at which address,
//! under which name, and what a bad `swarm.upstream` says.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;

use super::replicas::{replicas, SwarmFacts};
use super::{ServiceFacts, TaskFacts};
use crate::config::{Origin, Severity};
use crate::labels::{build_hosts, ContainerFacts, Health, ProxyFacts, ServiceRef};

const NETWORK: &str = "edge";

fn service(labels: &[(&str, &str)]) -> ServiceFacts {
    ServiceFacts {
        service: ServiceRef {
            name: "web".into(),
            id: "svc1".into(),
        },
        created: 100,
        labels: labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        virtual_ips: BTreeMap::from([(NETWORK.to_owned(), ip("10.0.1.2"))]),
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn task(id: &str, serving: bool) -> TaskFacts {
    TaskFacts {
        id: id.into(),
        service_id: "svc1".into(),
        serving,
        container_id: Some(format!("c-{id}")),
    }
}

/// The task's container on this engine, at `address` on the shared network.
fn container(task: &str, address: &str) -> (String, ContainerFacts) {
    let id = format!("c-{task}");
    let facts = ContainerFacts {
        id: id.clone(),
        name: format!("web.{task}"),
        running: true,
        networks: BTreeMap::from([(NETWORK.to_owned(), Some(ip(address)))]),
        network_mode: "default".into(),
        exposed_ports: [8080].into(),
        // The container's own labels are not the service's.
        labels: BTreeMap::from([("dockhand.host".into(), "wrong.test".into())]),
        ..ContainerFacts::default()
    };
    (id, facts)
}

struct World {
    services: Vec<ServiceFacts>,
    tasks: Vec<TaskFacts>,
    containers: HashMap<String, ContainerFacts>,
    stopping: HashSet<String>,
}

impl World {
    fn replicas(&self) -> (Vec<ContainerFacts>, Vec<crate::config::Diagnostic>) {
        let facts = SwarmFacts {
            services: &self.services,
            tasks: &self.tasks,
            containers: &self.containers,
            stopping: &self.stopping,
        };
        replicas(&facts, "dockhand")
    }

    /// The addresses `app.test` is served from.
    fn upstreams(&self) -> Vec<String> {
        let (replicas, _) = self.replicas();
        let context = ProxyFacts {
            proxy_networks: vec![NETWORK.into()],
            ..ProxyFacts::default()
        };
        let (hosts, diagnostics) = build_hosts(&replicas, &context);
        assert!(diagnostics.is_empty(), "{diagnostics:?}");
        let [host] = hosts.hosts.as_slice() else {
            panic!("{hosts:?}")
        };
        assert_eq!(host.pattern.to_string(), "app.test");
        let location = &host.locations[0];
        let mut addresses: Vec<String> = location
            .upstreams
            .iter()
            .map(|upstream| upstream.target.to_string())
            .collect();
        addresses.sort();
        addresses
    }
}

fn world(labels: &[(&str, &str)]) -> World {
    World {
        services: vec![service(labels)],
        tasks: vec![task("1", true), task("2", true)],
        containers: [container("1", "10.0.1.5"), container("2", "10.0.1.6")].into(),
        stopping: HashSet::new(),
    }
}

#[test]
fn each_serving_task_is_an_upstream_with_the_services_labels() {
    let world = world(&[("dockhand.host", "app.test")]);
    assert_eq!(world.upstreams(), ["10.0.1.5:8080", "10.0.1.6:8080"]);
    let (replicas, _) = world.replicas();
    assert!(replicas
        .iter()
        .all(|replica| replica.service.as_ref().is_some_and(|s| s.name == "web")));
}

#[test]
fn a_task_being_shut_down_or_stopping_or_unhealthy_is_out() {
    let mut shut_down = world(&[("dockhand.host", "app.test")]);
    shut_down.tasks[0].serving = false;
    assert_eq!(shut_down.upstreams(), ["10.0.1.6:8080"]);

    let mut stopping = world(&[("dockhand.host", "app.test")]);
    stopping.stopping.insert("c-2".into());
    assert_eq!(stopping.upstreams(), ["10.0.1.5:8080"]);

    let mut unhealthy = world(&[("dockhand.host", "app.test")]);
    unhealthy.containers.get_mut("c-1").unwrap().health = Some(Health::Starting);
    assert_eq!(unhealthy.upstreams(), ["10.0.1.6:8080"]);
}

#[test]
fn a_service_with_no_task_keeps_its_host_without_upstreams() {
    let mut world = world(&[("dockhand.host", "app.test")]);
    world.tasks.clear();
    assert!(world.upstreams().is_empty());
}

#[test]
fn dns_is_the_tasks_name_while_a_task_serves() {
    let mut world = world(&[
        ("dockhand.host", "app.test"),
        ("dockhand.swarm.upstream", "dns"),
    ]);
    assert_eq!(world.upstreams(), ["tasks.web:8080"]);
    // Its tasks' addresses here are known, so their change is seen.
    let (replicas, _) = world.replicas();
    assert_eq!(replicas[0].networks[NETWORK], Some(ip("10.0.1.6")));
    for task in &mut world.tasks {
        task.serving = false;
    }
    assert!(world.upstreams().is_empty());
}

#[test]
fn tasks_on_other_nodes_have_the_service_reached_through_its_tasks_name() {
    let mut world = world(&[("dockhand.host", "app.test")]);
    world.containers.remove("c-2");
    assert_eq!(world.upstreams(), ["tasks.web:8080"]);
    // A task elsewhere that is shut down needs no name.
    world.tasks[1].serving = false;
    assert_eq!(world.upstreams(), ["10.0.1.5:8080"]);
}

#[test]
fn vip_is_one_upstream_at_the_virtual_ip_while_a_task_serves() {
    let mut world = world(&[
        ("dockhand.host", "app.test"),
        ("dockhand.swarm.upstream", "vip"),
    ]);
    assert_eq!(world.upstreams(), ["10.0.1.2:8080"]);
    for task in &mut world.tasks {
        task.serving = false;
    }
    assert!(world.upstreams().is_empty());
}

#[test]
fn an_unknown_swarm_upstream_is_an_error_naming_the_service() {
    let world = world(&[
        ("dockhand.host", "app.test"),
        ("dockhand.swarm.upstream", "task"),
    ]);
    let (replicas, diagnostics) = world.replicas();
    assert!(replicas.is_empty(), "not routed: {replicas:?}");
    let [diagnostic] = diagnostics.as_slice() else {
        panic!("{diagnostics:?}")
    };
    assert_eq!(diagnostic.severity, Severity::Error);
    assert_eq!(diagnostic.key, "dockhand.swarm.upstream");
    assert_eq!(diagnostic.value.as_deref(), Some("task"));
    assert_eq!(
        diagnostic.origin,
        Origin::Service {
            name: "web".into(),
            id: "svc1".into()
        }
    );
    assert_eq!(
        diagnostic.to_string(),
        "service \"web\": label dockhand.swarm.upstream: expected `tasks`, `dns` or `vip`; the service is not routed"
    );
}

#[test]
fn label_problems_name_the_service_not_its_tasks() {
    let world = world(&[("dockhand.host", "app.test"), ("dockhand.prot", "80")]);
    let (replicas, _) = world.replicas();
    let (_, diagnostics) = build_hosts(&replicas, &ProxyFacts::default());
    let unknown: Vec<_> = diagnostics
        .iter()
        .filter(|diagnostic| diagnostic.key == "dockhand.prot")
        .collect();
    assert!(!unknown.is_empty(), "{diagnostics:?}");
    assert!(unknown.iter().all(|diagnostic| diagnostic.origin
        == Origin::Service {
            name: "web".into(),
            id: "svc1".into()
        }));
}
