//! The parsers of single written values that the middleware settings share
//! with the rest of the configuration: numbers in a range, booleans, ports,
//! DNS names, host patterns, `host:port` targets, headers and rewrite
//! patterns. Each takes what a user wrote and returns the value or the reason
//! it was refused. They stand apart from `values`, which re-exports them, so
//! that the middleware module can read its values without depending on the
//! whole model: they need only the names and addresses of `names`.

use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;

use http::{HeaderName, HeaderValue};

use super::names::{HostPattern, UpstreamTarget};

/// A whole number written as text (a label value), refused in the words the
/// routes file uses for its numbers.
pub fn whole_number(text: &str, range: RangeInclusive<u64>) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(n) if range.contains(&n) => Ok(n),
        _ => Err(not_in_range(text, &range)),
    }
}

/// Why `found` was refused where a whole number in `range` belongs.
pub fn not_in_range(found: impl std::fmt::Display, range: &RangeInclusive<u64>) -> String {
    format!(
        "must be a whole number from {} to {}, found {found}",
        range.start(),
        range.end()
    )
}

/// `true` or `false`, in any letter case (YAML tools differ in how they write them).
pub fn boolean(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("`{text}` is not true or false")),
    }
}

/// A TCP port, 1 to 65535.
pub fn port(text: &str) -> Result<u16, String> {
    match text.parse::<u32>() {
        Ok(port @ 1..=65535) => Ok(port as u16),
        Ok(_) => Err("port must be 1-65535".into()),
        Err(_) => Err(format!("`{text}` is not a port (1-65535)")),
    }
}

/// A host entry: `example.com`, `*.example.com` or `*`, case-insensitive.
pub fn host_pattern(text: &str) -> Result<HostPattern, String> {
    let lower = text.to_ascii_lowercase();
    if lower == "*" {
        return Ok(HostPattern::Any);
    }
    if lower.contains(':') {
        return Err("a host name carries no port (the port is ignored when matching)".into());
    }
    match lower.strip_prefix("*.") {
        Some(suffix) => dns_name(suffix).map(|()| HostPattern::Wildcard(suffix.to_owned())),
        None => dns_name(&lower).map(|()| HostPattern::Exact(lower)),
    }
}

/// Checks a DNS name: dot-separated labels of letters, digits, `-` and `_`.
pub fn dns_name(name: &str) -> Result<(), String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > 253 {
        return Err(format!(
            "`{name}` is not a valid name (1 to 253 characters)"
        ));
    }
    for label in name.split('.') {
        let valid_chars = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if label.is_empty() || label.len() > 63 || !valid_chars {
            return Err(format!(
                "`{name}` is not a valid name (labels of letters, digits, `-` and `_`, separated by dots)"
            ));
        }
    }
    Ok(())
}

/// An upstream written as `host:port`: an address when the host is an IP
/// literal (IPv6 in brackets), otherwise a name to resolve.
pub enum HostPort {
    Address(SocketAddr),
    Name { host: String, port: u16 },
}

pub fn host_port(text: &str) -> Result<HostPort, String> {
    let (host, port_text) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("`{text}` has no port (write host:port)"))?;
    let port = port(port_text)?;
    if let Some(inner) = host.strip_prefix('[') {
        let ip = inner
            .strip_suffix(']')
            .and_then(|ip| ip.parse::<std::net::Ipv6Addr>().ok())
            .ok_or_else(|| format!("`{host}` is not an IPv6 address"))?;
        return Ok(HostPort::Address(SocketAddr::new(IpAddr::V6(ip), port)));
    }
    if host.contains(':') {
        return Err("an IPv6 address is written in brackets: [2001:db8::1]:8080".into());
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostPort::Address(SocketAddr::new(ip, port)));
    }
    dns_name(host)?;
    Ok(HostPort::Name {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// An upstream written as `host:port` in resolution mode `a`.
pub fn upstream_target(text: &str) -> Result<UpstreamTarget, String> {
    Ok(match host_port(text)? {
        HostPort::Address(address) => UpstreamTarget::Address(address),
        HostPort::Name { host, port } => UpstreamTarget::Name { host, port },
    })
}

/// A request header to add: a valid name and value.
pub fn header(name: &str, value: &str) -> Result<(HeaderName, HeaderValue), String> {
    let name = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("`{name}` is not a valid header name"))?;
    let value = HeaderValue::from_str(value)
        .map_err(|_| format!("the value of `{name}` is not a valid header value"))?;
    Ok((name, value))
}

/// A rewrite pattern, compiled once with the 1 MB compiled-size limit.
pub fn rewrite_pattern(text: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(text)
        .size_limit(1 << 20)
        .build()
        .map_err(|error| match error {
            regex::Error::CompiledTooBig(_) => "the compiled pattern is over 1 MB".to_owned(),
            // The syntax error's last line carries the reason; the lines above draw the pattern.
            other => other
                .to_string()
                .lines()
                .rev()
                .find(|line| !line.trim().is_empty())
                .unwrap_or("invalid pattern")
                .trim()
                .trim_start_matches("error: ")
                .to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        assert_eq!(
            host_pattern("Example.COM"),
            Ok(HostPattern::Exact("example.com".into()))
        );
        assert_eq!(
            host_pattern("*.Example.com"),
            Ok(HostPattern::Wildcard("example.com".into()))
        );
        assert_eq!(host_pattern("*"), Ok(HostPattern::Any));
        for bad in [
            "",
            "a..b",
            "*.",
            "a.*.com",
            "example.com:80",
            "exa mple.com",
            "*foo.com",
        ] {
            assert!(host_pattern(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn host_ports() {
        assert!(matches!(host_port("10.0.0.1:3000"), Ok(HostPort::Address(a)) if a.port() == 3000));
        assert!(matches!(host_port("[2001:db8::1]:8080"), Ok(HostPort::Address(a)) if a.is_ipv6()));
        assert!(
            matches!(host_port("App:8080"), Ok(HostPort::Name { host, port: 8080 }) if host == "app")
        );
        assert_eq!(
            host_port("b:0").err().as_deref(),
            Some("port must be 1-65535")
        );
        assert_eq!(
            host_port("b:70000").err().as_deref(),
            Some("port must be 1-65535")
        );
        for bad in ["app", "2001:db8::1:80", "[nope]:80", "a b:80", "app:x"] {
            assert!(host_port(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn rewrite_patterns_report_the_reason() {
        assert!(rewrite_pattern(r"^/users/(\d+)/profile$").is_ok());
        let reason = rewrite_pattern("^/users/(\\d+").unwrap_err();
        assert!(reason.contains("unclosed group"), "{reason}");
        assert!(rewrite_pattern(r"\w{1000}\w{1000}\w{1000}")
            .unwrap_err()
            .contains("1 MB"));
    }
}
