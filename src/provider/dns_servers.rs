//! DNS servers written as names (`resolution.resolver = "ns.internal:53"`),
//! looked up when a provider loads its routes (the file provider at each
//! load, the Docker provider at each publish), so that connecting never
//! waits on the lookup. They are asked of the DNS upstream names use, each
//! name once per load, all at once. A name without an address is an error
//! diagnostic where it is written, and the upstreams that ask it are left
//! out; the provider looks it up again every `RETRY_INTERVAL` until it
//! resolves.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join_all;

use crate::config::{Desired, DnsServerAddresses, NamedDnsServer};
use crate::resolve::names::{LOOKUP_TIMEOUT, REFRESH_INTERVAL};
use crate::resolve::{Dns, LookupError};

/// How soon a name that had no address is looked up again: as often as
/// upstream names are resolved again (ADR 0006).
pub const RETRY_INTERVAL: Duration = REFRESH_INTERVAL;

/// Looks up the names in `named`, puts their addresses in `desired`'s
/// hosts and adds a diagnostic for each name without one (the diagnostics
/// stay sorted by origin, then key). Returns whether every name resolved.
pub async fn settle(dns: &dyn Dns, named: &[NamedDnsServer], desired: &mut Desired) -> bool {
    if named.is_empty() {
        return true;
    }
    let names: BTreeSet<&str> = named.iter().map(|named| named.name.as_str()).collect();
    let addresses = look_up(dns, names).await;
    addresses.settle(&mut desired.hosts);
    let problems = addresses.diagnose(named);
    let every_name_resolved = problems.is_empty();
    desired.diagnostics.extend(problems);
    desired
        .diagnostics
        .sort_by(|a, b| (&a.origin, &a.key).cmp(&(&b.origin, &b.key)));
    every_name_resolved
}

/// The address of each name, or why it has none; of several addresses, the
/// first the answer gives (IPv4 before IPv6 from `HickoryDns`).
async fn look_up(dns: &dyn Dns, names: BTreeSet<&str>) -> DnsServerAddresses {
    let lookups = names.into_iter().map(|name| async move {
        let answer = tokio::time::timeout(LOOKUP_TIMEOUT, dns.lookup_ip(name))
            .await
            .unwrap_or_else(|_| Err(LookupError::Failed("timed out".to_owned())));
        let found = answer
            .and_then(|answer| {
                answer
                    .addresses
                    .first()
                    .copied()
                    .ok_or(LookupError::NotFound)
            })
            .map_err(|error| error.to_string());
        (name.to_owned(), found)
    });
    let mut addresses = DnsServerAddresses::default();
    for (name, found) in join_all(lookups).await {
        addresses.insert(name, found);
    }
    addresses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{dns_server_names, parse_routes_file, Origin, UpstreamTarget};
    use crate::resolve::srv::fake_dns::{ip_answer, FakeDns};

    /// The routes file's hosts, with the DNS server names they use.
    fn routes(text: &str) -> (Desired, Vec<NamedDnsServer>) {
        let hosts = parse_routes_file(text).unwrap();
        let origin = Origin::RoutesFile {
            path: "routes.json".into(),
        };
        let named = dns_server_names(&hosts, &origin);
        let desired = Desired {
            hosts,
            ..Desired::default()
        };
        (desired, named)
    }

    fn srv_route(prefix: &str, owner: &str, resolver: &str) -> String {
        format!(
            r#""{prefix}": {{ "upstream": {{ "{owner}": {{
                "resolution": {{ "mode": "srv", "resolver": "{resolver}" }} }} }} }}"#
        )
    }

    fn one_host(locations: &[String]) -> String {
        format!(
            r#"{{ "host": {{ "a.com": {{ "location": {{ {} }} }} }} }}"#,
            locations.join(", ")
        )
    }

    /// Each location's upstreams, SRV ones with the DNS server they ask.
    fn upstreams(desired: &Desired) -> Vec<Vec<String>> {
        let described = |target: &UpstreamTarget| match target {
            UpstreamTarget::Srv { owner, resolution } => match &resolution.resolver {
                Some(server) => format!("{owner} via {server}"),
                None => owner.clone(),
            },
            other => other.to_string(),
        };
        let locations = desired.hosts.hosts[0].locations.iter().map(|location| {
            let upstreams = location.upstreams.iter();
            upstreams
                .map(|upstream| described(&upstream.target))
                .collect()
        });
        locations.collect()
    }

    #[tokio::test]
    async fn each_name_is_asked_once_and_one_without_an_address_only_empties_its_location() {
        let text = one_host(&[
            srv_route("/srv", "_app._tcp.x", "ns.x:5353"),
            srv_route("/again", "_other._tcp.x", "ns.x:53"),
            srv_route("/gone", "_web._tcp.x", "gone.x:53"),
            r#""/plain": { "upstream": { "10.0.0.1:80": {} } }"#.to_owned(),
        ]);
        let (mut desired, named) = routes(&text);
        let dns = FakeDns::default();
        dns.set_ip(
            "ns.x",
            Ok(ip_answer(
                &["10.0.0.53", "10.0.0.54"],
                Duration::from_secs(30),
            )),
        );
        assert!(!settle(&dns, &named, &mut desired).await);
        assert_eq!(
            upstreams(&desired),
            [
                vec!["_app._tcp.x via 10.0.0.53:5353"],
                vec!["_other._tcp.x via 10.0.0.53:53"],
                vec![],
                vec!["10.0.0.1:80"],
            ]
        );
        assert_eq!((dns.ip_calls("ns.x"), dns.ip_calls("gone.x")), (1, 1));
        let diagnostics: Vec<String> = desired
            .diagnostics
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            diagnostics,
            [concat!(
                r#"routes file routes.json: host."a.com".location."/gone".upstream."_web._tcp.x".resolution.resolver: "#,
                "DNS server name `gone.x` did not resolve (the name does not exist or has no records); ",
                "the upstreams that ask it are left out until it resolves"
            )]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dns_that_does_not_answer_gives_a_diagnostic_at_the_lookup_timeout() {
        let (mut desired, named) = routes(&one_host(&[srv_route(
            "/srv",
            "_app._tcp.x",
            "silent.x:53",
        )]));
        let dns = FakeDns::default();
        dns.set_ip(
            "silent.x",
            Ok(ip_answer(&["10.0.0.53"], Duration::from_secs(30))),
        );
        dns.set_delay("silent.x", LOOKUP_TIMEOUT * 2);
        let started = tokio::time::Instant::now();
        assert!(!settle(&dns, &named, &mut desired).await);
        assert_eq!(started.elapsed(), LOOKUP_TIMEOUT);
        assert_eq!(upstreams(&desired), [Vec::<String>::new()]);
        let reason = &desired.diagnostics[0].reason;
        assert!(
            reason.contains("`silent.x` did not resolve (lookup failed: timed out)"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn addresses_and_the_default_dns_need_no_lookup() {
        let text = one_host(&[
            srv_route("/srv", "_app._tcp.x", "127.0.0.1:5353"),
            r#""/default": { "upstream": { "_b._tcp.x": { "resolution": { "mode": "srv" } } } }"#
                .to_owned(),
        ]);
        let (mut desired, named) = routes(&text);
        assert!(named.is_empty());
        let before = desired.clone();
        let dns = FakeDns::default();
        assert!(settle(&dns, &named, &mut desired).await);
        assert_eq!(desired, before);
        assert_eq!(dns.ip_calls("127.0.0.1"), 0);
    }
}
