//! The routes file both ways, for the `routes_file` target: a parsed
//! `DesiredHosts` written back as a routes file (every setting spelled out,
//! so reading it again must give the same hosts), and whether a problem's
//! key path names a key that is really in the document.

use std::time::Duration;

use dockhand::config::{
    middlewares_json, DesiredHosts, DnsServer, Hashes, HealthCheck, HostConfig, LoadBalancing,
    LocationConfig, Protocol, Retry, Rewrite, SrvResolution, TlsServerName, UpstreamConfig,
    UpstreamTarget,
};
use serde_json::{json, Map, Value};

/// `hosts` as a routes file that says everything explicitly.
pub fn to_routes_file(hosts: &DesiredHosts) -> Value {
    let hosts: Map<String, Value> = hosts
        .hosts
        .iter()
        .map(|host| (host.pattern.to_string(), host_json(host)))
        .collect();
    json!({ "host": hosts })
}

fn host_json(host: &HostConfig) -> Value {
    let locations: Map<String, Value> = host
        .locations
        .iter()
        .map(|location| (location.prefix.clone(), location_json(location)))
        .collect();
    let mut object = Map::new();
    object.insert("location".into(), Value::Object(locations));
    insert_health_check(&mut object, &host.health_check);
    object.insert("https_redirect".into(), host.https_redirect.into());
    if let Some(hsts) = host.hsts {
        object.insert("hsts".into(), hsts.to_string().into());
    }
    Value::Object(object)
}

fn location_json(location: &LocationConfig) -> Value {
    let upstreams: Map<String, Value> = location
        .upstreams
        .iter()
        .map(|upstream| (upstream.target.to_string(), upstream_json(upstream)))
        .collect();
    let mut object = Map::new();
    let load_balancing = match location.load_balancing {
        LoadBalancing::RoundRobin => "round_robin",
        LoadBalancing::LeastConnections => "least_connections",
    };
    object.insert("load_balancing".into(), load_balancing.into());
    if let Some(retry) = &location.retry {
        object.insert("retry".into(), retry_json(retry));
    }
    if let Some(rewrite) = &location.rewrite {
        object.insert("rewrite".into(), rewrite_json(rewrite));
    }
    insert_health_check(&mut object, &location.health_check);
    object.insert("upgrades".into(), json!(location.upgrades.protocols()));
    if let Value::Object(middlewares) = middlewares_json(&location.middlewares, Hashes::Written) {
        object.extend(middlewares);
    }
    object.insert("upstream".into(), Value::Object(upstreams));
    Value::Object(object)
}

fn insert_health_check(object: &mut Map<String, Value>, check: &HealthCheck) {
    let mut written = Map::new();
    if let Some(interval) = check.interval {
        written.insert("interval_secs".into(), interval.as_secs().into());
    }
    if let Some(enabled) = check.enabled {
        written.insert("enabled".into(), enabled.into());
    }
    object.insert("health_check".into(), Value::Object(written));
}

fn retry_json(retry: &Retry) -> Value {
    let mut on: Vec<Value> = Vec::new();
    if retry.on_connect {
        on.push("connect".into());
    }
    on.extend(
        retry
            .on_statuses
            .iter()
            .map(|s| s.as_u16().to_string().into()),
    );
    json!({ "attempts": retry.attempts, "on": on })
}

fn rewrite_json(rewrite: &Rewrite) -> Value {
    match rewrite {
        Rewrite::Prefix { strip, add } => {
            let mut object = Map::new();
            if let Some(strip) = strip {
                object.insert("strip_prefix".into(), strip.clone().into());
            }
            if let Some(add) = add {
                object.insert("add_prefix".into(), add.clone().into());
            }
            Value::Object(object)
        }
        Rewrite::Regex { pattern, replace } => {
            json!({ "match": pattern.as_str(), "replace": replace })
        }
    }
}

fn upstream_json(upstream: &UpstreamConfig) -> Value {
    let mut object = Map::new();
    object.insert("weight".into(), upstream.weight.into());
    object.insert("tls".into(), upstream.tls.into());
    if let Some(sni) = &upstream.sni {
        object.insert("sni".into(), sni.clone().into());
    }
    object.insert("verify".into(), upstream.verify.into());
    let headers: Map<String, Value> = upstream
        .headers_add
        .iter()
        .map(|(name, value)| {
            // Read from a JSON string, so the value's bytes are UTF-8.
            let value = String::from_utf8(value.as_bytes().to_vec()).expect("UTF-8 header value");
            (name.as_str().to_owned(), value.into())
        })
        .collect();
    object.insert("headers".into(), json!({ "add": headers }));
    let protocol = match upstream.protocol {
        Protocol::Http1 => "http1",
        Protocol::H2c => "h2c",
    };
    object.insert("protocol".into(), protocol.into());
    let resolution = match &upstream.target {
        UpstreamTarget::Srv { resolution, .. } => srv_resolution_json(resolution),
        UpstreamTarget::Address(_) | UpstreamTarget::Name { .. } => json!({ "mode": "a" }),
    };
    object.insert("resolution".into(), resolution);
    Value::Object(object)
}

fn srv_resolution_json(resolution: &SrvResolution) -> Value {
    let mut object = Map::new();
    object.insert("mode".into(), "srv".into());
    if let Some(resolver) = &resolution.resolver {
        let written = match resolver {
            DnsServer::Address(address) => address.to_string(),
            DnsServer::Name { host, port } => format!("{host}:{port}"),
        };
        object.insert("resolver".into(), written.into());
    }
    object.insert("min_ttl".into(), duration(resolution.min_ttl).into());
    object.insert("max_ttl".into(), duration(resolution.max_ttl).into());
    object.insert(
        "negative_ttl".into(),
        duration(resolution.negative_ttl).into(),
    );
    let tls_server_name = match resolution.tls_server_name {
        TlsServerName::Owner => "owner",
        TlsServerName::Target => "target",
    };
    object.insert("tls_server_name".into(), tls_server_name.into());
    Value::Object(object)
}

/// Durations are read in whole milliseconds.
fn duration(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

/// Whether `path` (as a problem gives it: `host."a.com".location."/x".retry`,
/// keys of the format bare and the user's keys quoted) leads to a value in
/// `document`. The empty path is the document itself.
pub fn names_a_key(document: &Value, path: &str) -> bool {
    if path.is_empty() {
        return true;
    }
    let Some(object) = document.as_object() else {
        return false;
    };
    object.iter().any(|(key, value)| {
        [key.clone(), format!("{key:?}")].iter().any(|written| {
            match path.strip_prefix(written.as_str()) {
                Some("") => true,
                Some(rest) => rest
                    .strip_prefix('.')
                    .is_some_and(|rest| names_a_key(value, rest)),
                None => false,
            }
        })
    })
}
