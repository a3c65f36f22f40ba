//! The narrow view of the Swarm part of the Engine API that the swarm
//! provider needs: whether the engine is a manager, its services and their
//! tasks (read as plain data here, so nothing downstream touches Docker's
//! types), and the events that may change them. Like the container view,
//! only GET calls. Unit tests feed the trait with fakes.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;

use bollard::models::{Service, Task, TaskState};
use bollard::query_parameters::{ListNetworksOptions, ListServicesOptions, ListTasksOptions};
use futures_util::StreamExt;

use crate::labels::ServiceRef;
use crate::provider::docker::{
    event_from_message, parse_rfc3339_seconds, BollardApi, DockerApi, DockerError, DockerEvent,
    EventAction, EventsOf,
};

/// One service as the provider reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceFacts {
    pub service: ServiceRef,
    /// Unix seconds.
    pub created: i64,
    /// `deploy.labels`: the service's own labels, not its containers'.
    pub labels: BTreeMap<String, String>,
    /// The service's virtual IP on each network it is on, by network name
    /// (none with `endpoint_mode: dnsrr`).
    pub virtual_ips: BTreeMap<String, IpAddr>,
}

/// One task as the provider reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskFacts {
    pub id: String,
    pub service_id: String,
    /// Docker's task state is `running` and its desired state too: a task
    /// being shut down (an update, a scale down) is out at once, before
    /// its container stops.
    pub serving: bool,
    /// The container running it, once there is one.
    pub container_id: Option<String>,
}

/// A change of services, tasks, nodes or task containers: a hint to list
/// again (the task list has no events of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwarmEvent {
    Changed,
    /// A node joined, left or changed role: this engine's own role may
    /// have changed with it.
    NodeChanged,
    /// A container told to stop (`kill` with a stopping signal, or `stop`):
    /// out of rotation at once, as it still runs while it shuts down.
    Stopping(String),
}

pub type SwarmEventStream = EventsOf<SwarmEvent>;

pub trait SwarmApi: DockerApi {
    /// Whether the engine is a swarm manager: only managers list services
    /// and tasks.
    fn is_manager(&self) -> impl Future<Output = Result<bool, DockerError>> + Send;
    fn services(&self) -> impl Future<Output = Result<Vec<ServiceFacts>, DockerError>> + Send;
    fn tasks(&self) -> impl Future<Output = Result<Vec<TaskFacts>, DockerError>> + Send;
    fn swarm_events(&self) -> SwarmEventStream;
}

impl SwarmApi for BollardApi {
    async fn is_manager(&self) -> Result<bool, DockerError> {
        let info = self.docker().info().await?;
        Ok(info
            .swarm
            .and_then(|swarm| swarm.control_available)
            .unwrap_or(false))
    }

    async fn services(&self) -> Result<Vec<ServiceFacts>, DockerError> {
        let docker = self.docker();
        let networks: HashMap<String, String> = docker
            .list_networks(None::<ListNetworksOptions>)
            .await?
            .into_iter()
            .filter_map(|network| Some((network.id?, network.name?)))
            .collect();
        let services = docker.list_services(None::<ListServicesOptions>).await?;
        Ok(services
            .into_iter()
            .filter_map(|service| service_facts(service, &networks))
            .collect())
    }

    async fn tasks(&self) -> Result<Vec<TaskFacts>, DockerError> {
        let tasks = self.docker().list_tasks(None::<ListTasksOptions>).await?;
        Ok(tasks.into_iter().filter_map(task_facts).collect())
    }

    fn swarm_events(&self) -> SwarmEventStream {
        let stream = self
            .events_of(&["service", "node", "container"])
            .filter_map(|message| async move { message.map(swarm_event).transpose() });
        Box::pin(stream)
    }
}

/// What an event may change of what is served: any service or node event,
/// and a container's changes as the container provider reads them (not
/// the many exec events of health checks).
fn swarm_event(message: bollard::models::EventMessage) -> Option<SwarmEvent> {
    use bollard::models::EventMessageTypeEnum as Type;
    match message.typ? {
        Type::SERVICE => Some(SwarmEvent::Changed),
        Type::NODE => Some(SwarmEvent::NodeChanged),
        Type::CONTAINER => match event_from_message(message)? {
            DockerEvent {
                container,
                action: EventAction::Stopping,
            } => Some(SwarmEvent::Stopping(container)),
            _ => Some(SwarmEvent::Changed),
        },
        _ => None,
    }
}

fn service_facts(
    service: Service,
    network_names: &HashMap<String, String>,
) -> Option<ServiceFacts> {
    let id = service.id?;
    let spec = service.spec?;
    let virtual_ips = service
        .endpoint
        .and_then(|endpoint| endpoint.virtual_ips)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|vip| {
            let network = network_names.get(vip.network_id.as_ref()?)?.clone();
            // Written with its prefix length: `10.0.1.2/24`.
            let address = vip.addr?.split('/').next()?.parse().ok()?;
            Some((network, address))
        })
        .collect();
    Some(ServiceFacts {
        service: ServiceRef {
            name: spec.name.unwrap_or_else(|| id.clone()),
            id,
        },
        created: service
            .created_at
            .as_deref()
            .and_then(parse_rfc3339_seconds)
            .unwrap_or(0),
        labels: spec.labels.unwrap_or_default().into_iter().collect(),
        virtual_ips,
    })
}

fn task_facts(task: Task) -> Option<TaskFacts> {
    let status = task.status.unwrap_or_default();
    let serving =
        task.desired_state == Some(TaskState::RUNNING) && status.state == Some(TaskState::RUNNING);
    Some(TaskFacts {
        id: task.id?,
        service_id: task.service_id?,
        serving,
        container_id: status
            .container_status
            .and_then(|container| container.container_id)
            .filter(|id| !id.is_empty()),
    })
}
