//! Infrastructure faults under a steady bounded load, with the real binary
//! (its log is where a fault is reported): the DNS server down then back,
//! and the routes file replaced by invalid ones. Traffic continues on what
//! was last known good, with zero failed requests, and the state converges
//! when the fault ends. (The Docker daemon's restart is in the Docker suite.)

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;

use crate::dns_server::DnsServer;
use crate::support::*;

/// Long enough for a name's refresh (every 5 s) and a lookup that gets no
/// answer (5 s at most) to have happened, with room for a busy machine.
const NAME_REFRESH_LIMIT: Duration = Duration::from_secs(30);

fn name_route(host: &str, name_and_port: &str) -> String {
    json!({"host": {host: {"location": {"/": {"upstream": {name_and_port: {}}}}}}}).to_string()
}

/// Whether the binary logged an event with `message` (and `field` = `value`).
fn logged(process: &ProxyProcess, message: &str, field: &str, value: &str) -> bool {
    process
        .events()
        .iter()
        .any(|event| event["message"] == message && event[field] == value)
}

#[tokio::test]
async fn the_dns_server_down_keeps_the_last_addresses_and_a_change_made_meanwhile_is_taken_on_return(
) {
    let first = Backend::echo("first").await;
    let port = first.addr.port();
    // Where the name is moved while the DNS server is down.
    let _second = Backend::echo_at(SocketAddr::from(([127, 0, 0, 2], port)), "second").await;
    let mut dns = DnsServer::start().await;
    dns.set_a("app.test", ["127.0.0.1"], 1);
    let resolver = dns.address().to_string();
    let process = ProxyProcess::start(
        &name_route("a.test", &format!("app.test:{port}")),
        &["--dns-resolver", &resolver],
    )
    .await;
    eventually("the name is resolved", || async {
        logged(
            &process,
            "upstream name resolved to new addresses",
            "name",
            "app.test",
        )
    })
    .await;
    let load = RequestLoop::start(process.addr, "a.test");
    load.wait_for_more(20).await;

    // The server goes away; meanwhile the name moves to the second backend.
    dns.stop().await;
    dns.set_a("app.test", ["127.0.0.2"], 1);
    let before_outage = load.counts();
    eventually_within(NAME_REFRESH_LIMIT, "a lookup fails", || async {
        logged(
            &process,
            "upstream name lookup failed; keeping the last addresses",
            "name",
            "app.test",
        )
    })
    .await;
    // Requests sent after the failed lookup still go to the last address.
    load.wait_for_more(20).await;
    let during_outage = load.counts();
    assert_eq!(during_outage.answered_by("second"), 0);

    dns.resume().await;
    eventually_within(NAME_REFRESH_LIMIT, "the new address is used", || async {
        load.counts().answered_by("second") > 0
    })
    .await;
    load.wait_for_more(20).await;
    let after = load.stop().await;

    let in_outage = during_outage.sent - before_outage.sent;
    record_figure(&format!(
        "DNS server down then back: {} requests in all, {in_outage} while it was down \
         (all to the last address), {} to the address set meanwhile, {} failed",
        after.sent,
        after.answered_by("second"),
        after.failures.len()
    ));
    assert!(
        after.failures.is_empty(),
        "{:?}\ndockhand's events other than INFO:\n{}",
        after.failures,
        process.unusual_events()
    );
    assert_eq!(
        during_outage.answered_by("first"),
        during_outage.sent,
        "every request while the server was down reached the last address"
    );
}

#[tokio::test]
async fn an_invalid_routes_file_under_load_keeps_the_last_good_routes_until_a_valid_one_comes() {
    let first = Backend::echo("first").await;
    let second = Backend::echo("second").await;
    // Its connections' and upstream exchanges' DEBUG events too: a failed
    // request's are shown should the test fail.
    let process = ProxyProcess::start(
        &one_route("a.test", first.addr),
        &[
            "--routes-poll-interval",
            "50ms",
            "--log-level",
            "info,dockhand::proxy=debug,dockhand::connect=debug",
        ],
    )
    .await;
    let load = RequestLoop::start(process.addr, "a.test");
    load.wait_for_more(20).await;

    // Each invalid version in turn: cut short mid-write, and one that parses
    // but names an impossible port (its key path in the diagnostic). Each is
    // reported once, as an ERROR diagnostic saying what is served instead.
    let before_invalid = load.counts();
    let truncated = one_route("a.test", second.addr);
    let truncated = &truncated[..truncated.len() / 2];
    let bad_port =
        r#"{"host": {"a.test": {"location": {"/": {"upstream": {"127.0.0.1:99999": {}}}}}}}"#;
    for (diagnosed, invalid) in [truncated, bad_port].into_iter().enumerate() {
        process.write_routes(invalid);
        eventually("the invalid version is reported", || async {
            let reported = process
                .events()
                .iter()
                .filter(|event| {
                    event["level"] == "ERROR"
                        && event["message"] == "configuration diagnostic"
                        && event["diagnostic"]
                            .as_str()
                            .is_some_and(|text| text.contains("the last good version is served"))
                })
                .count();
            reported > diagnosed
        })
        .await;
        load.wait_for_more(20).await;
    }
    let while_invalid = load.counts();
    assert_eq!(while_invalid.answered_by("second"), 0);
    assert!(
        process
            .stdout()
            .contains(r#"upstream.\"127.0.0.1:99999\": port must be 1-65535"#),
        "the diagnostic names the key: {}",
        process.stdout()
    );

    process.write_routes(&one_route("a.test", second.addr));
    eventually("the valid version is applied", || async {
        load.counts().answered_by("second") > 0
    })
    .await;
    load.wait_for_more(20).await;
    let after = load.stop().await;
    record_figure(&format!(
        "routes file replaced by invalid versions: {} requests in all, {} while it was \
         invalid (all to the last good routes), {} failed",
        after.sent,
        while_invalid.sent - before_invalid.sent,
        after.failures.len()
    ));
    assert!(
        after.failures.is_empty(),
        "{:?}\ndockhand's events other than INFO:\n{}",
        after.failures,
        process.unusual_events()
    );
    assert_eq!(while_invalid.answered_by("first"), while_invalid.sent);
    assert!(process.stdout().contains("routes file reloaded"));
}
