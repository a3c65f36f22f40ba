//! How long one changed container takes to reach the live route table when
//! 1,000 containers are routed: the labels of every container turned into
//! desired hosts again (`labels::build_hosts`, as the Docker provider does on
//! each change), then the new table built and swapped in (`Router::publish`).
//! Each iteration moves one container to a new address, so every publish
//! really swaps. `build_hosts` is also measured alone, to show the split.
//!
//! `cargo bench --bench route_table`.

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

use dockhand::config::{Desired, DesiredHosts, ProviderId};
use dockhand::labels::{build_hosts, ContainerFacts, ProxyFacts};
use dockhand::routes::Router;
use dockhand::upstream::EndpointRegistry;

const CONTAINERS: usize = 1_000;
const NETWORK: &str = "bench";

/// Loopback addresses, so the health checks the router starts never leave the machine.
fn address(container: usize, generation: usize) -> IpAddr {
    let [_, _, high, low] = u32::try_from(container * 2 + generation % 2 + 1)
        .expect("a small container count")
        .to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(127, 1, high, low))
}

fn container(index: usize) -> ContainerFacts {
    ContainerFacts {
        id: format!("{index:064x}"),
        name: format!("c{index}"),
        created: 1_700_000_000,
        labels: BTreeMap::from([
            ("dockhand.host".to_owned(), format!("c{index}.bench.test")),
            ("dockhand.port".to_owned(), "8080".to_owned()),
        ]),
        running: true,
        health: None,
        networks: BTreeMap::from([(NETWORK.to_owned(), Some(address(index, 0)))]),
        network_mode: NETWORK.to_owned(),
        exposed_ports: BTreeSet::from([8080]),
        compose_project: None,
        service: None,
        reached_by_name: None,
    }
}

fn context() -> ProxyFacts {
    ProxyFacts {
        proxy_networks: vec![NETWORK.to_owned()],
        ..ProxyFacts::default()
    }
}

/// Moves container `generation % CONTAINERS` to its other address.
fn move_one(containers: &mut [ContainerFacts], generation: usize) {
    let index = generation % CONTAINERS;
    containers[index].networks.insert(
        NETWORK.to_owned(),
        Some(address(index, generation / CONTAINERS + 1)),
    );
}

fn one_change_among_1000(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // The router's grace deadlines use tokio's clock.
    let _entered = runtime.enter();
    let context = context();
    let mut containers: Vec<ContainerFacts> = (0..CONTAINERS).map(container).collect();
    let (desired, diagnostics) = build_hosts(&containers, &context);
    assert!(diagnostics.is_empty(), "clean labels: {diagnostics:?}");
    let router = Router::new(Arc::new(EndpointRegistry::new()), Duration::from_secs(5));
    router.publish(ProviderId::Docker, as_published(desired));
    assert_eq!(router.current().host_count(), CONTAINERS);

    let mut group = c.benchmark_group("route_table");
    let mut generation = 0;
    group.bench_function("apply_one_change_among_1000", |b| {
        b.iter(|| {
            move_one(&mut containers, generation);
            generation += 1;
            let (desired, _) = build_hosts(black_box(&containers), &context);
            assert!(
                router.publish(ProviderId::Docker, as_published(desired)),
                "a changed table"
            );
        })
    });
    group.bench_function("build_hosts_1000", |b| {
        b.iter(|| build_hosts(black_box(&containers), &context))
    });
    group.finish();
}

criterion_group!(benches, one_change_among_1000);
criterion_main!(benches);

fn as_published(hosts: DesiredHosts) -> Desired {
    Desired {
        hosts,
        ..Desired::default()
    }
}
