//! The narrow view of the Docker Engine API that the provider needs: list
//! container ids, inspect one container, follow events. Only GET calls, so
//! dockhand runs behind a socket proxy that forbids everything else. The real
//! implementation is bollard; unit tests feed the trait with fakes. When the
//! engine can't be reached, the error says where it was looked for and why,
//! in words that say what to do.

use std::collections::HashMap;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    #[error("can't reach Docker at {endpoint}: {reason}")]
    Connect {
        endpoint: String,
        reason: Unreachable,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("Docker API call failed: {0}")]
    Api(#[from] bollard::errors::Error),
    #[error("the Docker event stream ended")]
    EventsEnded,
}

/// Why the engine could not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreachable {
    /// No socket at the path.
    NoSocket,
    /// The socket is there, its permissions keep dockhand out.
    PermissionDenied {
        socket_group: Option<u32>,
    },
    Refused,
    /// A `tcp://` host whose name does not resolve.
    NameNotFound(String),
    TimedOut,
    /// Anything else, as the error said it.
    Other(String),
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreachable::NoSocket => f.write_str("no such file (is the socket mounted?)"),
            Unreachable::PermissionDenied {
                socket_group: Some(group),
            } => write!(
                f,
                "permission denied (run with --group-add {group}, the socket's group, or as root)"
            ),
            Unreachable::PermissionDenied { socket_group: None } => f.write_str(
                "permission denied (run with --group-add <the socket's group id> or as root)",
            ),
            Unreachable::Refused => {
                f.write_str("connection refused (is the Docker engine running?)")
            }
            Unreachable::NameNotFound(name) => write!(f, "name not found: {name} does not resolve"),
            Unreachable::TimedOut => f.write_str("timed out"),
            Unreachable::Other(text) => f.write_str(text),
        }
    }
}

impl Unreachable {
    /// Why `error` kept dockhand from `host`: bollard's own error, or the
    /// I/O error in its sources. The socket's group and whether a name
    /// resolves are looked up to say so.
    pub async fn diagnose(host: &DockerHost, error: &bollard::errors::Error) -> Unreachable {
        use bollard::errors::Error as Bollard;
        match error {
            Bollard::SocketNotFoundError(_) => return Unreachable::NoSocket,
            Bollard::RequestTimeoutError => return Unreachable::TimedOut,
            _ => {}
        }
        let io = io_error_in(error);
        match io.map(io::Error::kind) {
            Some(io::ErrorKind::NotFound) => Unreachable::NoSocket,
            Some(io::ErrorKind::PermissionDenied) => Unreachable::PermissionDenied {
                socket_group: socket_group(host).await,
            },
            Some(io::ErrorKind::ConnectionRefused) => Unreachable::Refused,
            Some(io::ErrorKind::TimedOut) => Unreachable::TimedOut,
            _ => match host {
                DockerHost::Tcp { host: name, port } if !resolves(name, *port).await => {
                    Unreachable::NameNotFound(name.clone())
                }
                _ => Unreachable::Other(io.map_or_else(|| error.to_string(), io::Error::to_string)),
            },
        }
    }
}

/// The I/O error among `error` and its sources (bollard's `IOError` shows
/// its own as itself, so it is asked directly).
fn io_error_in(error: &bollard::errors::Error) -> Option<&io::Error> {
    let mut link: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(current) = link {
        if let Some(io) = current.downcast_ref::<io::Error>() {
            return Some(io);
        }
        if let Some(bollard::errors::Error::IOError { err }) =
            current.downcast_ref::<bollard::errors::Error>()
        {
            return Some(err);
        }
        link = current.source();
    }
    None
}

/// The group owning a unix socket, for the `--group-add` that lets dockhand in.
async fn socket_group(host: &DockerHost) -> Option<u32> {
    let DockerHost::Unix(path) = host else {
        return None;
    };
    tokio::fs::metadata(path).await.ok().map(|meta| meta.gid())
}

async fn resolves(name: &str, port: u16) -> bool {
    name.parse::<IpAddr>().is_ok() || tokio::net::lookup_host((name, port)).await.is_ok()
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

impl EventAction {
    /// Its name in metrics.
    pub fn label(self) -> &'static str {
        match self {
            EventAction::Start => "start",
            EventAction::Stopping => "stopping",
            EventAction::Die => "die",
            EventAction::Destroy => "destroy",
            EventAction::Health => "health_status",
            EventAction::Pause => "pause",
            EventAction::Unpause => "unpause",
            EventAction::Rename => "rename",
            EventAction::NetworkConnect => "network_connect",
            EventAction::NetworkDisconnect => "network_disconnect",
        }
    }
}

/// A stream of an engine's events, as one provider reads them.
pub type EventsOf<E> = Pin<Box<dyn Stream<Item = Result<E, DockerError>> + Send>>;
pub type EventStream = EventsOf<DockerEvent>;

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
        let negotiated = match docker {
            Ok(docker) => docker.negotiate_version().await,
            Err(error) => Err(error),
        };
        match negotiated {
            Ok(docker) => Ok(BollardApi { docker }),
            Err(source) => Err(DockerError::Connect {
                endpoint: host.to_string(),
                reason: Unreachable::diagnose(host, &source).await,
                source,
            }),
        }
    }
}

impl BollardApi {
    /// The client, for the other views of the same engine (Swarm's).
    pub(crate) fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The engine's events of these types from a few seconds before the
    /// call on. bollard asks the engine only when the stream is first
    /// polled, after the provider has listed; without `since`, what
    /// changed during the list would be missed until the next relist (a
    /// container started then stayed a 503). An event seen twice costs one
    /// inspect more. The time is this machine's clock: an engine elsewhere
    /// whose clock lags by more than the margin is caught up by the relist.
    pub(crate) fn events_of(
        &self,
        types: &[&str],
    ) -> impl Stream<Item = Result<bollard::models::EventMessage, DockerError>> + Send + 'static
    {
        let filters = HashMap::from([("type", types.to_vec())]);
        let options = EventsOptionsBuilder::new()
            .filters(&filters)
            .since(&unix_time_string(
                SystemTime::now()
                    .checked_sub(EVENTS_REPLAYED)
                    .unwrap_or(UNIX_EPOCH),
            ))
            .build();
        self.docker
            .events(Some(options))
            .map(|message| message.map_err(DockerError::Api))
    }
}

/// How far before a subscription the engine replays events: the time a
/// list and its inspects take, and a clock a little off.
const EVENTS_REPLAYED: Duration = Duration::from_secs(5);

/// A time as the Engine API's `since` takes it: Unix seconds and nanoseconds.
fn unix_time_string(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!(
        "{}.{:09}",
        since_epoch.as_secs(),
        since_epoch.subsec_nanos()
    )
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
        let stream = self
            .events_of(&["container", "network"])
            .filter_map(|message| async move { message.map(event_from_message).transpose() });
        Box::pin(stream)
    }
}

/// The event as a hint, or `None` for the many events that change no route
/// (exec_create from health checks, attach, resize...).
pub(crate) fn event_from_message(message: bollard::models::EventMessage) -> Option<DockerEvent> {
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
    use std::path::{Path, PathBuf};

    fn unix(path: &Path) -> DockerHost {
        DockerHost::Unix(path.to_owned())
    }

    #[test]
    fn since_is_unix_seconds_with_nanoseconds() {
        let time = UNIX_EPOCH + Duration::new(1_700_000_000, 5_000);
        assert_eq!(unix_time_string(time), "1700000000.000005000");
        assert_eq!(unix_time_string(UNIX_EPOCH), "0.000000000");
    }

    fn io_failure(kind: io::ErrorKind) -> bollard::errors::Error {
        bollard::errors::Error::IOError {
            err: io::Error::from(kind),
        }
    }

    /// What connecting to `host` fails with, and the error's text.
    async fn unreachable(host: &DockerHost) -> (Unreachable, String) {
        match BollardApi::connect(host).await {
            Ok(_) => panic!("{host} answered"),
            Err(error) => {
                let text = error.to_string();
                match error {
                    DockerError::Connect { reason, .. } => (reason, text),
                    other => panic!("not a connect error: {other}"),
                }
            }
        }
    }

    #[test]
    fn each_reason_says_what_to_do() {
        let cases = [
            (
                Unreachable::NoSocket,
                "no such file (is the socket mounted?)",
            ),
            (
                Unreachable::PermissionDenied {
                    socket_group: Some(998),
                },
                "permission denied (run with --group-add 998, the socket's group, or as root)",
            ),
            (
                Unreachable::PermissionDenied { socket_group: None },
                "permission denied (run with --group-add <the socket's group id> or as root)",
            ),
            (
                Unreachable::Refused,
                "connection refused (is the Docker engine running?)",
            ),
            (
                Unreachable::NameNotFound("docker.internal".into()),
                "name not found: docker.internal does not resolve",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
        }
    }

    #[tokio::test]
    async fn io_errors_are_found_by_their_kind() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        std::fs::write(&socket, "").unwrap();
        let group = std::fs::metadata(&socket).unwrap().gid();
        let host = unix(&socket);
        let cases = [
            (io::ErrorKind::NotFound, Unreachable::NoSocket),
            (
                io::ErrorKind::PermissionDenied,
                Unreachable::PermissionDenied {
                    socket_group: Some(group),
                },
            ),
            (io::ErrorKind::ConnectionRefused, Unreachable::Refused),
            (io::ErrorKind::TimedOut, Unreachable::TimedOut),
        ];
        for (kind, expected) in cases {
            let diagnosed = Unreachable::diagnose(&host, &io_failure(kind)).await;
            assert_eq!(diagnosed, expected, "{kind:?}");
        }
        let missing = bollard::errors::Error::SocketNotFoundError("/nowhere".into());
        assert_eq!(
            Unreachable::diagnose(&host, &missing).await,
            Unreachable::NoSocket
        );
    }

    #[tokio::test]
    async fn a_missing_socket_is_named_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let (reason, text) = unreachable(&unix(&socket)).await;
        assert_eq!(reason, Unreachable::NoSocket);
        assert_eq!(
            text,
            format!(
                "can't reach Docker at unix://{}: no such file (is the socket mounted?)",
                socket.display()
            )
        );
    }

    #[tokio::test]
    async fn a_socket_nothing_listens_on_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        // The file stays after its listener is gone.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let (reason, _) = unreachable(&unix(&socket)).await;
        assert_eq!(reason, Unreachable::Refused);
    }

    #[tokio::test]
    async fn a_tcp_port_nothing_listens_on_refuses() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = DockerHost::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let (reason, text) = unreachable(&host).await;
        assert_eq!(reason, Unreachable::Refused);
        assert!(text.starts_with(&format!("can't reach Docker at tcp://127.0.0.1:{port}: ")));
    }

    #[tokio::test]
    async fn a_socket_without_permission_names_its_group() {
        if running_as_root() {
            // Root connects whatever the socket's mode: nothing to see.
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let socket: PathBuf = dir.path().join("docker.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o000)).unwrap();
        let group = std::fs::metadata(&socket).unwrap().gid();
        let (reason, _) = unreachable(&unix(&socket)).await;
        assert_eq!(
            reason,
            Unreachable::PermissionDenied {
                socket_group: Some(group)
            }
        );
    }

    fn running_as_root() -> bool {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1))
                == Some("0")
        })
    }

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
