use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::{advance, Instant};

use super::*;
use crate::metrics::Metrics;
use crate::resolve::srv::fake_dns::{srv_answer, FakeDns};

const OWNER: &str = "_app._tcp.example.internal";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ttls(min: u64, max: u64, negative: u64) -> CacheTtls {
    CacheTtls {
        min_ttl: secs(min),
        max_ttl: secs(max),
        negative_ttl: secs(negative),
    }
}

fn answer_on_port(port: u16, ttl: u64) -> Result<SrvAnswer, LookupError> {
    Ok(srv_answer(
        &[(1, 1, port, "node.example.internal")],
        secs(ttl),
    ))
}

fn resolver(dns: &Arc<FakeDns>, ttls: CacheTtls) -> SrvResolver {
    SrvResolver::new(Arc::clone(dns) as Arc<dyn Dns>, ttls)
}

async fn port(resolver: &SrvResolver) -> Result<u16, LookupError> {
    resolver
        .lookup_srv(OWNER)
        .await
        .map(|answer| answer.records[0].port)
}

#[tokio::test(start_paused = true)]
async fn a_short_ttl_is_kept_for_min_ttl() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 1));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    assert_eq!(port(&resolver).await, Ok(1));
    advance(Duration::from_millis(4_900)).await;
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(dns.srv_calls(OWNER), 1);
    advance(Duration::from_millis(200)).await;
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(dns.srv_calls(OWNER), 2);
    let counts = resolver.stats().lookups;
    assert_eq!((counts.miss, counts.hit), (2, 1));
}

#[tokio::test(start_paused = true)]
async fn a_long_ttl_is_cut_to_max_ttl() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 3600));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    port(&resolver).await.unwrap();
    advance(secs(59)).await;
    port(&resolver).await.unwrap();
    assert_eq!(dns.srv_calls(OWNER), 1);
    advance(secs(1)).await;
    port(&resolver).await.unwrap();
    assert_eq!(dns.srv_calls(OWNER), 2);
}

#[tokio::test(start_paused = true)]
async fn an_expired_answer_refreshed_in_time_is_used() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    port(&resolver).await.unwrap();
    advance(secs(10)).await;
    dns.set_srv(OWNER, answer_on_port(2, 10));
    dns.set_delay(OWNER, Duration::from_millis(400));
    let started = Instant::now();
    assert_eq!(port(&resolver).await, Ok(2));
    assert_eq!(started.elapsed(), Duration::from_millis(400));
    assert_eq!(resolver.stats().lookups.miss, 2);
}

#[tokio::test(start_paused = true)]
async fn a_slow_refresh_serves_the_last_answer_then_lands_in_the_background() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    port(&resolver).await.unwrap();
    advance(secs(10)).await;
    dns.set_srv(OWNER, answer_on_port(2, 10));
    dns.set_delay(OWNER, secs(2));
    let started = Instant::now();
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(started.elapsed(), REFRESH_WAIT);
    assert_eq!(resolver.stats().lookups.stale, 1);
    // The wait counts from the start of the refresh, not per lookup.
    advance(Duration::from_millis(300)).await;
    let started = Instant::now();
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(resolver.stats().lookups.stale, 2);
    // Nobody waits for the refresh any more; it still finishes.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(port(&resolver).await, Ok(2));
    assert_eq!(dns.srv_calls(OWNER), 2);
    assert_eq!(resolver.stats().lookups.hit, 1);
}

#[tokio::test(start_paused = true)]
async fn a_failing_lookup_keeps_the_last_answer_until_max_ttl() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    let resolver = resolver(&dns, ttls(5, 30, 5));
    port(&resolver).await.unwrap();
    dns.set_srv(OWNER, Err(LookupError::Failed("SERVFAIL".into())));

    advance(secs(10)).await; // t = 10: expired, the refresh fails
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(dns.srv_calls(OWNER), 2);
    advance(secs(4)).await; // t = 14: no retry before min_ttl
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(dns.srv_calls(OWNER), 2);
    advance(secs(1)).await; // t = 15: retried
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(dns.srv_calls(OWNER), 3);
    advance(secs(15)).await; // t = 30: max_ttl since the answer was looked up
    assert_eq!(
        port(&resolver).await,
        Err(LookupError::Failed("SERVFAIL".into()))
    );
    assert_eq!(dns.srv_calls(OWNER), 4);
    let counts = resolver.stats().lookups;
    assert_eq!((counts.miss, counts.stale, counts.error), (1, 3, 1));
}

#[tokio::test(start_paused = true)]
async fn a_failure_without_an_answer_is_retried_no_sooner_than_min_ttl() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, Err(LookupError::Failed("timed out".into())));
    let resolver = resolver(&dns, ttls(5, 30, 1));
    assert!(matches!(port(&resolver).await, Err(LookupError::Failed(_))));
    advance(secs(4)).await;
    assert!(matches!(port(&resolver).await, Err(LookupError::Failed(_))));
    assert_eq!(dns.srv_calls(OWNER), 1);
    dns.set_srv(OWNER, answer_on_port(7, 10));
    advance(secs(1)).await;
    assert_eq!(port(&resolver).await, Ok(7));
    assert_eq!(dns.srv_calls(OWNER), 2);
    let counts = resolver.stats().lookups;
    assert_eq!((counts.error, counts.negative, counts.miss), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn not_found_replaces_the_answer_at_once_and_is_kept_negative_ttl() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    let resolver = resolver(&dns, ttls(5, 60, 3));
    port(&resolver).await.unwrap();
    dns.set_srv(OWNER, Err(LookupError::NotFound));
    advance(secs(10)).await;
    assert_eq!(port(&resolver).await, Err(LookupError::NotFound));
    advance(secs(2)).await;
    assert_eq!(port(&resolver).await, Err(LookupError::NotFound));
    assert_eq!(dns.srv_calls(OWNER), 2);
    dns.set_srv(OWNER, answer_on_port(2, 10));
    advance(secs(1)).await;
    assert_eq!(port(&resolver).await, Ok(2));
    assert_eq!(dns.srv_calls(OWNER), 3);
    let counts = resolver.stats().lookups;
    assert_eq!((counts.error, counts.negative), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn concurrent_lookups_of_a_name_share_one_query() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    dns.set_delay(OWNER, secs(1));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    let ports = join_all((0..10).map(|_| port(&resolver))).await;
    assert!(ports.iter().all(|port| *port == Ok(1)), "{ports:?}");
    assert_eq!(dns.srv_calls(OWNER), 1);

    // An expired answer too: one refresh for all.
    advance(secs(10)).await;
    let ports = join_all((0..10).map(|_| port(&resolver))).await;
    assert!(ports.iter().all(|port| port.is_ok()), "{ports:?}");
    assert_eq!(dns.srv_calls(OWNER), 2);
}

#[tokio::test(start_paused = true)]
async fn names_are_bounded_dropping_expired_then_oldest() {
    let dns = Arc::new(FakeDns::default());
    for owner in ["b", "c", "d", "e"] {
        dns.set_srv(owner, answer_on_port(1, 60));
    }
    let resolver = SrvResolver::with_capacity(Arc::clone(&dns) as Arc<dyn Dns>, ttls(5, 60, 5), 3);
    resolver.lookup_srv("b").await.unwrap();
    // "a" does not exist: kept for negative_ttl, then expired.
    resolver.lookup_srv("a").await.unwrap_err();
    advance(secs(6)).await;
    resolver.lookup_srv("c").await.unwrap();
    resolver.lookup_srv("d").await.unwrap(); // full: "a" (expired) goes
    resolver.lookup_srv("b").await.unwrap();
    assert_eq!(dns.srv_calls("b"), 1);
    resolver.lookup_srv("e").await.unwrap(); // full: "b" (oldest) goes
    for owner in ["c", "d", "e"] {
        resolver.lookup_srv(owner).await.unwrap();
        assert_eq!(dns.srv_calls(owner), 1, "{owner}");
    }
    resolver.lookup_srv("b").await.unwrap();
    assert_eq!(dns.srv_calls("b"), 2);
}

#[tokio::test(start_paused = true)]
async fn names_differing_in_case_are_one_name() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 10));
    let resolver = resolver(&dns, ttls(5, 60, 5));
    port(&resolver).await.unwrap();
    resolver
        .lookup_srv(&OWNER.to_ascii_uppercase())
        .await
        .unwrap();
    assert_eq!(dns.srv_calls(OWNER), 1);
}

#[test]
fn dial_attempts_are_counted_by_tier_and_result() {
    let dns: Arc<dyn Dns> = Arc::new(FakeDns::default());
    let resolver = SrvResolver::new(dns, ttls(5, 60, 5));
    resolver.count_dial_attempt(0, false);
    resolver.count_dial_attempt(0, true);
    resolver.count_dial_attempt(2, true);
    resolver.count_dial_attempt(400, false);
    assert_eq!(
        resolver.stats().dial_attempts,
        [
            TierAttempts {
                tier: 0,
                success: 1,
                failure: 1
            },
            TierAttempts {
                tier: 2,
                success: 1,
                failure: 0
            },
            TierAttempts {
                tier: DIAL_TIERS - 1,
                success: 0,
                failure: 1
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn owner_lookups_and_dial_attempts_are_also_counted_in_the_metrics() {
    let dns = Arc::new(FakeDns::default());
    dns.set_srv(OWNER, answer_on_port(1, 30));
    let metrics = Arc::new(Metrics::default());
    let resolver = resolver(&dns, ttls(5, 60, 5)).counting_into(metrics.clone());
    assert_eq!(port(&resolver).await, Ok(1));
    assert_eq!(port(&resolver).await, Ok(1));
    resolver.lookup_ip("node.example.internal").await.ok();
    resolver.count_dial_attempt(1, false);
    let text = metrics.render(&());
    for line in [
        r#"dockhand_proxy_origin_srv_lookups_total{result="miss"} 1"#,
        r#"dockhand_proxy_origin_srv_lookups_total{result="hit"} 1"#,
        r#"dockhand_proxy_origin_srv_lookups_total{result="error"} 0"#,
        r#"dockhand_proxy_origin_srv_dial_attempts_total{tier="1",result="failure"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    let target_lookups = resolver.stats().target_lookups;
    assert_eq!(
        target_lookups.miss + target_lookups.error,
        1,
        "target lookups are the resolver's own"
    );
}
