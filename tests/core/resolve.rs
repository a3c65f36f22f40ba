//! Name resolution against a real DNS server on loopback: the hickory client's
//! answers and error mapping, and SRV origins dialed over real TCP.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::net::{TcpListener, TcpStream};

use dockhand::resolve::srv::{dial, TierAttempts};
use dockhand::resolve::{
    CacheTtls, Dns, HickoryDns, LookupError, SrvConnection, SrvDialError, SrvRecord, SrvResolver,
};

use crate::dns_server::{srv, Behaviour, DnsServer, RecordType};

const OWNER: &str = "_app._tcp.test";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn srv_resolver(dns: &DnsServer) -> SrvResolver {
    let ttls = CacheTtls {
        min_ttl: Duration::from_secs(5),
        max_ttl: Duration::from_secs(60),
        negative_ttl: Duration::from_secs(5),
    };
    SrvResolver::new(Arc::new(HickoryDns::with_server(dns.address())), ttls)
}

/// A port that accepts (and drops) every connection.
async fn open_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    port
}

/// A port nothing listens on: bound, then let go.
async fn refused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

async fn dial_tcp(
    resolver: &SrvResolver,
    rng: &mut StdRng,
) -> Result<SrvConnection<TcpStream>, SrvDialError> {
    dial(
        resolver,
        OWNER,
        CONNECT_TIMEOUT,
        rng,
        |address: SocketAddr, _| TcpStream::connect(address),
    )
    .await
}

#[tokio::test]
async fn a_changed_address_is_seen_by_the_next_lookup() {
    let dns = DnsServer::start().await;
    let client = HickoryDns::with_server(dns.address());
    dns.set_a("app.test", ["127.0.0.1"], 300);
    let answer = client.lookup_ip("app.test").await.unwrap();
    assert_eq!(answer.addresses, [ip("127.0.0.1")]);
    assert_eq!(answer.ttl, Duration::from_secs(300));

    dns.set_a("app.test", ["127.0.0.2", "127.0.0.3"], 10);
    let answer = client.lookup_ip("app.test").await.unwrap();
    assert_eq!(answer.addresses, [ip("127.0.0.2"), ip("127.0.0.3")]);
    assert_eq!(answer.ttl, Duration::from_secs(10));
    assert_eq!(dns.queries("app.test", RecordType::A), 2);
    assert_eq!(dns.queries("app.test", RecordType::AAAA), 2);
}

#[tokio::test]
async fn ipv4_and_ipv6_addresses_are_merged_with_the_smallest_ttl() {
    let dns = DnsServer::start().await;
    let client = HickoryDns::with_server(dns.address());
    dns.set_a("dual.test", ["127.0.0.1"], 30);
    dns.set_aaaa("dual.test", ["::1"], 20);
    let answer = client.lookup_ip("dual.test").await.unwrap();
    assert_eq!(answer.addresses, [ip("127.0.0.1"), ip("::1")]);
    assert_eq!(answer.ttl, Duration::from_secs(20));

    dns.set_aaaa("v6.test", ["::2"], 30);
    let answer = client.lookup_ip("v6.test").await.unwrap();
    assert_eq!(answer.addresses, [ip("::2")]);
}

/// Takes the client's full timeout (two attempts of 2 s) for the silent name.
#[tokio::test]
async fn servfail_refused_and_no_reply_are_failures() {
    let dns = DnsServer::start().await;
    let client = HickoryDns::with_server(dns.address());
    let cases = [
        ("servfail.test", Behaviour::ServFail),
        ("refused.test", Behaviour::Refused),
        ("silent.test", Behaviour::NoReply),
    ];
    for (name, behaviour) in cases {
        dns.set_a(name, ["127.0.0.1"], 30);
        dns.set_srv(name, [srv(1, 1, 80, "node.test")], 30);
        dns.set_behaviour(name, behaviour);
    }
    let lookups = cases.map(|(name, _)| {
        let client = &client;
        async move {
            let (ip, srv) = futures_util::join!(client.lookup_ip(name), client.lookup_srv(name));
            (name, ip, srv)
        }
    });
    for (name, ip, srv) in join_all(lookups).await {
        assert!(matches!(ip, Err(LookupError::Failed(_))), "{name}: {ip:?}");
        assert!(
            matches!(srv, Err(LookupError::Failed(_))),
            "{name}: {srv:?}"
        );
    }
}

#[tokio::test]
async fn nxdomain_and_empty_answers_are_not_found() {
    let dns = DnsServer::start().await;
    let client = HickoryDns::with_server(dns.address());
    dns.set_a("gone.test", ["127.0.0.1"], 30);
    dns.set_behaviour("gone.test", Behaviour::NxDomain);
    dns.set_empty("empty.test");
    dns.set_a("only-a.test", ["127.0.0.1"], 30);
    for name in ["never-set.test", "gone.test", "empty.test"] {
        assert_eq!(
            client.lookup_ip(name).await,
            Err(LookupError::NotFound),
            "{name}"
        );
        assert_eq!(
            client.lookup_srv(name).await,
            Err(LookupError::NotFound),
            "{name}"
        );
    }
    assert_eq!(
        client.lookup_srv("only-a.test").await,
        Err(LookupError::NotFound)
    );
    assert!(client.lookup_ip("only-a.test").await.is_ok());
}

#[tokio::test]
async fn an_srv_answer_carries_its_additional_section() {
    let dns = DnsServer::start().await;
    let client = HickoryDns::with_server(dns.address());
    dns.set_srv(
        OWNER,
        [
            srv(10, 5, 8080, "node-1.test"),
            srv(20, 0, 8081, "node-2.test"),
        ],
        40,
    );
    dns.set_additional(
        OWNER,
        [("node-1.test", "127.0.0.7"), ("node-2.test", "::1")],
    );
    let answer = client.lookup_srv(OWNER).await.unwrap();
    assert_eq!(
        answer.records,
        [
            SrvRecord {
                priority: 10,
                weight: 5,
                port: 8080,
                target: "node-1.test".into()
            },
            SrvRecord {
                priority: 20,
                weight: 0,
                port: 8081,
                target: "node-2.test".into()
            },
        ]
    );
    assert_eq!(
        answer.additional,
        [
            ("node-1.test".to_owned(), ip("127.0.0.7")),
            ("node-2.test".to_owned(), ip("::1"))
        ]
    );
    assert_eq!(answer.ttl, Duration::from_secs(40));

    dns.set_srv(OWNER, [srv(0, 0, 0, ".")], 40);
    let answer = client.lookup_srv(OWNER).await.unwrap();
    assert_eq!(answer.records[0].target, ".");
}

#[tokio::test]
async fn the_lowest_priority_tier_is_dialed() {
    let dns = DnsServer::start().await;
    let (preferred, backup) = (open_port().await, open_port().await);
    dns.set_srv(
        OWNER,
        [
            srv(20, 1, backup, "backup.test"),
            srv(10, 1, preferred, "main.test"),
        ],
        30,
    );
    dns.set_a("main.test", ["127.0.0.1"], 30);
    dns.set_a("backup.test", ["127.0.0.1"], 30);
    let resolver = srv_resolver(&dns);
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..5 {
        let connection = dial_tcp(&resolver, &mut rng).await.unwrap();
        assert_eq!(connection.target, "main.test");
        assert_eq!(connection.address.port(), preferred);
        assert_eq!(connection.stream.peer_addr().unwrap(), connection.address);
    }
    // Cached: one SRV query and one per address type for five dials.
    assert_eq!(dns.queries(OWNER, RecordType::SRV), 1);
    assert_eq!(dns.queries("main.test", RecordType::A), 1);
    assert_eq!(dns.queries("backup.test", RecordType::A), 0);
}

#[tokio::test]
async fn refusing_targets_fail_over_to_the_next_tier() {
    let dns = DnsServer::start().await;
    let (refused_1, refused_2, backup) = (
        refused_port().await,
        refused_port().await,
        open_port().await,
    );
    dns.set_srv(
        OWNER,
        [
            srv(10, 1, refused_1, "main-1.test"),
            srv(10, 1, refused_2, "main-2.test"),
            srv(20, 1, backup, "backup.test"),
        ],
        30,
    );
    for name in ["main-1.test", "main-2.test", "backup.test"] {
        dns.set_a(name, ["127.0.0.1"], 30);
    }
    let resolver = srv_resolver(&dns);
    let connection = dial_tcp(&resolver, &mut StdRng::seed_from_u64(1))
        .await
        .unwrap();
    assert_eq!(connection.target, "backup.test");
    assert_eq!(connection.address.port(), backup);
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

    dns.set_srv(OWNER, [srv(10, 1, refused_1, "main-1.test")], 30);
    let resolver = srv_resolver(&dns);
    match dial_tcp(&resolver, &mut StdRng::seed_from_u64(1)).await {
        Err(SrvDialError::AllFailed(error)) => {
            assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn weights_share_the_dials() {
    let dns = DnsServer::start().await;
    let (light, heavy) = (open_port().await, open_port().await);
    dns.set_srv(
        OWNER,
        [
            srv(10, 1, light, "light.test"),
            srv(10, 3, heavy, "heavy.test"),
        ],
        30,
    );
    dns.set_additional(
        OWNER,
        [("light.test", "127.0.0.1"), ("heavy.test", "127.0.0.1")],
    );
    let resolver = srv_resolver(&dns);
    let mut rng = StdRng::seed_from_u64(2782);
    let dials = 400;
    let mut heavy_dials = 0;
    for _ in 0..dials {
        let connection = dial_tcp(&resolver, &mut rng).await.unwrap();
        if connection.address.port() == heavy {
            heavy_dials += 1;
        }
    }
    let share = f64::from(heavy_dials) / f64::from(dials);
    assert!((share - 0.75).abs() < 0.07, "heavy share {share}");
}

#[tokio::test]
async fn addresses_in_the_additional_section_need_no_lookup() {
    let dns = DnsServer::start().await;
    let port = open_port().await;
    dns.set_srv(OWNER, [srv(10, 1, port, "node.test")], 30);
    dns.set_additional(OWNER, [("node.test", "127.0.0.1")]);
    let resolver = srv_resolver(&dns);
    let connection = dial_tcp(&resolver, &mut StdRng::seed_from_u64(1))
        .await
        .unwrap();
    assert_eq!(connection.address, SocketAddr::new(ip("127.0.0.1"), port));
    assert_eq!(dns.queries("node.test", RecordType::A), 0);
    assert_eq!(dns.queries("node.test", RecordType::AAAA), 0);
}

#[tokio::test]
async fn a_dot_target_or_a_missing_owner_is_unavailable() {
    let dns = DnsServer::start().await;
    dns.set_srv(OWNER, [srv(0, 0, 0, ".")], 30);
    let resolver = srv_resolver(&dns);
    let mut rng = StdRng::seed_from_u64(1);
    assert!(matches!(
        dial_tcp(&resolver, &mut rng).await,
        Err(SrvDialError::Unavailable)
    ));

    dns.remove(OWNER);
    let resolver = srv_resolver(&dns);
    assert!(matches!(
        dial_tcp(&resolver, &mut rng).await,
        Err(SrvDialError::Unavailable)
    ));
    dns.set_behaviour(OWNER, Behaviour::ServFail);
    let resolver = srv_resolver(&dns);
    assert!(matches!(
        dial_tcp(&resolver, &mut rng).await,
        Err(SrvDialError::LookupFailed(_))
    ));
}

#[tokio::test]
async fn concurrent_dials_share_one_query() {
    let dns = DnsServer::start().await;
    let port = open_port().await;
    dns.set_srv(OWNER, [srv(10, 1, port, "node.test")], 30);
    dns.set_a("node.test", ["127.0.0.1"], 30);
    let resolver = srv_resolver(&dns);
    let dials = (0..10).map(|seed| {
        let resolver = resolver.clone();
        async move { dial_tcp(&resolver, &mut StdRng::seed_from_u64(seed)).await }
    });
    for connection in join_all(dials).await {
        assert_eq!(connection.unwrap().address.port(), port);
    }
    assert_eq!(dns.queries(OWNER, RecordType::SRV), 1);
    assert_eq!(dns.queries("node.test", RecordType::A), 1);
    let lookups = resolver.stats().lookups;
    assert_eq!((lookups.miss, lookups.hit), (10, 0));
}
