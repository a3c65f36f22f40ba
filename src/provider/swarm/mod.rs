//! The Swarm provider: follows a swarm manager's services and publishes the
//! hosts their labels (`deploy.labels`) describe, with the keys, checks and
//! diagnostics of containers' labels (`replicas` turns services and tasks
//! into what the label pipeline reads). The task list has no events: it is
//! listed again on every service, node or task-container event and every
//! `RELIST_INTERVAL`. A task container told to stop is out at once, before
//! the next list says so. Only managers list services: on another engine,
//! nothing is published (and `--docker-mode swarm` says why in the log).

mod api;
mod replicas;

#[cfg(test)]
mod replicas_tests;
#[cfg(test)]
mod tests;

pub use api::{ServiceFacts, SwarmApi, SwarmEvent, SwarmEventStream, TaskFacts};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::docker::{initial_context, learn_own_context, BollardApi, DockerError, Reconnecting};
use super::labelled;
use crate::config::{Diagnostic, ProviderId};
use crate::labels::{ContainerFacts, ProxyFacts};
use crate::resolve::Dns;
use crate::routes::Router;
use crate::settings::{DockerMode, DockerSettings};
use replicas::{replicas, SwarmFacts};

/// How often services and tasks are listed again besides events (a task
/// that starts on another node has none here).
pub const RELIST_INTERVAL: Duration = Duration::from_secs(5);

/// Runs until the process ends: connect, follow, and on any loss reconnect.
pub async fn run_provider(settings: DockerSettings, router: Arc<Router>, dns: Arc<dyn Dns>) {
    let mut state = SwarmState::new(&settings);
    let mut connection = Reconnecting::to(&settings.host);
    loop {
        let api = connection.connect().await;
        let error = follow(&api, &settings, &mut state, &router, &*dns).await;
        connection.lost(&error).await;
    }
}

/// What the provider knows between lists, kept across reconnects.
pub struct SwarmState {
    services: Vec<ServiceFacts>,
    tasks: Vec<TaskFacts>,
    /// Task containers on this engine, by id.
    containers: HashMap<String, ContainerFacts>,
    /// Task containers told to stop: out of rotation until they are gone.
    stopping: HashSet<String>,
    context: ProxyFacts,
    /// Whether the engine answered as a swarm manager at the last list.
    manager: Option<bool>,
    /// When to publish again because a DNS server name had no address.
    dns_server_retry: Option<Instant>,
}

impl SwarmState {
    pub fn new(settings: &DockerSettings) -> SwarmState {
        SwarmState {
            services: Vec::new(),
            tasks: Vec::new(),
            containers: HashMap::new(),
            stopping: HashSet::new(),
            context: initial_context(settings),
            manager: None,
            dns_server_retry: None,
        }
    }

    fn facts(&self) -> SwarmFacts<'_> {
        SwarmFacts {
            services: &self.services,
            tasks: &self.tasks,
            containers: &self.containers,
            stopping: &self.stopping,
        }
    }
}

/// The label problems of the swarm's services now, without following it
/// (`dockhand check`); `None` when the engine is not a swarm manager.
pub async fn check(settings: &DockerSettings) -> Result<Option<Vec<Diagnostic>>, DockerError> {
    let api = BollardApi::connect(&settings.host).await?;
    let mut state = SwarmState::new(settings);
    learn_own_context(&api, settings, &mut state.context).await?;
    relist(&api, settings, &mut state, RoleCheck::Ask).await?;
    if state.manager != Some(true) {
        return Ok(None);
    }
    let (replicas, diagnostics) = replicas(&state.facts(), &state.context.label_prefix);
    Ok(Some(
        labelled::check(&replicas, diagnostics, &state.context).await,
    ))
}

/// Follows the swarm until the connection fails; returns why.
pub async fn follow<A: SwarmApi>(
    api: &A,
    settings: &DockerSettings,
    state: &mut SwarmState,
    router: &Router,
    dns: &dyn Dns,
) -> DockerError {
    // Subscribed before listing, with the engine replaying the seconds
    // before (`BollardApi::events_of`): nothing between the two is missed.
    let mut events = api.swarm_events();
    if let Err(error) = learn_own_context(api, settings, &mut state.context).await {
        return error;
    }
    if let Err(error) = relist(api, settings, state, RoleCheck::Ask).await {
        return error;
    }
    publish(state, router, dns).await;
    let mut relist_timer =
        tokio::time::interval_at(Instant::now() + RELIST_INTERVAL, RELIST_INTERVAL);
    loop {
        let dns_server_retry = state.dns_server_retry;
        let result = tokio::select! {
            event = events.next() => match event {
                Some(Ok(SwarmEvent::Stopping(container))) => {
                    state.stopping.insert(container);
                    relist(api, settings, state, RoleCheck::Known).await
                }
                Some(Ok(SwarmEvent::Changed)) => relist(api, settings, state, RoleCheck::Known).await,
                Some(Ok(SwarmEvent::NodeChanged)) => relist(api, settings, state, RoleCheck::Ask).await,
                Some(Err(error)) => Err(error),
                None => Err(DockerError::EventsEnded),
            },
            _ = relist_timer.tick() => relist(api, settings, state, RoleCheck::Known).await,
            () = labelled::until(dns_server_retry) => Ok(()),
        };
        if let Err(error) = result {
            return error;
        }
        publish(state, router, dns).await;
    }
}

/// Whether a list asks the engine again whether it is a manager (Docker's
/// `info`, a heavy call to make every few seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoleCheck {
    /// On connecting and on node events, when the role may have changed.
    Ask,
    /// Otherwise: a manager stays one until a node event says otherwise
    /// (and a demoted one fails its next list, so the reconnect asks);
    /// an engine that is not a manager is still asked, so that a `docker
    /// swarm init` there is noticed at the next list.
    Known,
}

/// Lists services and tasks again, and inspects the task containers on
/// this engine. On an engine that is not a manager, nothing is listed.
async fn relist<A: SwarmApi>(
    api: &A,
    settings: &DockerSettings,
    state: &mut SwarmState,
    role: RoleCheck,
) -> Result<(), DockerError> {
    let manager = match (role, state.manager) {
        (RoleCheck::Known, Some(true)) => true,
        _ => api.is_manager().await?,
    };
    if state.manager != Some(manager) {
        log_mode(settings.mode, manager);
        state.manager = Some(manager);
    }
    if !manager {
        state.services.clear();
        state.tasks.clear();
        state.containers.clear();
        return Ok(());
    }
    let services = api.services().await?;
    let tasks = api.tasks().await?;
    // Only the tasks of services that carry dockhand's labels are looked at.
    let prefix = format!("{}.", settings.label_prefix);
    let labelled: HashSet<&str> = services
        .iter()
        .filter(|service| service.labels.keys().any(|key| key.starts_with(&prefix)))
        .map(|service| service.service.id.as_str())
        .collect();
    let mut containers = HashMap::new();
    for id in tasks
        .iter()
        .filter(|task| labelled.contains(task.service_id.as_str()))
        .filter_map(|task| task.container_id.as_ref())
    {
        // A task on another node has no container here.
        if let Some(facts) = api.inspect(id).await? {
            containers.insert(id.clone(), facts);
        }
    }
    // A stop is over once its container no longer runs.
    state.stopping.retain(|id| {
        containers
            .get(id)
            .is_some_and(|container: &ContainerFacts| container.running)
    });
    state.services = services;
    state.tasks = tasks;
    state.containers = containers;
    Ok(())
}

/// Says what is followed, once the engine has said whether it manages a
/// swarm (the default mode depends on it).
fn log_mode(mode: Option<DockerMode>, manager: bool) {
    match (mode, manager) {
        (None, true) => tracing::info!(
            mode = "both",
            "docker mode: containers and Swarm services (the engine is a swarm manager)"
        ),
        (None, false) => tracing::info!(
            mode = "container",
            "docker mode: containers (the engine is not a swarm manager)"
        ),
        (Some(_), true) => tracing::info!(mode = ?mode, "following Swarm services"),
        (Some(_), false) => {
            tracing::warn!(mode = ?mode, "the engine is not a swarm manager: no services are served (only managers list them)")
        }
    }
}

async fn publish(state: &mut SwarmState, router: &Router, dns: &dyn Dns) {
    let (replicas, diagnostics) = replicas(&state.facts(), &state.context.label_prefix);
    let published = labelled::publish(
        ProviderId::Swarm,
        &replicas,
        diagnostics,
        &state.context,
        router,
        dns,
    )
    .await;
    state.dns_server_retry = published.retry_at;
    if published.changed {
        tracing::info!(
            services = state.services.len(),
            tasks = state.tasks.len(),
            "routes from Swarm updated"
        );
    }
}
