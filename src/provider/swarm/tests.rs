//! The swarm provider's loop fed by a fake swarm manager, on tokio's
//! paused clock: what events and re-lists make of tasks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::labels::ServiceRef;
use crate::provider::docker::{DockerApi, EventStream};
use crate::provider::fake_engine::{EventSender, FakeEngine};
use crate::resolve::srv::fake_dns::FakeDns;
use crate::routes::RouteMiss;

/// A swarm manager in memory: its services and tasks, the task
/// containers and events of its engine.
struct FakeSwarm {
    engine: FakeEngine<SwarmEvent>,
    manager: AtomicBool,
    /// How many times it was asked whether it is a manager.
    roles_asked: AtomicUsize,
    services: Vec<ServiceFacts>,
    tasks: Mutex<Vec<TaskFacts>>,
}

impl DockerApi for Arc<FakeSwarm> {
    async fn list_container_ids(&self) -> Result<Vec<String>, DockerError> {
        Ok(self.engine.container_ids())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerFacts>, DockerError> {
        Ok(self.engine.inspect(id))
    }

    fn events(&self) -> EventStream {
        unreachable!("the swarm provider follows swarm_events")
    }
}

impl SwarmApi for Arc<FakeSwarm> {
    async fn is_manager(&self) -> Result<bool, DockerError> {
        self.roles_asked.fetch_add(1, Ordering::SeqCst);
        Ok(self.manager.load(Ordering::SeqCst))
    }

    async fn services(&self) -> Result<Vec<ServiceFacts>, DockerError> {
        Ok(self.services.clone())
    }

    async fn tasks(&self) -> Result<Vec<TaskFacts>, DockerError> {
        Ok(self.tasks.lock().unwrap().clone())
    }

    fn swarm_events(&self) -> SwarmEventStream {
        self.engine.subscribe()
    }
}

fn web_service() -> ServiceFacts {
    ServiceFacts {
        service: ServiceRef {
            name: "web".into(),
            id: "svc".into(),
        },
        labels: BTreeMap::from([("dockhand.host".into(), "web.test".into())]),
        ..ServiceFacts::default()
    }
}

/// A running task of `web` and its container at `address` on `net`.
fn running(slot: u32, address: &str) -> (TaskFacts, ContainerFacts) {
    let container = ContainerFacts {
        id: format!("c{slot}"),
        name: format!("web.{slot}"),
        running: true,
        networks: BTreeMap::from([("net".into(), Some(address.parse().unwrap()))]),
        network_mode: "default".into(),
        exposed_ports: [8080].into(),
        ..ContainerFacts::default()
    };
    let task = TaskFacts {
        id: format!("t{slot}"),
        service_id: "svc".into(),
        serving: true,
        container_id: Some(container.id.clone()),
    };
    (task, container)
}

struct Harness {
    swarm: Arc<FakeSwarm>,
    events: EventSender<SwarmEvent>,
    router: Arc<Router>,
}

impl Harness {
    async fn start(manager: bool, tasks: Vec<(TaskFacts, ContainerFacts)>) -> Harness {
        let (engine, events) =
            FakeEngine::new(tasks.iter().map(|(_, container)| container.clone()));
        let swarm = Arc::new(FakeSwarm {
            engine,
            manager: AtomicBool::new(manager),
            roles_asked: AtomicUsize::new(0),
            services: vec![web_service()],
            tasks: Mutex::new(tasks.into_iter().map(|(task, _)| task).collect()),
        });
        let registry = Arc::new(crate::upstream::EndpointRegistry::new());
        let router = Arc::new(Router::new(registry, Duration::from_secs(5)));
        let settings = DockerSettings {
            networks: vec!["net".to_owned()],
            ..DockerSettings::default()
        };
        tokio::spawn({
            let (swarm, router) = (swarm.clone(), router.clone());
            async move {
                let mut state = SwarmState::new(&settings);
                follow(&swarm, &settings, &mut state, &router, &FakeDns::default()).await
            }
        });
        while !router.has_published(ProviderId::Swarm) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Harness {
            swarm,
            events,
            router,
        }
    }

    fn upstreams(&self) -> Result<Vec<String>, RouteMiss> {
        let table = self.router.current();
        let mut upstreams: Vec<String> = table
            .find("web.test", "/")?
            .upstreams
            .endpoints()
            .iter()
            .map(|endpoint| endpoint.to_string())
            .collect();
        upstreams.sort();
        Ok(upstreams)
    }

    async fn event(&self, event: SwarmEvent) {
        self.events.send(Ok(event)).unwrap();
        // The loop handles one event per turn; a paused clock lets it run.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_task_container_told_to_stop_is_out_before_the_task_list_says_so() {
    let harness = Harness::start(true, vec![running(1, "10.0.1.5"), running(2, "10.0.1.6")]).await;
    assert_eq!(
        harness.upstreams().unwrap(),
        ["10.0.1.5:8080", "10.0.1.6:8080"]
    );
    // Swarm's stop of an updated task: the container's `kill`, while the
    // task list may still say running.
    harness.event(SwarmEvent::Stopping("c1".into())).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.1.6:8080"]);
    // Once the stop is over, it stays out; its replacement comes in.
    let (task, container) = running(3, "10.0.1.7");
    {
        let mut tasks = harness.swarm.tasks.lock().unwrap();
        tasks.retain(|task| task.id != "t1");
        tasks.push(task);
        let mut containers = harness.swarm.engine.containers.lock().unwrap();
        containers.remove("c1");
        containers.insert(container.id.clone(), container);
    }
    harness.event(SwarmEvent::Changed).await;
    assert_eq!(
        harness.upstreams().unwrap(),
        ["10.0.1.6:8080", "10.0.1.7:8080"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_task_is_found_by_the_periodic_list_without_an_event() {
    let harness = Harness::start(true, vec![running(1, "10.0.1.5")]).await;
    let (task, container) = running(2, "10.0.1.6");
    harness.swarm.tasks.lock().unwrap().push(task);
    harness
        .swarm
        .engine
        .containers
        .lock()
        .unwrap()
        .insert(container.id.clone(), container);
    tokio::time::sleep(RELIST_INTERVAL + Duration::from_millis(1)).await;
    assert_eq!(
        harness.upstreams().unwrap(),
        ["10.0.1.5:8080", "10.0.1.6:8080"]
    );
}

#[tokio::test(start_paused = true)]
async fn an_engine_that_is_not_a_manager_publishes_no_hosts() {
    let harness = Harness::start(false, vec![running(1, "10.0.1.5")]).await;
    // Published (readiness waits for it), with nothing in it.
    assert!(harness.router.has_published(ProviderId::Swarm));
    assert_eq!(harness.upstreams(), Err(RouteMiss::NoHost));
}

#[tokio::test(start_paused = true)]
async fn a_managers_role_is_asked_again_only_on_node_events() {
    let harness = Harness::start(true, vec![running(1, "10.0.1.5")]).await;
    let roles_asked = || harness.swarm.roles_asked.load(Ordering::SeqCst);
    assert_eq!(roles_asked(), 1, "asked on connecting");
    harness.event(SwarmEvent::Changed).await;
    tokio::time::sleep(RELIST_INTERVAL * 2 + Duration::from_millis(1)).await;
    assert_eq!(roles_asked(), 1, "not at service events nor periodic lists");
    harness.event(SwarmEvent::NodeChanged).await;
    assert_eq!(roles_asked(), 2, "asked again at a node event");
}

#[tokio::test(start_paused = true)]
async fn an_engine_that_becomes_a_manager_is_followed_from_the_next_list() {
    let harness = Harness::start(false, vec![running(1, "10.0.1.5")]).await;
    assert_eq!(harness.upstreams(), Err(RouteMiss::NoHost));
    // `docker swarm init` on the engine: no node event reaches an engine
    // that was in no swarm, so the periodic list must notice.
    harness.swarm.manager.store(true, Ordering::SeqCst);
    tokio::time::sleep(RELIST_INTERVAL + Duration::from_millis(1)).await;
    assert_eq!(harness.upstreams().unwrap(), ["10.0.1.5:8080"]);
}
