//! The narrow view of the Docker Engine API that the provider needs: list
//! container ids, inspect one container, follow events. Only GET calls, so
//! dockhand runs behind a socket proxy that forbids everything else. The real
//! implementation is bollard; unit tests feed the trait with fakes.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use bollard::query_parameters::{
    EventsOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
};
use bollard::Docker;
use futures_util::{Stream, StreamExt};

use super::facts::facts_from_inspect;
use crate::labels::ContainerFacts;
use crate::settings::DockerHost;

/// Seconds any one API call may take (the event stream is not cut by it).
const REQUEST_TIMEOUT_SECS: u64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("can't reach Docker at {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: bollard::errors::Error,
    },
    #[error("Docker API call failed: {0}")]
    Api(#[from] bollard::errors::Error),
    #[error("the Docker event stream ended")]
    EventsEnded,
}

/// A change Docker reports; only ever a hint to re-inspect `container`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerEvent {
    pub container: String,
    pub action: EventAction,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventAction {
    Start,
    /// `kill` with a stopping signal, or `stop`: out of rotation at once.
    Stopping,
    Die,
    Destroy,
    Health,
    Pause,
    Unpause,
    Rename,
    NetworkConnect,
    NetworkDisconnect,
}

pub type EventStream = Pin<Box<dyn Stream<Item = Result<DockerEvent, DockerError>> + Send>>;

pub trait DockerApi: Send + Sync + 'static {
    fn list_container_ids(&self) -> impl Future<Output = Result<Vec<String>, DockerError>> + Send;
    /// `Ok(None)` when the container no longer exists.
    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<ContainerFacts>, DockerError>> + Send;
    fn events(&self) -> EventStream;
}

/// The Docker Engine API over a unix socket or TCP, version negotiated.
#[derive(Clone)]
pub struct BollardApi {
    docker: Docker,
}

impl BollardApi {
    /// Connects to `host` and agrees on an API version with the engine.
    pub async fn connect(host: &DockerHost) -> Result<BollardApi, DockerError> {
        let version = bollard::API_DEFAULT_VERSION;
        let docker = match host {
            DockerHost::Unix(path) => {
                Docker::connect_with_unix(&path.to_string_lossy(), REQUEST_TIMEOUT_SECS, version)
            }
            DockerHost::Tcp { .. } => {
                Docker::connect_with_http(&host.to_string(), REQUEST_TIMEOUT_SECS, version)
            }
        };
        let connect_error = |source| DockerError::Connect {
            endpoint: host.to_string(),
            source,
        };
        let docker = docker
            .map_err(connect_error)?
            .negotiate_version()
            .await
            .map_err(connect_error)?;
        Ok(BollardApi { docker })
    }
}

impl DockerApi for BollardApi {
    async fn list_container_ids(&self) -> Result<Vec<String>, DockerError> {
        // Stopped containers too: the hosts they carry stay known (503, not 404).
        let options = ListContainersOptionsBuilder::new().all(true).build();
        let summaries = self.docker.list_containers(Some(options)).await?;
        Ok(summaries
            .into_iter()
            .filter_map(|summary| summary.id)
            .collect())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerFacts>, DockerError> {
        match self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Ok(response) => Ok(facts_from_inspect(response)),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    fn events(&self) -> EventStream {
        let filters = HashMap::from([("type", vec!["container", "network"])]);
        let options = EventsOptionsBuilder::new().filters(&filters).build();
        let stream = self
            .docker
            .events(Some(options))
            .filter_map(|message| async move {
                match message {
                    Ok(message) => event_from_message(message).map(Ok),
                    Err(error) => Some(Err(DockerError::Api(error))),
                }
            });
        Box::pin(stream)
    }
}

/// The event as a hint, or `None` for the many events that change no route
/// (exec_create from health checks, attach, resize...).
fn event_from_message(message: bollard::models::EventMessage) -> Option<DockerEvent> {
    use bollard::models::EventMessageTypeEnum as Type;
    let actor = message.actor?;
    let attributes = actor.attributes.unwrap_or_default();
    let action = message.action?;
    match message.typ? {
        Type::CONTAINER => Some(DockerEvent {
            container: actor.id?,
            action: container_action(&action, attributes.get("signal").map(String::as_str))?,
        }),
        Type::NETWORK => Some(DockerEvent {
            container: attributes.get("container")?.clone(),
            action: match action.as_str() {
                "connect" => EventAction::NetworkConnect,
                "disconnect" => EventAction::NetworkDisconnect,
                _ => return None,
            },
        }),
        _ => None,
    }
}

fn container_action(action: &str, signal: Option<&str>) -> Option<EventAction> {
    // `health_status: healthy` carries the new status after a colon.
    let verb = action.split(':').next().unwrap_or(action).trim();
    Some(match verb {
        "start" => EventAction::Start,
        "stop" => EventAction::Stopping,
        "kill" if is_stopping_signal(signal) => EventAction::Stopping,
        "die" => EventAction::Die,
        "destroy" => EventAction::Destroy,
        "health_status" => EventAction::Health,
        "pause" => EventAction::Pause,
        "unpause" => EventAction::Unpause,
        "rename" => EventAction::Rename,
        _ => return None,
    })
}

/// `docker kill -s HUP` only signals; KILL, TERM, INT and QUIT end the container.
fn is_stopping_signal(signal: Option<&str>) -> bool {
    match signal {
        None => true,
        Some(signal) => matches!(
            signal.trim_start_matches("SIG"),
            "9" | "15" | "2" | "3" | "KILL" | "TERM" | "INT" | "QUIT"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_actions() {
        assert_eq!(container_action("start", None), Some(EventAction::Start));
        assert_eq!(
            container_action("health_status: healthy", None),
            Some(EventAction::Health)
        );
        assert_eq!(
            container_action("kill", Some("15")),
            Some(EventAction::Stopping)
        );
        assert_eq!(
            container_action("kill", Some("SIGKILL")),
            Some(EventAction::Stopping)
        );
        assert_eq!(
            container_action("kill", Some("1")),
            None,
            "SIGHUP does not stop"
        );
        assert_eq!(container_action("exec_create: /probe", None), None);
    }
}
