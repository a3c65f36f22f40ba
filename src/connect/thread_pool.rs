//! A worker thread's idle upstream HTTP/1.1 connections, per address: the
//! own exchange checks one out for a request and its response body checks
//! it back in once the body has ended whole. Each thread keeps its own, so
//! a request never waits on another thread for a connection; a sweeper
//! task closes the connections that are dead or idle too long while the
//! thread keeps any.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::UpstreamConnection;
use super::idle_pool::{IdleLimits, IdlePool};
use crate::sync::SpinLock;

/// How the pool keeps connections: as long as hyper's pool did, and as many
/// per address as requests to it are in flight at once up to a bound on
/// descriptors. Fewer than the requests in flight would close and open
/// connections on every cycle: with 256 at 500 clients, a sixth less
/// throughput in the benchmark.
const IDLE_LIMITS: IdleLimits = IdleLimits {
    idle_timeout: Duration::from_secs(90),
    most_per_key: 4096,
};

/// How often a thread's idle connections are looked at while it keeps
/// some: those whose upstream closed them, or whose address left the
/// routes (`UpstreamConnection` reads as closed then), or that were idle
/// too long, are closed within this.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

thread_local! {
    /// Shared with the thread's sweeper only, which holds it: dockhand's
    /// workers each run a current-thread runtime, where the sweeper stays
    /// on this thread, but on a multi-thread runtime (tests, a caller of
    /// the library) a task may be woken on another thread than the one
    /// that spawned it, and must still sweep this pool (the lock is never
    /// contended but by a sweep, once a second, and only then if the
    /// sweeper runs on another thread).
    static IDLE: Arc<SpinLock<ThreadPool>> = Arc::new(SpinLock::new(ThreadPool {
        idle: IdlePool::new(IDLE_LIMITS),
        sweeping: false,
    }));
}

/// A worker thread's idle connections, and whether its sweeper runs.
struct ThreadPool {
    idle: IdlePool<SocketAddr, UpstreamConnection>,
    sweeping: bool,
}

/// An idle connection to `address` kept by this thread, if any (the one
/// kept last: the likeliest to be still open).
pub(super) fn check_out(address: SocketAddr) -> Option<UpstreamConnection> {
    IDLE.with(|pool| pool.lock().idle.check_out(&address, Instant::now()))
}

/// Keeps `connection`, and starts the thread's sweeper if it is not running.
/// The sweeper is a task of the worker's own runtime that sweeps this
/// thread's pool (wherever it runs); it ends when nothing is kept, so an
/// idle worker has none.
pub(super) fn check_in(address: SocketAddr, connection: UpstreamConnection) {
    let start_sweeper = IDLE.with(|pool| {
        let mut kept = pool.lock();
        kept.idle.check_in(address, connection, Instant::now());
        (!std::mem::replace(&mut kept.sweeping, true)).then(|| pool.clone())
    });
    if let Some(pool) = start_sweeper {
        tokio::spawn(sweep_while_kept(pool));
    }
}

async fn sweep_while_kept(pool: Arc<SpinLock<ThreadPool>>) {
    loop {
        tokio::time::sleep(SWEEP_INTERVAL).await;
        let done = {
            let mut pool = pool.lock();
            let done = pool.idle.sweep(Instant::now()) == 0;
            pool.sweeping = !done;
            done
        };
        if done {
            return;
        }
    }
}
