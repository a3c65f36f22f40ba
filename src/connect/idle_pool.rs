//! Idle HTTP/1.1 upstream connections kept for the next request, owned by
//! one worker thread: no lock, no channel, no task per connection. A
//! request checks a connection out (the most recently used first: it is the
//! likeliest to be alive, and the others age out) and checks it back in once
//! its response has been read to the end.
//!
//! A kept connection holds no buffer. Before one is handed out it is asked,
//! without waiting, whether it is still usable (`Reusable`): an upstream
//! that closed it, sent bytes nobody asked for, or whose address departed
//! (`UpstreamConnection` reads as closed then) has it dropped, so a request
//! is rarely written into a connection already dead. Connections idle for
//! longer than the idle timeout are dropped when met, and by `sweep`.

use std::collections::HashMap;
use std::hash::Hash;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, ReadBuf};

use super::connection::UpstreamConnection;

/// Whether a kept connection can carry another request, asked without waiting.
pub trait Reusable {
    fn is_reusable(&mut self) -> bool;
}

/// A connection with nothing to read is reusable: one that reads as ended
/// (closed by the upstream, or retired) or has bytes waiting (an answer to
/// nothing) is not.
impl Reusable for UpstreamConnection {
    fn is_reusable(&mut self) -> bool {
        self.is_quiet().unwrap_or_else(|| nothing_to_read(self))
    }
}

/// Polls one read with a waker that does nothing: `Pending` means the
/// connection is quiet. The byte that may be read is lost, but then the
/// connection is dropped anyway.
pub fn nothing_to_read<C: AsyncRead + Unpin>(connection: &mut C) -> bool {
    let mut byte = [0; 1];
    let mut buffer = ReadBuf::new(&mut byte);
    let mut context = Context::from_waker(Waker::noop());
    matches!(
        Pin::new(connection).poll_read(&mut context, &mut buffer),
        Poll::Pending
    )
}

/// How the pool keeps connections.
#[derive(Debug, Clone, Copy)]
pub struct IdleLimits {
    /// Dropped once unused for this long.
    pub idle_timeout: Duration,
    /// The most idle connections kept per destination; more are closed.
    pub most_per_key: usize,
}

/// One worker's idle connections, by destination.
pub struct IdlePool<K, C> {
    limits: IdleLimits,
    /// Hashed with foldhash, not std's SipHash: looked up twice per request
    /// (check out, check in), where SipHash of an address cost about as
    /// much as the rest of the pool's work. The keys are upstream
    /// addresses, which a client does not choose, so no defence against
    /// crafted collisions is needed here.
    idle: HashMap<K, Vec<Kept<C>>, foldhash::fast::RandomState>,
}

struct Kept<C> {
    connection: C,
    since: Instant,
}

impl<K: Hash + Eq, C: Reusable> IdlePool<K, C> {
    pub fn new(limits: IdleLimits) -> IdlePool<K, C> {
        IdlePool {
            limits,
            idle: HashMap::default(),
        }
    }

    /// The most recently kept usable connection to `key`; the stale ones
    /// met on the way are dropped. A key left with none keeps its (empty)
    /// list: a request checks its connection out and back in, and removing
    /// the key in between would cost an allocation and two map updates per
    /// request; `sweep` removes it if nothing comes back.
    pub fn check_out(&mut self, key: &K, now: Instant) -> Option<C> {
        let kept = self.idle.get_mut(key)?;
        while let Some(mut candidate) = kept.pop() {
            if self.limits.fresh(candidate.since, now) && candidate.connection.is_reusable() {
                return Some(candidate.connection);
            }
        }
        None
    }

    /// Keeps `connection` for the next request to `key`, unless the key
    /// already has as many as the limit (then it is dropped, and closed).
    pub fn check_in(&mut self, key: K, connection: C, now: Instant) {
        let kept = self.idle.entry(key).or_default();
        if kept.len() < self.limits.most_per_key {
            kept.push(Kept {
                connection,
                since: now,
            });
        }
    }

    /// Drops every connection idle for too long or no longer usable;
    /// returns how many are kept.
    pub fn sweep(&mut self, now: Instant) -> usize {
        let limits = self.limits;
        self.idle.retain(|_, kept| {
            kept.retain_mut(|candidate| {
                limits.fresh(candidate.since, now) && candidate.connection.is_reusable()
            });
            !kept.is_empty()
        });
        self.len()
    }

    /// How many connections are kept, for every key.
    pub fn len(&self) -> usize {
        self.idle.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.idle.values().all(Vec::is_empty)
    }
}

impl IdleLimits {
    fn fresh(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) < self.idle_timeout
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connection as the pool sees it: a name, and whether it is usable.
    #[derive(Debug, PartialEq)]
    struct Fake {
        name: &'static str,
        usable: bool,
    }

    impl Reusable for Fake {
        fn is_reusable(&mut self) -> bool {
            self.usable
        }
    }

    fn fake(name: &'static str) -> Fake {
        Fake { name, usable: true }
    }

    const LIMITS: IdleLimits = IdleLimits {
        idle_timeout: Duration::from_secs(90),
        most_per_key: 2,
    };

    #[test]
    fn the_most_recently_kept_connection_is_checked_out_first() {
        let mut pool = IdlePool::new(LIMITS);
        let now = Instant::now();
        pool.check_in("a", fake("older"), now);
        pool.check_in("a", fake("newer"), now);
        pool.check_in("b", fake("other"), now);
        assert_eq!(pool.check_out(&"a", now), Some(fake("newer")));
        assert_eq!(pool.check_out(&"a", now), Some(fake("older")));
        assert_eq!(pool.check_out(&"a", now), None);
        assert_eq!(pool.len(), 1, "b's is still kept");
    }

    #[test]
    fn unusable_and_expired_connections_are_dropped_not_handed_out() {
        let mut pool = IdlePool::new(LIMITS);
        let start = Instant::now();
        pool.check_in("a", fake("expired"), start);
        let later = start + Duration::from_secs(60);
        pool.check_in(
            "a",
            Fake {
                name: "closed",
                usable: false,
            },
            later,
        );
        let now = start + Duration::from_secs(91);
        assert_eq!(pool.check_out(&"a", now), None);
        assert!(pool.is_empty());
    }

    #[test]
    fn a_key_keeps_its_list_between_a_check_out_and_the_check_in_until_a_sweep() {
        let mut pool = IdlePool::new(LIMITS);
        let now = Instant::now();
        pool.check_in("a", fake("one"), now);
        assert_eq!(pool.check_out(&"a", now), Some(fake("one")));
        assert!(pool.is_empty());
        assert!(
            pool.idle.get("a").is_some_and(|kept| kept.capacity() > 0),
            "the list stays, so checking the connection in allocates nothing"
        );
        assert_eq!(pool.sweep(now), 0);
        assert!(
            pool.idle.is_empty(),
            "a sweep removes keys with nothing kept"
        );
    }

    #[test]
    fn a_key_keeps_at_most_its_limit() {
        let mut pool = IdlePool::new(LIMITS);
        let now = Instant::now();
        for name in ["one", "two", "three"] {
            pool.check_in("a", fake(name), now);
        }
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.check_out(&"a", now), Some(fake("two")));
    }

    #[test]
    fn a_sweep_drops_what_expired_and_keeps_the_rest() {
        let mut pool = IdlePool::new(LIMITS);
        let start = Instant::now();
        pool.check_in("a", fake("old"), start);
        pool.check_in("b", fake("recent"), start + Duration::from_secs(60));
        assert_eq!(pool.sweep(start + Duration::from_secs(100)), 1);
        assert_eq!(
            pool.check_out(&"b", start + Duration::from_secs(100)),
            Some(fake("recent"))
        );
    }

    async fn connected_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// Waits until the kernel has delivered what the peer did (a FIN, bytes).
    async fn settle(client: &TcpStream) {
        tokio::time::timeout(Duration::from_secs(10), client.readable())
            .await
            .expect("the peer's doing arrives")
            .expect("readable");
    }

    #[tokio::test]
    async fn a_real_socket_is_reusable_while_quiet_and_not_once_closed_or_talking() {
        let (mut quiet, _server) = connected_pair().await;
        assert!(nothing_to_read(&mut quiet), "an open, quiet connection");

        let (mut closed, server) = connected_pair().await;
        drop(server);
        settle(&closed).await;
        assert!(!nothing_to_read(&mut closed), "closed by the upstream");

        let (mut talking, mut server) = connected_pair().await;
        server.write_all(b"HTTP/1.1 408 ").await.unwrap();
        settle(&talking).await;
        assert!(
            !nothing_to_read(&mut talking),
            "bytes nobody asked for (RFC 9112 §9.8: a server may send 408 before closing)"
        );
    }
}
