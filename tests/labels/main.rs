//! Golden files for the labels pipeline. Each case in `cases/` holds dockhand's
//! context and the containers' facts, and the hosts and diagnostics
//! `build_hosts` must give for them, with the DNS server names the provider
//! is to look up (`dns_server_names`) where there are some. `UPDATE_GOLDEN=1 cargo test --test labels`
//! rewrites the expected part of every case; each rewritten file is then read
//! by eye before it is committed, since a golden file is only as good as its review.
//!
//! A diagnostic is shown as its text line, then the label's value it carries
//! (`[value "80"]`).
//!
//! In a case, container fields may be left out: `id` defaults to the name,
//! `running` to true, `network_mode` to `default`, the rest to empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use dockhand::config::{
    DesiredHosts, Diagnostic, HealthCheck, LoadBalancing, LocationConfig, NamedDnsServer, Origin,
    Protocol, Retry, Rewrite, TlsServerName, Upgrades, UpstreamConfig, UpstreamTarget,
};
use dockhand::labels::{build_hosts, dns_server_names, ContainerFacts, Health, ProxyFacts};
use serde_json::{json, Map, Value};

#[test]
fn golden_cases() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let cases = case_files();
    assert!(!cases.is_empty(), "no cases found");
    let mut failures = Vec::new();
    for path in &cases {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(path).unwrap();
        let mut case: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
        let actual = run_case(&name, &case);
        if update {
            case["expected"] = actual;
            let rewritten = serde_json::to_string_pretty(&case).unwrap() + "\n";
            fs::write(path, rewritten).unwrap();
        } else if case.get("expected") != Some(&actual) {
            failures.push(format!(
                "case {name}: expected\n{}\nbut got\n{}",
                serde_json::to_string_pretty(&case["expected"]).unwrap(),
                serde_json::to_string_pretty(&actual).unwrap()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ (UPDATE_GOLDEN=1 rewrites them, then review):\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

fn case_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/labels/cases");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

fn run_case(name: &str, case: &Value) -> Value {
    let object = case.as_object().expect("a case is an object");
    only_keys(name, object, &["context", "containers", "expected"]);
    let context = read_context(name, &case["context"]);
    let containers: Vec<ContainerFacts> = case["containers"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: containers is an array"))
        .iter()
        .map(|container| read_container(name, container))
        .collect();
    let (hosts, diagnostics) = build_hosts(&containers, &context);
    let mut rendered = json!({
        "hosts": render_hosts(&hosts),
        "diagnostics": diagnostics.iter().map(render_diagnostic).collect::<Vec<_>>(),
    });
    // Shown only where there are some, so the other cases stay as they are.
    let named = dns_server_names(&containers, &context);
    if !named.is_empty() {
        rendered["dns_server_names"] = named.iter().map(render_named_dns_server).collect();
    }
    rendered
}

// ---- reading the facts ------------------------------------------------------

fn read_context(name: &str, value: &Value) -> ProxyFacts {
    let mut context = ProxyFacts::default();
    let Some(object) = value.as_object() else {
        return context;
    };
    only_keys(
        name,
        object,
        &["label_prefix", "proxy_networks", "proxy_on_host_network"],
    );
    if let Some(prefix) = object.get("label_prefix") {
        context.label_prefix = prefix.as_str().unwrap().to_owned();
    }
    if let Some(networks) = object.get("proxy_networks") {
        context.proxy_networks = strings(networks);
    }
    if let Some(on_host) = object.get("proxy_on_host_network") {
        context.proxy_on_host_network = on_host.as_bool().unwrap();
    }
    context
}

fn read_container(name: &str, value: &Value) -> ContainerFacts {
    let object = value.as_object().expect("a container is an object");
    only_keys(
        name,
        object,
        &[
            "name",
            "id",
            "created",
            "labels",
            "running",
            "health",
            "networks",
            "network_mode",
            "exposed_ports",
            "compose_project",
        ],
    );
    let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
    let container_name = text("name").expect("a container has a name");
    ContainerFacts {
        id: text("id").unwrap_or_else(|| container_name.clone()),
        created: object.get("created").and_then(Value::as_i64).unwrap_or(0),
        labels: object
            .get("labels")
            .and_then(Value::as_object)
            .map(|labels| {
                labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect()
            })
            .unwrap_or_default(),
        running: object
            .get("running")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        health: text("health").map(|health| match health.as_str() {
            "starting" => Health::Starting,
            "healthy" => Health::Healthy,
            "unhealthy" => Health::Unhealthy,
            other => panic!("{name}: unknown health {other}"),
        }),
        networks: object
            .get("networks")
            .and_then(Value::as_object)
            .map(|networks| {
                networks
                    .iter()
                    .map(|(network, address)| {
                        let address = address.as_str().map(|a| a.parse().unwrap());
                        (network.clone(), address)
                    })
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default(),
        network_mode: text("network_mode").unwrap_or_else(|| "default".to_owned()),
        exposed_ports: object
            .get("exposed_ports")
            .and_then(Value::as_array)
            .map(|ports| {
                ports
                    .iter()
                    .map(|port| port.as_u64().unwrap() as u16)
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default(),
        compose_project: text("compose_project"),
        service: None,
        reached_by_name: None,
        name: container_name,
    }
}

fn only_keys(name: &str, object: &Map<String, Value>, known: &[&str]) {
    for key in object.keys() {
        assert!(known.contains(&key.as_str()), "{name}: unknown field {key}");
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item.as_str().unwrap().to_owned())
        .collect()
}

// ---- rendering the result ---------------------------------------------------
// Settings at their defaults are left out, so each file shows what the labels changed.

fn render_hosts(desired: &DesiredHosts) -> Value {
    desired
        .hosts
        .iter()
        .map(|host| {
            let mut rendered = Map::new();
            rendered.insert("host".into(), json!(host.pattern.to_string()));
            if host.health_check != HealthCheck::default() {
                rendered.insert(
                    "health_check".into(),
                    render_health_check(host.health_check),
                );
            }
            if !host.https_redirect {
                rendered.insert("https_redirect".into(), json!(false));
            }
            if let Some(hsts) = host.hsts {
                rendered.insert("hsts".into(), json!(hsts.to_string()));
            }
            let locations: Vec<Value> = host.locations.iter().map(render_location).collect();
            rendered.insert("locations".into(), Value::Array(locations));
            Value::Object(rendered)
        })
        .collect()
}

fn render_location(location: &LocationConfig) -> Value {
    let mut rendered = Map::new();
    rendered.insert("path".into(), json!(location.prefix));
    if location.load_balancing == LoadBalancing::LeastConnections {
        rendered.insert("load_balancing".into(), json!("least_connections"));
    }
    if let Some(retry) = &location.retry {
        rendered.insert("retry".into(), render_retry(retry));
    }
    if let Some(rewrite) = &location.rewrite {
        rendered.insert("rewrite".into(), render_rewrite(rewrite));
    }
    if location.health_check != HealthCheck::default() {
        rendered.insert(
            "health_check".into(),
            render_health_check(location.health_check),
        );
    }
    if location.upgrades != Upgrades::default() {
        rendered.insert("upgrades".into(), json!(location.upgrades.protocols()));
    }
    if !location.middlewares.is_empty() {
        let described: Vec<String> = location
            .middlewares
            .describe()
            .into_iter()
            .map(|(_, text)| text)
            .collect();
        rendered.insert("middlewares".into(), json!(described));
    }
    let upstreams: Vec<Value> = location.upstreams.iter().map(render_upstream).collect();
    rendered.insert("upstreams".into(), Value::Array(upstreams));
    Value::Object(rendered)
}

fn render_retry(retry: &Retry) -> Value {
    let mut on: Vec<String> = Vec::new();
    if retry.on_connect {
        on.push("connect".into());
    }
    on.extend(
        retry
            .on_statuses
            .iter()
            .map(|status| status.as_str().to_owned()),
    );
    json!({"attempts": retry.attempts, "on": on})
}

fn render_rewrite(rewrite: &Rewrite) -> Value {
    match rewrite {
        Rewrite::Prefix { strip, add } => json!({"strip_prefix": strip, "add_prefix": add}),
        Rewrite::Regex { pattern, replace } => {
            json!({"match": pattern.as_str(), "replace": replace})
        }
    }
}

fn render_health_check(check: HealthCheck) -> Value {
    json!({
        "interval_secs": check.interval.map(|interval| interval.as_secs()),
        "enabled": check.enabled,
    })
}

fn render_upstream(upstream: &UpstreamConfig) -> Value {
    let mut rendered = Map::new();
    rendered.insert("target".into(), json!(upstream.target.to_string()));
    if let UpstreamTarget::Srv { resolution, .. } = &upstream.target {
        rendered.insert(
            "srv".into(),
            json!({
                "resolver": resolution.resolver.as_ref().map(ToString::to_string),
                "min_ttl_ms": resolution.min_ttl.as_millis() as u64,
                "max_ttl_ms": resolution.max_ttl.as_millis() as u64,
                "negative_ttl_ms": resolution.negative_ttl.as_millis() as u64,
                "tls_server_name": match resolution.tls_server_name {
                    TlsServerName::Owner => "owner",
                    TlsServerName::Target => "target",
                },
            }),
        );
    }
    if upstream.weight != 1 {
        rendered.insert("weight".into(), json!(upstream.weight));
    }
    if upstream.tls {
        rendered.insert("tls".into(), json!(true));
    }
    if let Some(sni) = &upstream.sni {
        rendered.insert("sni".into(), json!(sni));
    }
    if upstream.verify {
        rendered.insert("verify".into(), json!(true));
    }
    if upstream.protocol == Protocol::H2c {
        rendered.insert("protocol".into(), json!("h2c"));
    }
    if !upstream.headers_add.is_empty() {
        let headers: Map<String, Value> = upstream
            .headers_add
            .iter()
            .map(|(name, value)| {
                (
                    name.to_string(),
                    json!(value.to_str().expect("test header values are text")),
                )
            })
            .collect();
        rendered.insert("headers_add".into(), Value::Object(headers));
    }
    Value::Object(rendered)
}

fn render_named_dns_server(named: &NamedDnsServer) -> Value {
    let container = match &named.origin {
        Origin::Container { name, .. } => name.as_str(),
        other => panic!("labels name something other than a container ({other:?}): {named:?}"),
    };
    json!(format!(
        "container {container:?}: label {}: {}",
        named.key, named.name
    ))
}

/// The text form, then the label's value where the diagnostic carries it.
fn render_diagnostic(diagnostic: &Diagnostic) -> Value {
    // The key meant is data of its own, which the text form appends.
    assert!(
        !diagnostic.reason.contains("did you mean"),
        "a suggestion written into the reason: {diagnostic:?}"
    );
    let mut line = format!("{}: {diagnostic}", diagnostic.severity);
    if let Some(value) = &diagnostic.value {
        line.push_str(&format!(" [value {value:?}]"));
    }
    json!(line)
}
