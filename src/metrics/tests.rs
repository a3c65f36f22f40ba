use std::cell::RefCell;
use std::time::Duration;

use super::*;

/// Host, location, address, healthy, in flight.
type Reading = (&'static str, &'static str, &'static str, bool, u64);

/// A route table of fixed readings.
#[derive(Default)]
struct Fixed {
    upstreams: RefCell<Vec<Reading>>,
    diagnostics: DiagnosticCounts,
}

impl CurrentState for Fixed {
    fn each_upstream(&self, each: &mut dyn FnMut(UpstreamReading<'_>)) {
        for (host, location, address, healthy, in_flight) in self.upstreams.borrow().iter() {
            each(UpstreamReading {
                host,
                location,
                address: (*address).to_owned(),
                healthy: *healthy,
                in_flight: *in_flight,
            });
        }
    }

    fn diagnostic_counts(&self) -> DiagnosticCounts {
        self.diagnostics
    }
}

fn has_line(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

#[test]
fn a_request_counts_under_its_host_pattern_location_and_status() {
    let metrics = Metrics::default();
    let location = metrics.location("*.example.com".into(), "/api".into());
    location.count(200, Duration::from_millis(3), 120);
    location.count(200, Duration::from_millis(5), 30);
    location.count(502, Duration::from_millis(1), 0);
    location.bytes_in().inc_by(7);
    metrics.unmatched().count(404, Duration::from_millis(1), 20);
    let text = metrics.render(&());
    for line in [
        r#"dockhand_requests_total{host="*.example.com",location="/api",code="200"} 2"#,
        r#"dockhand_requests_total{host="*.example.com",location="/api",code="502"} 1"#,
        r#"dockhand_requests_total{host="unmatched",location="unmatched",code="404"} 1"#,
        r#"dockhand_response_body_bytes_total{host="*.example.com"} 150"#,
        r#"dockhand_request_body_bytes_total{host="*.example.com"} 7"#,
        r#"dockhand_request_duration_seconds_count{host="*.example.com"} 3"#,
        r#"dockhand_request_duration_seconds_bucket{host="*.example.com",le="0.004"} 2"#,
    ] {
        assert!(has_line(&text, line), "{line} not in:\n{text}");
    }
    assert!(
        has_line(&text, "# TYPE dockhand_requests_total counter"),
        "the Prometheus text format names counters with _total:\n{text}"
    );
}

#[test]
fn every_status_is_counted_past_those_kept_at_hand_and_across_a_rebuild() {
    let metrics = Metrics::default();
    let location = metrics.location("a.test".into(), "/".into());
    let statuses = [200, 404, 200, 500, 502, 503, 504, 200, 504, 301];
    for status in statuses {
        location.count(status, Duration::from_millis(1), 0);
    }
    // A new route table's handles for the same location add to its series.
    let rebuilt = metrics.location("a.test".into(), "/".into());
    rebuilt.count(504, Duration::from_millis(1), 0);
    rebuilt.count(200, Duration::from_millis(1), 0);
    let text = metrics.render(&());
    for (code, count) in [
        (200, 4),
        (404, 1),
        (500, 1),
        (502, 1),
        (503, 1),
        (504, 3),
        (301, 1),
    ] {
        let line = format!(
            r#"dockhand_requests_total{{host="a.test",location="/",code="{code}"}} {count}"#
        );
        assert!(has_line(&text, &line), "{line} not in:\n{text}");
    }
}

#[test]
fn error_reasons_and_srv_results_are_shown_at_zero_before_any() {
    let metrics = Metrics::new(&["no_host", "connect_refused"]);
    metrics.error("connect_refused");
    let text = metrics.render(&());
    for line in [
        r#"dockhand_errors_total{reason="no_host"} 0"#,
        r#"dockhand_errors_total{reason="connect_refused"} 1"#,
        r#"dockhand_proxy_origin_srv_lookups_total{result="hit"} 0"#,
        r#"dockhand_proxy_origin_srv_lookups_total{result="error"} 0"#,
        r#"dockhand_client_connections{protocol="h2"} 0"#,
        r#"dockhand_diagnostics{severity="error"} 0"#,
        r#"dockhand_docker_connected 0"#,
        r#"dockhand_route_table_swaps_total 0"#,
    ] {
        assert!(has_line(&text, line), "{line} not in:\n{text}");
    }
    let version = format!(
        r#"dockhand_build_info{{version="{}"}} 1"#,
        env!("CARGO_PKG_VERSION")
    );
    assert!(has_line(&text, &version), "{text}");
}

#[test]
fn events_lookups_and_swaps_are_counted_by_their_labels() {
    let metrics = Metrics::default();
    metrics.retry("connect_refused");
    metrics.dns_lookup("A/AAAA", "success");
    metrics.dns_lookup("SRV", "not_found");
    metrics.srv_lookup(SrvLookup::Stale);
    metrics.srv_dial_attempt(0, true);
    metrics.srv_dial_attempt(1, false);
    metrics.docker_event("start");
    metrics.docker_connected(true);
    metrics.table_swapped(Duration::from_micros(250));
    let text = metrics.render(&());
    for line in [
        r#"dockhand_retries_total{reason="connect_refused"} 1"#,
        r#"dockhand_dns_lookups_total{record="A/AAAA",result="success"} 1"#,
        r#"dockhand_dns_lookups_total{record="SRV",result="not_found"} 1"#,
        r#"dockhand_proxy_origin_srv_lookups_total{result="stale"} 1"#,
        r#"dockhand_proxy_origin_srv_dial_attempts_total{tier="0",result="success"} 1"#,
        r#"dockhand_proxy_origin_srv_dial_attempts_total{tier="1",result="failure"} 1"#,
        r#"dockhand_docker_events_total{action="start"} 1"#,
        r#"dockhand_docker_connected 1"#,
        r#"dockhand_route_table_swaps_total 1"#,
        r#"dockhand_route_table_build_seconds_count 1"#,
        r#"dockhand_route_table_build_seconds_bucket{le="0.0004"} 1"#,
    ] {
        assert!(has_line(&text, line), "{line} not in:\n{text}");
    }
}

#[test]
fn upstream_gauges_follow_the_current_state_and_gone_addresses_leave() {
    let metrics = Metrics::default();
    let state = Fixed {
        diagnostics: DiagnosticCounts {
            errors: 2,
            warnings: 1,
        },
        ..Fixed::default()
    };
    state.upstreams.borrow_mut().extend([
        ("a.com", "/", "10.0.0.1:80", true, 3),
        ("a.com", "/", "10.0.0.2:80", false, 0),
    ]);
    let text = metrics.render(&state);
    for line in [
        r#"dockhand_upstream_healthy{host="a.com",location="/",address="10.0.0.1:80"} 1"#,
        r#"dockhand_upstream_healthy{host="a.com",location="/",address="10.0.0.2:80"} 0"#,
        r#"dockhand_upstream_requests_in_flight{host="a.com",location="/",address="10.0.0.1:80"} 3"#,
        r#"dockhand_diagnostics{severity="error"} 2"#,
        r#"dockhand_diagnostics{severity="warning"} 1"#,
    ] {
        assert!(has_line(&text, line), "{line} not in:\n{text}");
    }
    assert_eq!(
        text.matches("# TYPE dockhand_upstream_healthy ").count(),
        1,
        "{text}"
    );
    state.upstreams.borrow_mut().remove(1);
    let text = metrics.render(&state);
    assert!(!text.contains("10.0.0.2:80"), "{text}");
}

#[test]
fn an_open_connection_counts_until_its_guard_drops() {
    let metrics = Metrics::default();
    let line = r#"dockhand_client_connections{protocol="http1"} "#;
    let value = |metrics: &Metrics| -> String {
        let text = metrics.render(&());
        let found = text.lines().find(|l| l.starts_with(line)).unwrap();
        found[line.len()..].to_owned()
    };
    let first = metrics.client_connection(ClientProtocol::Http1);
    let second = metrics.client_connection(ClientProtocol::Http1);
    assert_eq!(value(&metrics), "2");
    drop(first);
    drop(second);
    assert_eq!(value(&metrics), "0");
}
