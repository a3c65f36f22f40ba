use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::{self, BoxFuture, FutureExt};
use rand::rngs::StdRng;

use super::*;
use crate::resolve::srv::cache::CacheTtls;
use crate::resolve::srv::fake_dns::{ip_answer, srv_answer, FakeDns};
use crate::resolve::srv::TierAttempts;
use crate::resolve::Dns;

const OWNER: &str = "_app._tcp.example.internal";
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy)]
enum Peer {
    Accepts,
    Refuses,
    NeverAnswers,
}

/// A connector over scripted addresses (unlisted ones refuse); the "stream"
/// is the address reached. Remembers each call with its time and share.
#[derive(Clone, Default)]
struct FakeNetwork {
    peers: HashMap<SocketAddr, Peer>,
    calls: Arc<Mutex<Vec<(SocketAddr, Duration, Duration)>>>,
}

impl FakeNetwork {
    fn with(mut self, address: &str, peer: Peer) -> FakeNetwork {
        self.peers.insert(address.parse().unwrap(), peer);
        self
    }

    /// `(address, time given, when since the start)` per connect call.
    fn calls(&self) -> Vec<(SocketAddr, Duration, Duration)> {
        self.calls.lock().unwrap().clone()
    }

    fn connector(
        &self,
        started: Instant,
    ) -> impl FnMut(SocketAddr, Duration) -> BoxFuture<'static, io::Result<SocketAddr>> {
        let network = self.clone();
        move |address, time| {
            network
                .calls
                .lock()
                .unwrap()
                .push((address, time, started.elapsed()));
            match network
                .peers
                .get(&address)
                .copied()
                .unwrap_or(Peer::Refuses)
            {
                Peer::Accepts => future::ready(Ok(address)).boxed(),
                Peer::Refuses => {
                    future::ready(Err(io::ErrorKind::ConnectionRefused.into())).boxed()
                }
                Peer::NeverAnswers => future::pending().boxed(),
            }
        }
    }
}

fn resolver(dns: &Arc<FakeDns>) -> SrvResolver {
    let ttls = CacheTtls {
        min_ttl: Duration::from_secs(5),
        max_ttl: Duration::from_secs(60),
        negative_ttl: Duration::from_secs(5),
    };
    SrvResolver::new(Arc::clone(dns) as Arc<dyn Dns>, ttls)
}

fn ttl() -> Duration {
    Duration::from_secs(30)
}

async fn dial_with(
    resolver: &SrvResolver,
    network: &FakeNetwork,
) -> Result<SrvConnection<SocketAddr>, SrvDialError> {
    let mut rng = StdRng::seed_from_u64(2782);
    dial(
        resolver,
        OWNER,
        TIMEOUT,
        &mut rng,
        network.connector(Instant::now()),
    )
    .await
}

fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[tokio::test(start_paused = true)]
async fn the_lowest_priority_tier_is_dialed_first() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(
        OWNER,
        Ok(srv_answer(
            &[(20, 1, 8002, "b.test"), (10, 1, 8001, "a.test")],
            ttl(),
        )),
    );
    dns.set_ip("a.test", Ok(ip_answer(&["10.0.0.1"], ttl())));
    dns.set_ip("b.test", Ok(ip_answer(&["10.0.0.2"], ttl())));
    let network = FakeNetwork::default()
        .with("10.0.0.1:8001", Peer::Accepts)
        .with("10.0.0.2:8002", Peer::Accepts);
    let resolver = resolver(&dns);
    let connection = dial_with(&resolver, &network).await.unwrap();
    assert_eq!(connection.target, "a.test");
    assert_eq!(connection.address, addr("10.0.0.1:8001"));
    assert_eq!(connection.stream, addr("10.0.0.1:8001"));
    assert_eq!(
        resolver.stats().dial_attempts,
        [TierAttempts {
            tier: 0,
            success: 1,
            failure: 0
        }]
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_tier_fails_over_to_the_next() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(
        OWNER,
        Ok(srv_answer(
            &[
                (10, 1, 8001, "a.test"),
                (10, 1, 8001, "b.test"),
                (20, 1, 8002, "c.test"),
            ],
            ttl(),
        )),
    );
    dns.set_ip("a.test", Ok(ip_answer(&["10.0.0.1"], ttl())));
    dns.set_ip("b.test", Ok(ip_answer(&["10.0.0.2"], ttl())));
    dns.set_ip("c.test", Ok(ip_answer(&["10.0.0.3"], ttl())));
    let network = FakeNetwork::default().with("10.0.0.3:8002", Peer::Accepts);
    let resolver = resolver(&dns);
    let connection = dial_with(&resolver, &network).await.unwrap();
    assert_eq!(connection.target, "c.test");
    let mut tried: Vec<_> = network.calls().iter().map(|call| call.0).collect();
    assert_eq!(tried.pop(), Some(addr("10.0.0.3:8002")));
    tried.sort();
    assert_eq!(tried, [addr("10.0.0.1:8001"), addr("10.0.0.2:8001")]);
    assert_eq!(
        resolver.stats().dial_attempts,
        [
            TierAttempts {
                tier: 0,
                success: 0,
                failure: 2
            },
            TierAttempts {
                tier: 1,
                success: 1,
                failure: 0
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn each_target_and_address_gets_its_share_of_the_time_left() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(
        OWNER,
        Ok(srv_answer(
            &[(1, 1, 80, "slow.test"), (2, 1, 80, "ok.test")],
            ttl(),
        )),
    );
    dns.set_ip("slow.test", Ok(ip_answer(&["10.0.0.1", "10.0.0.2"], ttl())));
    dns.set_ip("ok.test", Ok(ip_answer(&["10.0.0.3"], ttl())));
    let network = FakeNetwork::default()
        .with("10.0.0.1:80", Peer::NeverAnswers)
        .with("10.0.0.2:80", Peer::NeverAnswers)
        .with("10.0.0.3:80", Peer::Accepts);
    let resolver = resolver(&dns);
    let connection = dial_with(&resolver, &network).await.unwrap();
    assert_eq!(connection.target, "ok.test");
    assert_eq!(
        network.calls(),
        [
            (addr("10.0.0.1:80"), millis(2_500), millis(0)),
            (addr("10.0.0.2:80"), millis(2_500), millis(2_500)),
            (addr("10.0.0.3:80"), millis(5_000), millis(5_000)),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_target_lookup_uses_only_that_target_s_share() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(
        OWNER,
        Ok(srv_answer(
            &[(1, 1, 80, "slow.test"), (2, 1, 80, "ok.test")],
            ttl(),
        )),
    );
    dns.set_ip("slow.test", Ok(ip_answer(&["10.0.0.1"], ttl())));
    dns.set_delay("slow.test", Duration::from_secs(60));
    dns.set_ip("ok.test", Ok(ip_answer(&["10.0.0.3"], ttl())));
    let network = FakeNetwork::default()
        .with("10.0.0.1:80", Peer::Accepts)
        .with("10.0.0.3:80", Peer::Accepts);
    let resolver = resolver(&dns);
    let connection = dial_with(&resolver, &network).await.unwrap();
    assert_eq!(connection.target, "ok.test");
    assert_eq!(
        network.calls(),
        [(addr("10.0.0.3:80"), millis(5_000), millis(5_000))]
    );
}

#[tokio::test(start_paused = true)]
async fn addresses_sent_with_the_answer_and_ip_literals_need_no_lookup() {
    let dns = Arc::new(FakeDns::default());
    let mut answer = srv_answer(&[(1, 1, 80, "Node.test"), (2, 1, 81, "10.0.0.7")], ttl());
    answer.additional = vec![("node.test".into(), "10.0.0.9".parse().unwrap())];
    dns.set_srv(OWNER, Ok(answer));
    let network = FakeNetwork::default().with("10.0.0.7:81", Peer::Accepts);
    let resolver = resolver(&dns);
    let connection = dial_with(&resolver, &network).await.unwrap();
    assert_eq!(connection.address, addr("10.0.0.7:81"));
    let tried: Vec<_> = network.calls().iter().map(|call| call.0).collect();
    assert_eq!(tried, [addr("10.0.0.9:80"), addr("10.0.0.7:81")]);
    assert_eq!(dns.ip_calls("Node.test") + dns.ip_calls("node.test"), 0);
    assert_eq!(dns.ip_calls("10.0.0.7"), 0);
}

#[tokio::test(start_paused = true)]
async fn no_targets_is_unavailable_and_a_failed_lookup_says_so() {
    let dns = Arc::new(FakeDns::default());
    let resolver = resolver(&dns);
    let network = FakeNetwork::default();
    dns.set_srv(OWNER, Err(LookupError::NotFound));
    assert!(matches!(
        dial_with(&resolver, &network).await,
        Err(SrvDialError::Unavailable)
    ));

    let dns = Arc::new(FakeDns::default());
    let resolver = self::resolver(&dns);
    dns.set_srv(OWNER, Ok(srv_answer(&[(0, 0, 0, ".")], ttl())));
    assert!(matches!(
        dial_with(&resolver, &network).await,
        Err(SrvDialError::Unavailable)
    ));

    let dns = Arc::new(FakeDns::default());
    let resolver = self::resolver(&dns);
    dns.set_srv(OWNER, Err(LookupError::Failed("SERVFAIL".into())));
    assert!(matches!(
        dial_with(&resolver, &network).await,
        Err(SrvDialError::LookupFailed(reason)) if reason == "SERVFAIL"
    ));
    assert!(network.calls().is_empty());
}

#[tokio::test(start_paused = true)]
async fn every_target_refusing_is_all_failed_with_the_last_error() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(
        OWNER,
        Ok(srv_answer(
            &[(1, 1, 80, "10.0.0.1"), (2, 1, 80, "gone.test")],
            ttl(),
        )),
    );
    let resolver = resolver(&dns);
    let network = FakeNetwork::default();
    match dial_with(&resolver, &network).await {
        Err(SrvDialError::AllFailed(error)) => {
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
            assert!(error.to_string().contains("gone.test"), "{error}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(network.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_owner_lookup_longer_than_the_timeout_times_out() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, Ok(srv_answer(&[(1, 1, 80, "10.0.0.1")], ttl())));
    dns.set_delay(OWNER, Duration::from_secs(30));
    let resolver = resolver(&dns);
    let started = Instant::now();
    assert!(matches!(
        dial_with(&resolver, &FakeNetwork::default()).await,
        Err(SrvDialError::TimedOut)
    ));
    assert_eq!(started.elapsed(), TIMEOUT);
}

#[tokio::test(start_paused = true)]
async fn a_fixed_seed_gives_a_fixed_order() {
    let dns = Arc::new(FakeDns::default());
    let records: Vec<_> = (0..8u16)
        .map(|n| (1, 1, 80 + n, "10.0.0.1"))
        .collect::<Vec<_>>();
    dns.set_srv(OWNER, Ok(srv_answer(&records, ttl())));
    let resolver = resolver(&dns);
    let network = FakeNetwork::default();
    let _ = dial_with(&resolver, &network).await;
    let first = network.calls();
    let network = FakeNetwork::default();
    let _ = dial_with(&resolver, &network).await;
    assert_eq!(first, network.calls());
    assert_eq!(first.len(), 8);
}
