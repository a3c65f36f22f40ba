//! The provider loop fed by a fake Docker: events, stops, grace periods,
//! re-lists and a lost event stream, on tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::*;
use crate::config::{Diagnostic, Origin};
use crate::labels::Health;
use crate::metrics::Metrics;
use crate::provider::fake_engine::{EventSender, FakeEngine};
use crate::resolve::srv::fake_dns::{ip_answer, FakeDns};
use crate::resolve::{Dns, IpAnswer, LookupError, NameResolver, SrvAnswer};
use crate::routes::RouteMiss;

type FakeDocker = FakeEngine<DockerEvent>;

impl DockerApi for Arc<FakeDocker> {
    async fn list_container_ids(&self) -> Result<Vec<String>, DockerError> {
        Ok(self.container_ids())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerFacts>, DockerError> {
        Ok(FakeEngine::inspect(self, id))
    }

    fn events(&self) -> EventStream {
        self.subscribe()
    }
}

/// DNS that knows every name (at 10.9.0.1) and counts its lookups.
#[derive(Default)]
struct CountingDns {
    lookups: std::sync::atomic::AtomicUsize,
}

impl Dns for CountingDns {
    fn lookup_ip<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        self.lookups
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            Ok(IpAnswer {
                addresses: vec!["10.9.0.1".parse().unwrap()],
                ttl: Duration::from_secs(600),
            })
        })
    }

    fn lookup_srv<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        Box::pin(async { Err(LookupError::NotFound) })
    }
}

struct Harness {
    docker: Arc<FakeDocker>,
    events: EventSender<DockerEvent>,
    router: Arc<Router>,
    dns: Arc<CountingDns>,
    follow: tokio::task::JoinHandle<DockerError>,
    /// Shared by the router and the provider, as `run` shares them.
    metrics: Arc<Metrics>,
}

const GRACE: Duration = Duration::from_secs(5);
const RELIST: Duration = Duration::from_secs(60);

fn web(id: &str, ip: &str) -> ContainerFacts {
    ContainerFacts {
        id: id.to_owned(),
        name: format!("web-{id}"),
        created: 1,
        labels: BTreeMap::from([("dockhand.host".to_owned(), "web.test".to_owned())]),
        running: true,
        health: None,
        networks: BTreeMap::from([("net".to_owned(), Some(ip.parse().unwrap()))]),
        network_mode: "net".to_owned(),
        exposed_ports: [8080].into(),
        compose_project: None,
        service: None,
        reached_by_name: None,
    }
}

impl Harness {
    async fn start(containers: Vec<ContainerFacts>) -> Harness {
        Harness::start_with(containers, Arc::new(FakeDns::default())).await
    }

    /// With `dns_servers` answering for DNS servers written as names.
    async fn start_with(containers: Vec<ContainerFacts>, dns_servers: Arc<FakeDns>) -> Harness {
        let (docker, events) = FakeDocker::new(containers);
        let docker = Arc::new(docker);
        let registry = Arc::new(crate::upstream::EndpointRegistry::new());
        let metrics = Arc::new(Metrics::default());
        let router = Arc::new(Router::new(registry, GRACE).with_metrics(metrics.clone()));
        tokio::spawn({
            let router = router.clone();
            async move { router.expire_grace_periods().await }
        });
        let settings = DockerSettings {
            host: "unix:///fake.sock".parse().unwrap(),
            networks: vec!["net".to_owned()],
            label_prefix: "dockhand".to_owned(),
            relist_interval: RELIST,
            mode: None,
        };
        let dns = Arc::new(CountingDns::default());
        let names = NameResolver::spawn(
            dns.clone(),
            router.watch_names(),
            router.watch_moves(),
            router.clone(),
        );
        let mut changes = router.subscribe();
        let follow = tokio::spawn({
            let (docker, router, metrics) = (docker.clone(), router.clone(), metrics.clone());
            async move {
                // Held for as long as the provider runs, as `run` holds it.
                let _names = names;
                let mut state = ProviderState::new(&settings, metrics);
                follow(&docker, &settings, &mut state, &router, &*dns_servers).await
            }
        });
        changes.changed().await.unwrap();
        Harness {
            docker,
            events,
            router,
            dns,
            follow,
            metrics,
        }
    }

    /// The addresses `web.test/` is sent to now.
    fn upstreams(&self) -> Result<Vec<String>, RouteMiss> {
        self.upstreams_of("web.test")
    }

    /// The addresses `host/` is sent to now.
    fn upstreams_of(&self, host: &str) -> Result<Vec<String>, RouteMiss> {
        let table = self.router.current();
        let location = table.find(host, "/")?;
        Ok(location
            .upstreams
            .endpoints()
            .iter()
            .map(|endpoint| endpoint.to_string())
            .collect())
    }

    fn set(&self, facts: ContainerFacts) {
        self.docker
            .containers
            .lock()
            .unwrap()
            .insert(facts.id.clone(), facts);
    }

    fn remove(&self, id: &str) {
        self.docker.containers.lock().unwrap().remove(id);
    }

    /// Makes Docker say `facts` of `id` (`None`: it is gone), then sends the event.
    async fn replace(&self, id: &str, facts: Option<ContainerFacts>, action: EventAction) {
        match facts {
            Some(facts) => self.set(facts),
            None => self.remove(id),
        }
        self.event(id, action).await;
    }

    /// Sends an event and waits until the provider has dealt with it.
    async fn event(&self, container: &str, action: EventAction) {
        let event = DockerEvent {
            container: container.to_owned(),
            action,
        };
        self.events.send(Ok(event)).unwrap();
        // The loop handles one event per turn; a paused clock lets it run.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn containers_at_start_are_routed() {
    let harness = Harness::start(vec![web("a", "10.0.0.2"), web("b", "10.0.0.3")]).await;
    let mut upstreams = harness.upstreams().unwrap();
    upstreams.sort();
    assert_eq!(upstreams, ["10.0.0.2:8080", "10.0.0.3:8080"]);
}

#[tokio::test(start_paused = true)]
async fn events_swaps_and_upstreams_show_in_the_metrics() {
    let harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    harness.event("a", EventAction::Stopping).await;
    harness.event("a", EventAction::Start).await;
    harness.event("a", EventAction::Start).await;
    let text = harness.metrics.render(&*harness.router);
    for line in [
        r#"dockhand_docker_events_total{action="stopping"} 1"#,
        r#"dockhand_docker_events_total{action="start"} 2"#,
        // Containers at start, taken out, back in; the second start changed nothing.
        "dockhand_route_table_swaps_total 3",
        r#"dockhand_upstream_healthy{host="web.test",location="/",address="10.0.0.2:8080"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_takes_the_container_out_at_once_though_inspect_still_says_running() {
    let harness = Harness::start(vec![web("a", "10.0.0.2"), web("b", "10.0.0.3")]).await;
    harness.event("a", EventAction::Stopping).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.3:8080"]);
    // A health event while it stops must not bring it back.
    harness.event("a", EventAction::Health).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.3:8080"]);
    // Started again: back in rotation.
    harness.event("a", EventAction::Start).await;
    assert_eq!(harness.upstreams().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_destroyed_last_container_is_kept_empty_for_the_grace_then_removed() {
    let harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    harness.remove("a");
    harness.event("a", EventAction::Destroy).await;
    assert_eq!(harness.upstreams(), Ok(vec![]), "kept, without upstreams");

    tokio::time::sleep(GRACE - Duration::from_millis(100)).await;
    assert_eq!(harness.upstreams(), Ok(vec![]));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        harness.upstreams(),
        Err(RouteMiss::NoHost),
        "removed after the grace"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stopped_container_keeps_its_host_without_upstreams_past_the_grace() {
    let harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    let mut stopped = web("a", "10.0.0.2");
    stopped.running = false;
    stopped
        .networks
        .values_mut()
        .for_each(|address| *address = None);
    harness.replace("a", Some(stopped), EventAction::Die).await;
    assert_eq!(harness.upstreams(), Ok(vec![]), "known, nothing serves it");
    tokio::time::sleep(GRACE * 2).await;
    assert_eq!(
        harness.upstreams(),
        Ok(vec![]),
        "still known: the container still exists (503, not 404)"
    );
    harness.replace("a", None, EventAction::Destroy).await;
    tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
    assert_eq!(harness.upstreams(), Err(RouteMiss::NoHost), "removed: 404");
}

#[tokio::test(start_paused = true)]
async fn label_problems_are_held_by_the_router_until_fixed() {
    let mut typo = web("b", "10.0.0.3");
    typo.labels
        .insert("dockhand.prot".to_owned(), "8080".to_owned());
    let harness = Harness::start(vec![web("a", "10.0.0.2"), typo.clone()]).await;
    let diagnostics = harness.router.diagnostics();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    let (provider, diagnostic) = &diagnostics[0];
    assert_eq!(*provider, ProviderId::Docker);
    assert_eq!(diagnostic.key, "dockhand.prot");
    assert!(
        matches!(&diagnostic.origin, crate::config::Origin::Container { name, id } if name == "web-b" && id == "b"),
        "{diagnostic:?}"
    );
    assert_eq!(diagnostic.value.as_deref(), Some("8080"));
    assert_eq!(diagnostic.suggestion.as_deref(), Some("dockhand.port"));
    assert_eq!(
        harness.upstreams().unwrap().len(),
        2,
        "a warning: still served"
    );

    typo.labels.remove("dockhand.prot");
    harness.replace("b", Some(typo), EventAction::Start).await;
    assert_eq!(harness.router.diagnostics(), []);
}

#[tokio::test(start_paused = true)]
async fn a_recreate_within_the_grace_is_followed_to_the_new_address() {
    let harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    harness.remove("a");
    harness.event("a", EventAction::Destroy).await;
    harness.set(web("b", "10.0.0.9"));
    harness.event("b", EventAction::Start).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.9:8080"]);
    tokio::time::sleep(GRACE * 2).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.9:8080"]);
}

#[tokio::test(start_paused = true)]
async fn health_decides_whether_a_container_is_an_upstream() {
    let starting = ContainerFacts {
        health: Some(Health::Starting),
        ..web("a", "10.0.0.2")
    };
    let harness = Harness::start(vec![starting.clone(), web("b", "10.0.0.3")]).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.3:8080"]);
    harness.set(ContainerFacts {
        health: Some(Health::Healthy),
        ..starting.clone()
    });
    harness.event("a", EventAction::Health).await;
    assert_eq!(harness.upstreams().unwrap().len(), 2);
    harness.set(ContainerFacts {
        health: Some(Health::Unhealthy),
        ..starting
    });
    harness.event("a", EventAction::Health).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.3:8080"]);
}

#[tokio::test(start_paused = true)]
async fn the_periodic_relist_catches_what_no_event_said() {
    let harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    // A container appears without an event (one lost in a reconnect, say).
    harness.set(web("b", "10.0.0.3"));
    tokio::time::sleep(RELIST - Duration::from_secs(1)).await;
    assert_eq!(harness.upstreams().unwrap().len(), 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(harness.upstreams().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lost_event_stream_ends_follow_and_keeps_the_routes() {
    let mut harness = Harness::start(vec![web("a", "10.0.0.2")]).await;
    harness.events.send(Err(DockerError::EventsEnded)).unwrap();
    let error = (&mut harness.follow).await.unwrap();
    assert!(matches!(error, DockerError::EventsEnded), "{error}");
    // The routes stay as they were while the provider reconnects.
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.2:8080"]);
}

#[tokio::test(start_paused = true)]
async fn containers_that_move_have_upstream_names_resolved_again_at_once() {
    let mut api = web("api", "10.0.0.2");
    api.labels
        .insert("dockhand.upstream".to_owned(), "app:8080".to_owned());
    let harness = Harness::start(vec![api]).await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    let lookups = || {
        harness
            .dns
            .lookups
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    assert_eq!(lookups(), 1, "the name is resolved when the route appears");
    assert_eq!(harness.upstreams().unwrap(), ["10.9.0.1:8080"]);

    // Well before the 5 s refresh: each container that starts, dies, goes
    // or changes networks has the name asked again; a pause does not.
    let mut other = web("other", "10.0.0.7");
    other.labels.clear();
    let mut asked = 1;
    harness
        .replace("other", Some(other.clone()), EventAction::Start)
        .await;
    asked += 1;
    assert_eq!(lookups(), asked, "a start");
    other
        .networks
        .insert("back".to_owned(), "10.1.0.7".parse().ok());
    harness
        .replace("other", Some(other.clone()), EventAction::NetworkConnect)
        .await;
    asked += 1;
    assert_eq!(lookups(), asked, "a network connected");
    other.networks.remove("back");
    harness
        .replace("other", Some(other.clone()), EventAction::NetworkDisconnect)
        .await;
    asked += 1;
    assert_eq!(lookups(), asked, "a network disconnected");
    let mut paused = other.clone();
    paused.running = false;
    harness
        .replace("other", Some(paused), EventAction::Pause)
        .await;
    assert_eq!(lookups(), asked, "a pause moves nothing");
    let mut stopped = other.clone();
    stopped.running = false;
    stopped
        .networks
        .values_mut()
        .for_each(|address| *address = None);
    harness
        .replace("other", Some(stopped), EventAction::Die)
        .await;
    asked += 1;
    assert_eq!(lookups(), asked, "a stop");
    harness
        .replace("other", Some(other), EventAction::Start)
        .await;
    harness.replace("other", None, EventAction::Destroy).await;
    asked += 2;
    assert_eq!(lookups(), asked, "a start, then a removal");
}

#[tokio::test(start_paused = true)]
async fn a_dns_server_name_is_looked_up_at_publish_and_again_until_it_resolves() {
    let mut srv = web("srv", "10.0.0.5");
    srv.labels = BTreeMap::from(
        [
            ("dockhand.host", "srv.test"),
            ("dockhand.upstream", "_app._tcp.example.test"),
            ("dockhand.resolution.mode", "srv"),
            ("dockhand.resolution.resolver", "ns.example.test:5353"),
        ]
        .map(|(label, value)| (label.to_owned(), value.to_owned())),
    );
    let dns_servers = Arc::new(FakeDns::default());
    let harness = Harness::start_with(vec![srv, web("a", "10.0.0.2")], dns_servers.clone()).await;
    let resolver_diagnostics = || -> Vec<Diagnostic> {
        let diagnostics = harness.router.diagnostics().into_iter();
        diagnostics
            .map(|(_, diagnostic)| diagnostic)
            .filter(|diagnostic| diagnostic.key == "dockhand.resolution.resolver")
            .collect()
    };

    // Not resolved: the location answers 503, the other container serves.
    assert_eq!(
        harness.upstreams_of("srv.test").unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(harness.upstreams().unwrap(), ["10.0.0.2:8080"]);
    let diagnostics = resolver_diagnostics();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(
        diagnostics[0].origin,
        Origin::Container {
            name: "web-srv".into(),
            id: "srv".into()
        }
    );
    assert!(
        diagnostics[0]
            .reason
            .starts_with("DNS server name `ns.example.test` did not resolve"),
        "{diagnostics:?}"
    );
    assert_eq!(dns_servers.ip_calls("ns.example.test"), 1);

    // Once DNS answers, the next try brings the upstream in, with no event.
    dns_servers.set_ip(
        "ns.example.test",
        Ok(ip_answer(&["10.0.0.53"], Duration::from_secs(30))),
    );
    tokio::time::sleep(crate::provider::dns_servers::RETRY_INTERVAL + Duration::from_millis(1))
        .await;
    assert_eq!(dns_servers.ip_calls("ns.example.test"), 2);
    assert_eq!(
        harness.upstreams_of("srv.test").unwrap(),
        ["_app._tcp.example.test"]
    );
    assert_eq!(resolver_diagnostics(), []);

    // Resolved, it is asked again only when the provider publishes.
    tokio::time::sleep(crate::provider::dns_servers::RETRY_INTERVAL * 3).await;
    assert_eq!(dns_servers.ip_calls("ns.example.test"), 2);
    harness.event("a", EventAction::Health).await;
    assert_eq!(dns_servers.ip_calls("ns.example.test"), 3);
}
