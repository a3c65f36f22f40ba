//! The data path on every core: `--workers N` threads, each a tokio
//! current-thread runtime that accepts on listeners of its own (HTTP and
//! HTTPS) and serves the connections it accepted to their end, with
//! upstream pools of its own. Workers share only what `run` shares behind
//! `Arc` (the router, the endpoint registry, metrics, TLS state, DNS), so a
//! request never waits on another thread. This module owns starting the
//! workers, the listeners each one gets, and waiting for them to drain; the
//! control side (providers, health checks, ACME, the admin listener) is not
//! its business and stays on the runtime that calls `run`, where a single
//! worker serves too.

use std::io;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::error::Error;
use crate::proxy::{self, ProxyState, ServerSettings, TlsTermination, Transport};

/// How many connections may wait to be accepted on one listener (what
/// tokio's `TcpListener::bind` asks for).
const LISTEN_BACKLOG: i32 = 1024;

/// A listener on `address` whose port further workers can bind too
/// (`SO_REUSEPORT`): the kernel then spreads new connections over the
/// workers' listeners, where one shared listener would wake every worker
/// for each connection. The option is set after binding, so a port that
/// another process holds, even with `SO_REUSEPORT`, is refused as in use
/// instead of being silently shared with it.
pub fn bind_shared_port(address: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = new_socket(address)?;
    socket.bind(&address.into())?;
    socket.set_reuse_port(true)?;
    listening(socket)
}

/// One more listener on the port of `first`, which has `SO_REUSEPORT`.
fn sibling_of(first: &std::net::TcpListener) -> io::Result<std::net::TcpListener> {
    let address = first.local_addr()?;
    let socket = new_socket(address)?;
    // Joining the port's group needs the option before binding.
    socket.set_reuse_port(true)?;
    if address.is_ipv6() {
        socket.set_only_v6(SockRef::from(first).only_v6()?)?;
    }
    socket.bind(&address.into())?;
    listening(socket)
}

fn new_socket(address: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    // As std and tokio do: a restart binds at once despite TIME_WAIT.
    socket.set_reuse_address(true)?;
    Ok(socket)
}

fn listening(socket: Socket) -> io::Result<std::net::TcpListener> {
    socket.listen(LISTEN_BACKLOG)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// `count` listeners for `listener`'s address, the given one first: the
/// others bind the same port when it has `SO_REUSEPORT`; without it they
/// are the same socket, which every worker then accepts from.
fn per_worker(
    listener: TcpListener,
    count: usize,
    scheme: &'static str,
) -> io::Result<Vec<std::net::TcpListener>> {
    let first = listener.into_std()?;
    let port_shared = SockRef::from(&first).reuse_port()?;
    if !port_shared && count > 1 {
        tracing::debug!(
            scheme,
            "the listener has no SO_REUSEPORT: the workers accept from the one socket"
        );
    }
    let mut listeners = Vec::with_capacity(count);
    for _ in 1..count {
        listeners.push(match port_shared {
            true => sibling_of(&first)?,
            false => first.try_clone()?,
        });
    }
    listeners.insert(0, first);
    Ok(listeners)
}

/// How long a thread of a runtime's blocking pool (the file reads of the
/// routes file's and the certificates directory's polls) waits for more
/// work before it ends. tokio's default, 10 s, outlasts the polls' intervals
/// (1 s and 2 s), so a process of one worker always had a second thread, and
/// while a process has more than one the kernel takes and drops a reference
/// on the file of every socket call it makes (`fdget`, `fput`), which it
/// skips for a process of one thread. A thread started for each poll costs
/// far less.
const BLOCKING_THREAD_KEEP_ALIVE: Duration = Duration::from_millis(10);

/// A runtime on the calling thread, with I/O and timers: each worker
/// thread's, and the binary's.
pub fn current_thread_runtime() -> io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_keep_alive(BLOCKING_THREAD_KEEP_ALIVE)
        .build()
}

/// What the workers serve: the listeners as given (they become the first
/// worker's), the state every request uses, and the server's settings.
pub struct DataPath {
    pub http: TcpListener,
    pub https: Option<(TcpListener, Arc<TlsTermination>)>,
    /// Each worker gets a copy with upstream pools of its own.
    pub state: Arc<ProxyState>,
    pub settings: ServerSettings,
}

/// The running workers.
pub struct Workers {
    /// One worker alone serves on the caller's runtime, as everything did
    /// before there were workers: the binary's is a current-thread one, so
    /// the process then runs on one thread, and a caller's paused clock
    /// (tests, the `request_head` fuzz target) governs its timeouts.
    here: Option<Worker<TcpListener>>,
    /// Each worker thread says there whether it drained within the
    /// shutdown timeout.
    drained: Vec<oneshot::Receiver<bool>>,
    stop: CancellationToken,
    /// Dropped with `run` before it returns (its caller gave up on it): the
    /// worker threads then stop at once, as the tasks of one runtime would.
    _abandon: DropGuard,
}

impl Workers {
    /// Starts `count` workers serving `path` until `stop` is cancelled, and
    /// returns once every worker thread listens; `serve` then serves.
    pub async fn start(
        count: NonZeroUsize,
        path: DataPath,
        stop: CancellationToken,
    ) -> Result<Workers, Error> {
        let abandon = CancellationToken::new();
        let mut workers = Workers {
            here: None,
            drained: Vec::with_capacity(count.get()),
            stop: stop.clone(),
            _abandon: abandon.clone().drop_guard(),
        };
        let count = count.get();
        if count == 1 {
            workers.here = Some(Worker {
                http: path.http,
                https: path.https,
                state: Arc::new(with_own_pools(&path.state)),
                settings: path.settings,
            });
            return Ok(workers);
        }
        let for_workers = |listener, scheme| {
            per_worker(listener, count, scheme)
                .map_err(|error| Error::WorkerListener { scheme, error })
        };
        let http = for_workers(path.http, "http")?;
        let (mut https, tls) = match path.https {
            Some((listener, tls)) => (Some(for_workers(listener, "https")?.into_iter()), Some(tls)),
            None => (None, None),
        };
        let mut started = Vec::with_capacity(count);
        for (index, http) in http.into_iter().enumerate() {
            let worker = Worker {
                http,
                https: https.as_mut().and_then(Iterator::next).zip(tls.clone()),
                state: Arc::new(with_own_pools(&path.state)),
                settings: path.settings.clone(),
            };
            let (listens, listening) = oneshot::channel();
            let (drained, drained_here) = oneshot::channel();
            let (stop, abandon) = (stop.clone(), abandon.clone());
            std::thread::Builder::new()
                .name(format!("dockhand-worker-{index}"))
                .spawn(move || worker.run(listens, drained, stop, abandon))
                .map_err(Error::Workers)?;
            started.push(listening);
            workers.drained.push(drained_here);
        }
        for listening in started {
            match listening.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => return Err(Error::Workers(error)),
                Err(_) => {
                    let error = io::Error::other("a worker thread ended at start");
                    return Err(Error::Workers(error));
                }
            }
        }
        Ok(workers)
    }

    /// Serves with the worker that runs here, if it is the only one, and
    /// waits until every worker has drained (each within the shutdown
    /// timeout of the stop); whether all of them finished their requests.
    pub async fn serve(self) -> bool {
        let here = async {
            match self.here {
                Some(worker) => worker.serve(self.stop).await,
                None => true,
            }
        };
        let threads = async {
            let mut all = true;
            for drained in self.drained {
                all &= drained.await.unwrap_or_else(|_| {
                    tracing::error!("a worker thread ended without draining");
                    false
                });
            }
            all
        };
        let (here_drained, threads_drained) = tokio::join!(here, threads);
        here_drained && threads_drained
    }
}

/// One worker's own parts: its listeners (`std`'s until its thread has a
/// runtime to register them with), and its state.
struct Worker<L> {
    http: L,
    https: Option<(L, Arc<TlsTermination>)>,
    state: Arc<ProxyState>,
    settings: ServerSettings,
}

impl Worker<std::net::TcpListener> {
    /// The worker thread: says on `listens` whether it could start, serves
    /// until `stop`, then says on `drained` whether it drained in time.
    fn run(
        self,
        listens: oneshot::Sender<io::Result<()>>,
        drained: oneshot::Sender<bool>,
        stop: CancellationToken,
        abandon: CancellationToken,
    ) {
        let runtime = match current_thread_runtime() {
            Ok(runtime) => runtime,
            Err(error) => {
                let _ = listens.send(Err(error));
                return;
            }
        };
        let finished = runtime.block_on(async move {
            let worker = match self.registered() {
                Ok(worker) => worker,
                Err(error) => {
                    let _ = listens.send(Err(error));
                    return false;
                }
            };
            let _ = listens.send(Ok(()));
            tokio::select! {
                drained = worker.serve(stop) => drained,
                () = abandon.cancelled() => false,
            }
        });
        let _ = drained.send(finished);
    }

    /// The listeners registered with the calling thread's runtime; moved,
    /// not copied, so that each closes when its accept loop stops.
    fn registered(self) -> io::Result<Worker<TcpListener>> {
        let https = match self.https {
            Some((listener, tls)) => Some((TcpListener::from_std(listener)?, tls)),
            None => None,
        };
        Ok(Worker {
            http: TcpListener::from_std(self.http)?,
            https,
            state: self.state,
            settings: self.settings,
        })
    }
}

impl Worker<TcpListener> {
    /// Serves until `stop`; both listeners stop accepting at once and drain
    /// side by side. Whether both drained within the timeout.
    async fn serve(self, stop: CancellationToken) -> bool {
        let Worker {
            http,
            https,
            state,
            settings,
        } = self;
        let https = {
            let (state, settings, stop) = (state.clone(), settings.clone(), stop.clone());
            async move {
                match https {
                    Some((listener, tls)) => {
                        let transport = Transport::Https(tls);
                        let stop = stop.cancelled_owned();
                        proxy::serve(listener, transport, state, settings, stop).await
                    }
                    None => true,
                }
            }
        };
        let http = proxy::serve(
            http,
            Transport::Http,
            state,
            settings,
            stop.cancelled_owned(),
        );
        let (http_drained, https_drained) = tokio::join!(http, https);
        http_drained && https_drained
    }
}

/// `state` with upstream pools of a worker's own; the rest is shared.
fn with_own_pools(state: &ProxyState) -> ProxyState {
    ProxyState {
        router: state.router.clone(),
        client: state.client.with_own_pools(),
        resolve_hints: state.resolve_hints.clone(),
        upstream_timeout: state.upstream_timeout,
        upstream_wait: state.upstream_wait,
        client_body_timeout: state.client_body_timeout,
        metrics: state.metrics.clone(),
        tls: state.tls.clone(),
        https_port: state.https_port,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The kernel's socket a descriptor refers to (`socket:[inode]`).
    fn socket_of(listener: &std::net::TcpListener) -> std::path::PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", listener.as_raw_fd())).unwrap()
    }

    #[test]
    fn a_port_held_by_another_listener_is_refused_though_workers_share_it() {
        let first = bind_shared_port("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = first.local_addr().unwrap();
        let error = bind_shared_port(address).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
        let sibling = sibling_of(&first).unwrap();
        assert_eq!(sibling.local_addr().unwrap(), address);
    }

    #[tokio::test]
    async fn each_worker_gets_a_socket_of_its_own_where_the_port_is_shared() {
        let given = bind_shared_port("127.0.0.1:0".parse().unwrap()).unwrap();
        let address = given.local_addr().unwrap();
        let listeners = per_worker(TcpListener::from_std(given).unwrap(), 3, "http").unwrap();
        let sockets: std::collections::BTreeSet<_> = listeners.iter().map(socket_of).collect();
        assert_eq!(sockets.len(), 3, "{sockets:?}");
        for listener in &listeners {
            assert_eq!(listener.local_addr().unwrap(), address);
        }
        let plain = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listeners = per_worker(plain, 2, "http").unwrap();
        assert_eq!(
            socket_of(&listeners[0]),
            socket_of(&listeners[1]),
            "one socket"
        );
    }
}
