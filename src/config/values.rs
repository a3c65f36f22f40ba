//! Parsers and checks shared by every source (the routes file and Docker
//! labels): each takes what a user wrote and returns the typed value or the
//! reason it was refused, so both sources accept the same values and explain a
//! refusal in the same words. Where a problem is reported (a key path, a
//! label) is the source's business.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use http::StatusCode;

use super::model::{
    DnsServer, Hsts, LoadBalancing, Protocol, Retry, SrvResolution, TlsServerName, Upgrades,
    UpstreamTarget,
};

pub use super::json_reader::closest;
pub use super::scalars::{
    boolean, dns_name, header, host_pattern, host_port, not_in_range, port, rewrite_pattern,
    upstream_target, whole_number, HostPort,
};

/// `retry.attempts`: tries after the first.
pub const RETRY_ATTEMPTS: RangeInclusive<u64> = 0..=10;
/// Tries after the first when `retry` is given without `attempts`.
pub const DEFAULT_RETRY_ATTEMPTS: u8 = 1;
/// An upstream's `weight`.
pub const WEIGHTS: RangeInclusive<u64> = 1..=127;
/// `health_check.interval_secs`: up to a day.
pub const HEALTH_INTERVAL_SECS: RangeInclusive<u64> = 1..=86_400;
/// SRV cache clamps when `resolution` leaves them out.
pub const DEFAULT_MIN_TTL: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX_TTL: Duration = Duration::from_secs(60);
pub const DEFAULT_NEGATIVE_TTL: Duration = Duration::from_secs(5);
/// A host redirects plain HTTP to HTTPS unless told not to.
pub const DEFAULT_HTTPS_REDIRECT: bool = true;
/// `hsts` max-age: up to two years, what the browsers' preload lists ask
/// for (browsers cap it lower anyway); more is a typo more often than not.
pub const HSTS_MAX_AGE: RangeInclusive<u64> = 0..=63_072_000;
/// The reason given for an SRV-only `resolution` key under mode `a`.
pub const SRV_ONLY: &str = "applies only with mode \"srv\"";

/// `hsts`: the max-age in seconds, optionally followed by the directives
/// `includeSubDomains` and `preload`, separated by `;` as the header writes
/// them (`31536000; includeSubDomains`); a leading `max-age=` is accepted,
/// so a header value can be pasted. Directive names ignore case (RFC 6797
/// §6.1) and appear once each.
pub fn hsts(text: &str) -> Result<Hsts, String> {
    let mut parts = text.split(';').map(str::trim);
    let first = parts.next().unwrap_or_default();
    let seconds = match first.get(..8) {
        Some(start) if start.eq_ignore_ascii_case("max-age=") => &first[8..],
        _ => first,
    };
    let mut hsts = match seconds.parse::<u64>() {
        Ok(seconds) => hsts_max_age(seconds)?,
        Err(_) => {
            return Err(format!(
                "`{text}` is not an HSTS max-age in seconds (such as 31536000, \
                 optionally followed by `; includeSubDomains` and `; preload`)"
            ))
        }
    };
    for directive in parts.filter(|part| !part.is_empty()) {
        let seen = match directive.to_ascii_lowercase().as_str() {
            "includesubdomains" => std::mem::replace(&mut hsts.include_subdomains, true),
            "preload" => std::mem::replace(&mut hsts.preload, true),
            _ => {
                return Err(format!(
                    "unknown HSTS directive `{directive}` (expected includeSubDomains or preload)"
                ))
            }
        };
        if seen {
            return Err(format!("the HSTS directive `{directive}` is written twice"));
        }
    }
    Ok(hsts)
}

/// `hsts` written as a number of seconds alone.
pub fn hsts_max_age(seconds: u64) -> Result<Hsts, String> {
    if !HSTS_MAX_AGE.contains(&seconds) {
        return Err(format!(
            "an HSTS max-age is {} to {} seconds (two years), found {seconds}",
            HSTS_MAX_AGE.start(),
            HSTS_MAX_AGE.end()
        ));
    }
    Ok(Hsts {
        max_age: seconds as u32,
        include_subdomains: false,
        preload: false,
    })
}

/// A location prefix: starts with `/`.
pub fn location_prefix(text: &str) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err("a location is a path prefix starting with `/`".into());
    }
    if text.contains(['?', '#']) || text.contains(char::is_whitespace) {
        return Err("a location prefix holds no query, fragment or spaces".into());
    }
    Ok(text.to_owned())
}

/// Whether an upstream is reached over TLS when `tls` is not written: on port 443 only.
pub fn default_tls(target: &UpstreamTarget) -> bool {
    match target {
        UpstreamTarget::Address(address) => address.port() == 443,
        UpstreamTarget::Name { port, .. } => *port == 443,
        UpstreamTarget::Srv { .. } => false,
    }
}

/// The server name sent over TLS (`sni`), lower-cased.
pub fn server_name(text: &str) -> Result<String, String> {
    dns_name(text).map(|()| text.to_ascii_lowercase())
}

pub fn load_balancing(text: &str) -> Result<LoadBalancing, String> {
    match text {
        "round_robin" => Ok(LoadBalancing::RoundRobin),
        "least_connections" => Ok(LoadBalancing::LeastConnections),
        _ => Err(format!("`{text}` is not round_robin or least_connections")),
    }
}

pub fn protocol(text: &str) -> Result<Protocol, String> {
    match text {
        "http1" => Ok(Protocol::Http1),
        "h2c" => Ok(Protocol::H2c),
        _ => Err(format!("`{text}` is not http1 or h2c")),
    }
}

pub fn tls_server_name(text: &str) -> Result<TlsServerName, String> {
    match text {
        "owner" => Ok(TlsServerName::Owner),
        "target" => Ok(TlsServerName::Target),
        _ => Err(format!("`{text}` is not owner or target")),
    }
}

/// One protocol of `upgrades`: an `Upgrade` protocol name (an RFC 9110
/// token, without a version), lower-cased. `h2c` is refused.
pub fn upgrade_protocol(text: &str) -> Result<String, String> {
    if text.is_empty() || !text.bytes().all(crate::http1::fields::is_tchar) {
        return Err(format!(
            "`{text}` is not a protocol name such as websocket (written without a version)"
        ));
    }
    let name = text.to_ascii_lowercase();
    if name == "h2c" {
        return Err(
            "h2c is never forwarded: a connection switched to HTTP/2 would carry \
                    requests for any host and path past routing"
                .into(),
        );
    }
    Ok(name)
}

/// `upgrades` from protocols each read by `upgrade_protocol`.
pub fn upgrades(protocols: Vec<String>) -> Upgrades {
    Upgrades::from_validated(protocols)
}

/// One entry of `retry.on`: `connect`, or a status from 400 to 599.
pub enum RetryCondition {
    Connect,
    Status(StatusCode),
}

pub fn retry_condition(text: &str) -> Result<RetryCondition, String> {
    if text == "connect" {
        return Ok(RetryCondition::Connect);
    }
    match text.parse::<u16>() {
        Ok(code @ 400..=599) => Ok(RetryCondition::Status(
            StatusCode::from_u16(code).expect("400..=599 is a valid status"),
        )),
        _ => Err(format!(
            "`{text}` is not `connect` or a status from 400 to 599"
        )),
    }
}

/// `retry` with its defaults filled in: `attempts` 1, `on` connect, 502, 503, 504.
pub fn retry(attempts: Option<u8>, on: Option<Vec<RetryCondition>>) -> Retry {
    let attempts = attempts.unwrap_or(DEFAULT_RETRY_ATTEMPTS);
    let Some(on) = on else {
        return Retry {
            attempts,
            on_connect: true,
            on_statuses: [502, 503, 504]
                .map(|code| StatusCode::from_u16(code).expect("valid status"))
                .to_vec(),
        };
    };
    let mut retry = Retry {
        attempts,
        on_connect: false,
        on_statuses: Vec::new(),
    };
    for condition in on {
        match condition {
            RetryCondition::Connect => retry.on_connect = true,
            RetryCondition::Status(status) => retry.on_statuses.push(status),
        }
    }
    retry
}

/// The two kinds of rewrite, told apart by the keys written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteKind {
    /// `strip_prefix` and/or `add_prefix`.
    Prefix,
    /// `match` with `replace`.
    Regex,
}

/// Which rewrite the keys present (`strip_prefix`, `add_prefix`, `match`,
/// `replace`; others are ignored) describe, or why they do not fit together.
pub fn rewrite_kind<'k>(present: impl IntoIterator<Item = &'k str>) -> Result<RewriteKind, String> {
    let present: Vec<&str> = present.into_iter().collect();
    let has = |key: &str| present.contains(&key);
    let has_prefix_keys = has("strip_prefix") || has("add_prefix");
    match (has_prefix_keys, has("match"), has("replace")) {
        (true, false, false) => Ok(RewriteKind::Prefix),
        (true, _, _) => Err("match/replace can't be combined with strip_prefix/add_prefix".into()),
        (false, true, true) => Ok(RewriteKind::Regex),
        (false, false, true) => Err("replace needs a match".into()),
        (false, true, false) => Err("match needs a replace".into()),
        (false, false, false) => {
            Err("a rewrite needs strip_prefix/add_prefix or match/replace".into())
        }
    }
}

/// A `strip_prefix` or `add_prefix` value.
pub fn rewrite_prefix(text: &str) -> Result<String, String> {
    if text.starts_with('/') {
        Ok(text.to_owned())
    } else {
        Err("must start with `/`".into())
    }
}

/// How an upstream's name is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolutionMode {
    /// A/AAAA lookups of `host:port`.
    A,
    /// RFC 2782 lookups of an owner name.
    Srv,
}

pub fn resolution_mode(text: &str) -> Result<ResolutionMode, String> {
    match text {
        "a" => Ok(ResolutionMode::A),
        "srv" => Ok(ResolutionMode::Srv),
        other => Err(format!("`{other}` is not a or srv")),
    }
}

/// An SRV owner name such as `_app._tcp.example.internal`.
pub fn srv_owner(text: &str) -> Result<String, String> {
    if text.parse::<IpAddr>().is_ok() || host_port(text).is_ok() {
        return Err(
            "an SRV upstream is an owner name such as _app._tcp.example.internal, not an address"
                .into(),
        );
    }
    dns_name(text)?;
    Ok(text.to_owned())
}

/// `resolution.resolver`: the `host:port` of a DNS server.
pub fn resolver(text: &str) -> Result<DnsServer, String> {
    match host_port(text) {
        Ok(HostPort::Address(address)) => Ok(DnsServer::Address(address)),
        Ok(HostPort::Name { host, port }) => Ok(DnsServer::Name { host, port }),
        Err(reason) => Err(format!("a resolver is host:port: {reason}")),
    }
}

/// Rules that span an SRV resolution's keys, each broken one returned with
/// the key it is reported on, which is always one that was written.
/// `has_sni`: the upstream sets a fixed `sni`; `min_ttl_written`: `min_ttl`
/// was written rather than defaulted.
pub fn srv_resolution_problems(
    resolution: &SrvResolution,
    has_sni: bool,
    min_ttl_written: bool,
) -> Vec<(&'static str, String)> {
    let mut problems = Vec::new();
    if resolution.min_ttl > resolution.max_ttl {
        problems.push(match min_ttl_written {
            true => ("min_ttl", "min_ttl is longer than max_ttl".to_owned()),
            // The default min_ttl is longer than the max_ttl written.
            false => (
                "max_ttl",
                format!(
                    "max_ttl is shorter than min_ttl ({} unless set)",
                    humantime::format_duration(DEFAULT_MIN_TTL)
                ),
            ),
        });
    }
    if resolution.tls_server_name == TlsServerName::Target && has_sni {
        problems.push((
            "tls_server_name",
            "\"target\" can't be combined with a fixed sni".to_owned(),
        ));
    }
    problems
}

/// Why an upstream's `verify = true` can't be honoured, if it can't: a
/// certificate is only checked over TLS, and for a name. `has_server_name`:
/// the upstream sets `sni`, or SRV resolution names the server.
pub fn verify_problem(verify: bool, tls: bool, has_server_name: bool) -> Option<&'static str> {
    match (verify, tls, has_server_name) {
        (false, _, _) => None,
        (true, false, _) => Some("verify needs TLS, and this upstream is not reached over TLS"),
        (true, true, false) => Some("verify needs sni: the certificate is checked for that name"),
        (true, true, true) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_conditions() {
        assert!(matches!(
            retry_condition("connect"),
            Ok(RetryCondition::Connect)
        ));
        assert!(matches!(retry_condition("503"), Ok(RetryCondition::Status(s)) if s == 503));
        for bad in ["399", "600", "five", ""] {
            assert!(retry_condition(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn upgrade_protocols_are_names_and_never_h2c() {
        assert_eq!(upgrade_protocol("WebSocket").as_deref(), Ok("websocket"));
        assert_eq!(
            upgrade_protocol("my-proto.v2").as_deref(),
            Ok("my-proto.v2")
        );
        for refused in ["h2c", "H2C"] {
            let reason = upgrade_protocol(refused).unwrap_err();
            assert!(reason.starts_with("h2c is never forwarded"), "{reason}");
        }
        for bad in ["", "websocket/13", "web socket", "a,b"] {
            let reason = upgrade_protocol(bad).unwrap_err();
            assert!(reason.contains("not a protocol name"), "{bad:?}: {reason}");
        }
        let repeated = upgrades(vec!["websocket".into(), "x".into(), "websocket".into()]);
        assert_eq!(repeated.protocols(), ["websocket", "x"]);
        assert!(repeated.allows("WebSocket") && !repeated.allows("h2c"));
    }

    #[test]
    fn hsts_is_a_max_age_with_optional_directives() {
        let read = |text| hsts(text).map(|hsts| hsts.to_string());
        assert_eq!(read("31536000").as_deref(), Ok("max-age=31536000"));
        assert_eq!(read(" 0 ").as_deref(), Ok("max-age=0"));
        assert_eq!(
            read("63072000; includesubdomains;PRELOAD").as_deref(),
            Ok("max-age=63072000; includeSubDomains; preload")
        );
        assert_eq!(
            read("Max-Age=600; preload;").as_deref(),
            Ok("max-age=600; preload")
        );
        let refusals = [
            ("", "is not an HSTS max-age"),
            ("1y", "is not an HSTS max-age"),
            ("-1", "is not an HSTS max-age"),
            (
                "63072001",
                "0 to 63072000 seconds (two years), found 63072001",
            ),
            (
                "600; includeSubDomain",
                "unknown HSTS directive `includeSubDomain`",
            ),
            ("600; preload; Preload", "`Preload` is written twice"),
        ];
        for (text, reason) in refusals {
            let refused = hsts(text).unwrap_err();
            assert!(refused.contains(reason), "{text:?}: {refused}");
        }
        // As shown (the admin API, the fuzz target's rewritten file), read back the same.
        for include_subdomains in [false, true] {
            for preload in [false, true] {
                let shown = Hsts {
                    max_age: 86_400,
                    include_subdomains,
                    preload,
                };
                assert_eq!(hsts(&shown.to_string()), Ok(shown));
            }
        }
    }
}
