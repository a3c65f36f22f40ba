//! The Docker provider: follows the engine's containers and publishes the
//! hosts their labels describe. Events are hints (each re-inspects the one
//! container it names); inspect is the truth; a full re-list runs at start,
//! after every reconnect and every minute. When Docker is unreachable or
//! restarts, the last routes keep serving while it reconnects with backoff.
//! DNS servers the labels name are looked up at each publish: each name
//! once, nothing kept between publishes (they follow Docker events, never
//! requests), so a DNS that does not answer holds a publish for up to the
//! lookup timeout. One without an address is looked up again every few
//! seconds until it resolves. `check` looks once, for `dockhand check`.

mod api;
mod facts;
mod self_container;

pub(crate) use api::event_from_message;
pub use api::{
    BollardApi, DockerApi, DockerError, DockerEvent, EventAction, EventStream, EventsOf,
    Unreachable,
};
pub(crate) use facts::parse_rfc3339_seconds;

#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::labelled;
use crate::config::{Diagnostic, ProviderId};
use crate::labels::{ContainerFacts, ProxyFacts};
use crate::metrics::Metrics;
use crate::resolve::Dns;
use crate::routes::Router;
use crate::settings::{DockerHost, DockerSettings};

/// The longest wait between two attempts to reach Docker.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Runs until the process ends: connect, follow, and on any loss reconnect.
/// `dns` is asked for the addresses of DNS servers written as names;
/// `metrics` counts the connection's state and the events followed.
pub async fn run_provider(
    settings: DockerSettings,
    router: Arc<Router>,
    dns: Arc<dyn Dns>,
    metrics: Arc<Metrics>,
) {
    let mut state = ProviderState::new(&settings, metrics.clone());
    let mut connection = Reconnecting::to(&settings.host);
    loop {
        let api = connection.connect().await;
        metrics.docker_connected(true);
        let error = follow(&api, &settings, &mut state, &router, &*dns).await;
        metrics.docker_connected(false);
        connection.lost(&error).await;
    }
}

/// A connection to the engine that is made again after every loss, with
/// backoff; the last routes keep serving meanwhile.
pub struct Reconnecting<'a> {
    host: &'a DockerHost,
    backoff: Duration,
}

impl<'a> Reconnecting<'a> {
    const FIRST_BACKOFF: Duration = Duration::from_millis(250);

    pub fn to(host: &'a DockerHost) -> Reconnecting<'a> {
        Reconnecting {
            host,
            backoff: Self::FIRST_BACKOFF,
        }
    }

    /// Connects, trying until the engine answers.
    pub async fn connect(&mut self) -> BollardApi {
        loop {
            match BollardApi::connect(self.host).await {
                Ok(api) => {
                    tracing::info!(host = %self.host, "connected to Docker");
                    self.backoff = Self::FIRST_BACKOFF;
                    return api;
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in = ?self.backoff, "Docker unreachable; serving other sources meanwhile");
                    self.wait().await;
                }
            }
        }
    }

    /// Says why the connection was lost, and waits before the next.
    pub async fn lost(&mut self, error: &DockerError) {
        tracing::warn!(%error, "lost Docker; serving the last routes while reconnecting");
        self.wait().await;
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}

/// What the provider knows between events, kept across reconnects.
pub struct ProviderState {
    containers: Vec<ContainerFacts>,
    /// Containers told to stop: out of rotation until Docker says otherwise.
    stopping: HashSet<String>,
    context: ProxyFacts,
    own_id: Option<String>,
    /// When to publish again because a DNS server name had no address.
    dns_server_retry: Option<Instant>,
    metrics: Arc<Metrics>,
}

impl ProviderState {
    pub fn new(settings: &DockerSettings, metrics: Arc<Metrics>) -> ProviderState {
        ProviderState {
            containers: Vec::new(),
            stopping: HashSet::new(),
            context: initial_context(settings),
            own_id: None,
            dns_server_retry: None,
            metrics,
        }
    }

    /// Keeps what inspect said of a container; one told to stop stays out of rotation.
    fn remember(&mut self, mut facts: ContainerFacts) {
        facts.running &= !self.stopping.contains(&facts.id);
        self.containers.push(facts);
    }
}

/// The label problems of the engine's containers now, without following
/// it or serving (`dockhand check --docker`): one list and inspect of each,
/// read as at start. DNS server names are not looked up.
pub async fn check(settings: &DockerSettings) -> Result<Vec<Diagnostic>, DockerError> {
    let api = BollardApi::connect(&settings.host).await?;
    // Nothing is served, so nothing reads what it would count.
    let mut state = ProviderState::new(settings, Arc::default());
    learn_own_networks(&api, settings, &mut state).await?;
    relist(&api, &mut state).await?;
    Ok(labelled::check(&state.containers, Vec::new(), &state.context).await)
}

/// Follows Docker until the connection fails; returns why.
pub async fn follow<A: DockerApi>(
    api: &A,
    settings: &DockerSettings,
    state: &mut ProviderState,
    router: &Router,
    dns: &dyn Dns,
) -> DockerError {
    // Subscribed before listing, with the engine replaying the seconds
    // before (`BollardApi::events_of`): nothing between the two is missed.
    let mut events = api.events();
    if let Err(error) = learn_own_networks(api, settings, state).await {
        return error;
    }
    if let Err(error) = relist(api, state).await {
        return error;
    }
    publish(state, router, dns).await;
    let mut relist_timer = tokio::time::interval_at(
        Instant::now() + settings.relist_interval,
        settings.relist_interval,
    );
    loop {
        let dns_server_retry = state.dns_server_retry;
        let result = tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => apply_event(api, settings, state, event).await,
                Some(Err(error)) => Err(error),
                None => Err(DockerError::EventsEnded),
            },
            _ = relist_timer.tick() => relist(api, state).await,
            () = labelled::until(dns_server_retry) => Ok(()),
        };
        if let Err(error) = result {
            return error;
        }
        publish(state, router, dns).await;
    }
}

/// Learns which networks dockhand itself is on, unless `--network` said.
async fn learn_own_networks<A: DockerApi>(
    api: &A,
    settings: &DockerSettings,
    state: &mut ProviderState,
) -> Result<(), DockerError> {
    state.own_id = learn_own_context(api, settings, &mut state.context).await?;
    Ok(())
}

/// Finds dockhand's own container, if it runs in one, and sets `context`
/// from it: its networks (unless `--network` said) and whether it is on
/// the host's network. Its id, or `None` outside a container.
pub async fn learn_own_context<A: DockerApi>(
    api: &A,
    settings: &DockerSettings,
    context: &mut ProxyFacts,
) -> Result<Option<String>, DockerError> {
    for candidate in self_container::own_container_candidates().await {
        if let Some(own) = api.inspect(&candidate).await? {
            let on_host_network = own.network_mode == "host";
            if settings.networks.is_empty() {
                // BTreeMap keys: the networks by name, the documented order.
                context.proxy_networks = own.networks.keys().cloned().collect();
            }
            context.proxy_on_host_network = on_host_network;
            tracing::info!(container = %own.name, networks = ?context.proxy_networks, on_host_network, "running in a container");
            return Ok(Some(own.id));
        }
    }
    tracing::info!(networks = ?context.proxy_networks, "running outside a container");
    Ok(None)
}

/// What the label pipeline knows of dockhand before its container is found.
pub fn initial_context(settings: &DockerSettings) -> ProxyFacts {
    ProxyFacts {
        label_prefix: settings.label_prefix.clone(),
        proxy_networks: settings.networks.clone(),
        // Until its own container is found, dockhand is taken to run on the host.
        proxy_on_host_network: true,
    }
}

async fn relist<A: DockerApi>(api: &A, state: &mut ProviderState) -> Result<(), DockerError> {
    let mut listed = Vec::new();
    for id in api.list_container_ids().await? {
        // A container removed between list and inspect is simply absent.
        if let Some(facts) = api.inspect(&id).await? {
            listed.push(facts);
        }
    }
    // Stops Docker has carried out are over; a container still running may still be stopping.
    state
        .stopping
        .retain(|id| listed.iter().any(|c| &c.id == id && c.running));
    state.containers.clear();
    for facts in listed {
        state.remember(facts);
    }
    Ok(())
}

async fn apply_event<A: DockerApi>(
    api: &A,
    settings: &DockerSettings,
    state: &mut ProviderState,
    event: DockerEvent,
) -> Result<(), DockerError> {
    tracing::debug!(?event, "Docker event");
    state.metrics.docker_event(event.action.label());
    if state.own_id.as_deref() == Some(event.container.as_str()) {
        return learn_own_networks(api, settings, state).await;
    }
    match event.action {
        // Inspect still says running while the container shuts down.
        EventAction::Stopping => state.stopping.insert(event.container.clone()),
        EventAction::Start | EventAction::Die => state.stopping.remove(&event.container),
        _ => false,
    };
    let facts = if event.action == EventAction::Destroy {
        None
    } else {
        api.inspect(&event.container).await?
    };
    state.containers.retain(|c| c.id != event.container);
    match facts {
        Some(facts) => state.remember(facts),
        None => {
            state.stopping.remove(&event.container);
        }
    }
    Ok(())
}

/// Publishes the hosts the containers' labels describe.
async fn publish(state: &mut ProviderState, router: &Router, dns: &dyn Dns) {
    let published = labelled::publish(
        ProviderId::Docker,
        &state.containers,
        Vec::new(),
        &state.context,
        router,
        dns,
    )
    .await;
    state.dns_server_retry = published.retry_at;
    if published.changed {
        tracing::info!(
            containers = state.containers.len(),
            "routes from Docker updated"
        );
    }
}
