use super::*;
use crate::config::parse_routes_file;

fn registry() -> EndpointRegistry {
    EndpointRegistry::new()
}

fn location_set(
    upstreams: &str,
    load_balancing: LoadBalancing,
    resolved: &HashMap<String, Arc<[IpAddr]>>,
    registry: &EndpointRegistry,
) -> UpstreamSet {
    let desired = parse_routes_file(&format!(
        r#"{{"host": {{"a.com": {{"location": {{"/": {{"upstream": {upstreams}}}}}}}}}}}"#
    ))
    .unwrap();
    let checks = CheckSettings {
        enabled: true,
        interval: DEFAULT_CHECK_INTERVAL,
    };
    let context = EndpointInputs { resolved, registry };
    UpstreamSet::build(
        &desired.hosts[0].locations[0].upstreams,
        load_balancing,
        checks,
        &context,
        &"a.com/".into(),
    )
}

fn set(upstreams: &str, load_balancing: LoadBalancing) -> UpstreamSet {
    location_set(upstreams, load_balancing, &HashMap::new(), &registry())
}

fn picks(set: &UpstreamSet, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| set.pick(&[]).unwrap().to_string())
        .collect()
}

fn fail_twice(endpoint: &Endpoint) {
    endpoint.state.record(false);
    endpoint.state.record(false);
}

#[test]
fn weighted_round_robin_is_smooth_and_exact() {
    let set = set(
        r#"{"10.0.0.1:80": {"weight": 3}, "10.0.0.2:80": {}}"#,
        LoadBalancing::RoundRobin,
    );
    assert_eq!(
        picks(&set, 8),
        [
            "10.0.0.1:80",
            "10.0.0.1:80",
            "10.0.0.2:80",
            "10.0.0.1:80",
            "10.0.0.1:80",
            "10.0.0.1:80",
            "10.0.0.2:80",
            "10.0.0.1:80"
        ]
    );
}

#[test]
fn unhealthy_endpoints_get_no_requests_unless_all_are() {
    let set = set(
        r#"{"10.0.0.1:80": {}, "10.0.0.2:80": {}, "10.0.0.3:80": {}}"#,
        LoadBalancing::RoundRobin,
    );
    fail_twice(&set.endpoints()[1]);
    assert!(picks(&set, 9).iter().all(|picked| picked != "10.0.0.2:80"));
    fail_twice(&set.endpoints()[0]);
    fail_twice(&set.endpoints()[2]);
    let all_unhealthy = picks(&set, 3);
    assert_eq!(
        all_unhealthy.len(),
        3,
        "a location whose endpoints all failed is still tried"
    );
    assert!(all_unhealthy.contains(&"10.0.0.2:80".to_owned()));
}

#[test]
fn a_retry_goes_to_an_endpoint_not_tried_yet() {
    let set = set(
        r#"{"10.0.0.1:80": {}, "10.0.0.2:80": {}, "10.0.0.3:80": {}}"#,
        LoadBalancing::RoundRobin,
    );
    let first = set.pick(&[]).unwrap();
    let second = set.pick(std::slice::from_ref(&first)).unwrap();
    let third = set.pick(&[first.clone(), second.clone()]).unwrap();
    let mut seen = [first.to_string(), second.to_string(), third.to_string()];
    seen.sort();
    assert_eq!(seen, ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
    let fourth = set.pick(&[first, second, third]);
    assert!(fourth.is_some(), "all tried: any is taken again");
}

#[test]
fn least_connections_counts_in_flight_per_weight() {
    let set = set(
        r#"{"10.0.0.1:80": {}, "10.0.0.2:80": {"weight": 2}}"#,
        LoadBalancing::LeastConnections,
    );
    // Each pick is held in flight: the weight-2 upstream ends up with twice as many.
    let mut held = Vec::new();
    for _ in 0..6 {
        let endpoint = set.pick(&[]).unwrap();
        held.push((endpoint.to_string(), endpoint.state.start_request()));
    }
    let count_to = |address: &str| held.iter().filter(|(a, _)| a == address).count();
    assert_eq!(count_to("10.0.0.1:80"), 2);
    assert_eq!(count_to("10.0.0.2:80"), 4);
}

#[test]
fn least_connections_takes_ties_in_turn() {
    let set = set(
        r#"{"10.0.0.1:80": {}, "10.0.0.2:80": {}, "10.0.0.3:80": {}}"#,
        LoadBalancing::LeastConnections,
    );
    // Nothing in flight: every pick is a tie, answered in turn.
    let mut picked = picks(&set, 6);
    picked.sort();
    picked.dedup();
    assert_eq!(picked.len(), 3);
    // A busy upstream is passed over while the others are idle.
    let busy = set.endpoints()[0].clone();
    let _guard = busy.state.start_request();
    assert!(picks(&set, 6).iter().all(|p| p != "10.0.0.1:80"));
}

#[test]
fn each_address_of_a_name_is_an_endpoint_with_its_settings() {
    let resolved = HashMap::from([(
        "app".to_owned(),
        Arc::from(vec![
            "10.1.0.1".parse::<IpAddr>().unwrap(),
            "10.1.0.2".parse().unwrap(),
        ]),
    )]);
    let registry = registry();
    let set = location_set(
        r#"{"app:8080": {"weight": 5}, "missing:80": {}}"#,
        LoadBalancing::RoundRobin,
        &resolved,
        &registry,
    );
    let endpoints: Vec<String> = set.endpoints().iter().map(|e| e.to_string()).collect();
    assert_eq!(endpoints, ["10.1.0.1:8080", "10.1.0.2:8080"]);
    assert!(set.endpoints().iter().all(|e| e.weight() == 5));
    assert_eq!(set.names(), ["app", "missing"]);

    // Rebuilt with one address gone: the one that stays keeps its state.
    fail_twice(&set.endpoints()[1]);
    let resolved = HashMap::from([(
        "app".to_owned(),
        Arc::from(vec!["10.1.0.2".parse::<IpAddr>().unwrap()]),
    )]);
    let rebuilt = location_set(
        r#"{"app:8080": {"weight": 5}}"#,
        LoadBalancing::RoundRobin,
        &resolved,
        &registry,
    );
    assert!(rebuilt.endpoints()[0].same_place(&set.endpoints()[1]));
    assert!(!rebuilt.endpoints()[0].state.is_healthy());
}

#[test]
fn health_settings_layer_over_the_host() {
    let host = HealthCheck {
        interval: Some(Duration::from_secs(5)),
        enabled: None,
    };
    let location = HealthCheck {
        interval: None,
        enabled: Some(false),
    };
    assert_eq!(
        CheckSettings::layered(&host, &location),
        CheckSettings {
            enabled: false,
            interval: Duration::from_secs(5)
        }
    );
    assert_eq!(
        CheckSettings::layered(&HealthCheck::default(), &HealthCheck::default()),
        CheckSettings {
            enabled: true,
            interval: DEFAULT_CHECK_INTERVAL
        }
    );
}

#[test]
fn tls_server_names_come_from_the_settings_never_from_the_address() {
    let address = |ip: &str| -> Arc<[IpAddr]> { Arc::from(vec![ip.parse::<IpAddr>().unwrap()]) };
    let resolved = HashMap::from([
        ("api.example.test".to_owned(), address("10.1.0.1")),
        ("other.test".to_owned(), address("10.1.0.2")),
    ]);
    let set = location_set(
        r#"{"api.example.test:443": {}, "other.test:443": {"sni": "named.test"}, "10.0.0.9:443": {}}"#,
        LoadBalancing::RoundRobin,
        &resolved,
        &registry(),
    );
    let names: Vec<Option<String>> = set
        .endpoints()
        .iter()
        .map(|endpoint| match &endpoint.transport {
            Transport::Tls(target) => target.sni.clone(),
            other => panic!("{other:?} is not TLS"),
        })
        .collect();
    assert_eq!(
        names,
        [
            Some("api.example.test".to_owned()),
            Some("named.test".to_owned()),
            None
        ]
    );
}
