//! Turning a request's `Host` (or `:authority`) into the key hosts are matched
//! by: port removed, trailing dot removed, lower case, without allocating
//! unless the name has upper-case letters (clients send host names in lower
//! case). A buffer for them in each request's state was 256 bytes zeroed
//! for every request, in memory out of the cache by then.

use std::borrow::Cow;

/// Longest DNS name (253) plus a trailing dot, rounded up.
pub const MAX_HOST_LEN: usize = 256;

/// Returns the match key for `raw` (`Example.com:8080` → `example.com`), a
/// copy only when the name needs lower-casing. `None` when `raw` can't be a host.
pub fn normalize_host(raw: &str) -> Option<Cow<'_, str>> {
    let name = strip_port(raw)?;
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || name.len() > MAX_HOST_LEN {
        return None;
    }
    if !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Some(Cow::Borrowed(name));
    }
    Some(Cow::Owned(name.to_ascii_lowercase()))
}

fn strip_port(raw: &str) -> Option<&str> {
    if raw.starts_with('[') {
        // `[2001:db8::1]:8080`: the port follows the bracket.
        let end = raw.find(']')?;
        return Some(&raw[..=end]);
    }
    match raw.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => Some(name),
        Some(_) => None,
        None => Some(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        let cases = [
            ("example.com", Some("example.com")),
            ("Example.COM:8080", Some("example.com")),
            ("example.com.", Some("example.com")),
            ("[::1]:80", Some("[::1]")),
            ("127.0.0.1:80", Some("127.0.0.1")),
            ("a:b:c", None),
            ("", None),
            (":80", None),
        ];
        for (raw, expected) in cases {
            assert_eq!(normalize_host(raw).as_deref(), expected, "{raw}");
        }
    }
}
