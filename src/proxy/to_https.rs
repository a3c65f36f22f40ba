//! A host's HTTPS settings applied to its requests: plain HTTP for a host
//! that has a certificate and keeps `https_redirect` on is sent to HTTPS
//! with `308` (RFC 9110 §15.4.9: the method and body are kept, unlike with
//! `301`), and TLS clients of a host with `hsts` are told to come back over
//! HTTPS only (RFC 6797). Whether a request qualifies is `forward`'s; the
//! ACME HTTP-01 answer (`local_answer`) comes before both.

use std::fmt::Write;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, LOCATION, STRICT_TRANSPORT_SECURITY};
use http::{HeaderMap, HeaderValue, Response, StatusCode, Uri};

use super::body::ProxyBody;
use super::client_identity::{PeerInfo, Scheme};

/// The port an `https://` URL means when it names none.
const DEFAULT_HTTPS_PORT: u16 = 443;

const REDIRECT_TEXT: &[u8] = b"This host is served over HTTPS.\n";

/// The `308` to the same host, path and query over HTTPS on `https_port`;
/// `None` when the host can't be written into a URL as is (see `url_host`),
/// and for a target that is not a path (`OPTIONS *`).
pub fn redirect(host: &HeaderValue, https_port: u16, uri: &Uri) -> Option<Response<ProxyBody>> {
    let target = redirect_target(host.to_str().ok()?, https_port, uri)?;
    let mut response = Response::new(ProxyBody::message(Bytes::from_static(REDIRECT_TEXT)));
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    let headers = response.headers_mut();
    headers.insert(LOCATION, target);
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Some(response)
}

/// `https://<host>[:port]<path>[?query]`: the host as the client wrote it
/// (its letter case kept, its port dropped), the HTTPS listener's port
/// unless it is 443, the path and query byte for byte.
pub fn redirect_target(host: &str, https_port: u16, uri: &Uri) -> Option<HeaderValue> {
    let name = url_host(host)?;
    let path = uri.path();
    if !path.starts_with('/') {
        return None;
    }
    let query = uri.query();
    let mut target = String::with_capacity(
        "https://:65535?".len() + name.len() + path.len() + query.map_or(0, str::len),
    );
    target.push_str("https://");
    target.push_str(name);
    if https_port != DEFAULT_HTTPS_PORT {
        let _ = write!(target, ":{https_port}");
    }
    target.push_str(path);
    if let Some(query) = query {
        target.push('?');
        target.push_str(query);
    }
    HeaderValue::try_from(target).ok()
}

/// The host part of a `Host` (port dropped, letter case kept) when it is a
/// name of letters, digits, `-`, `_` and dots, or a bracketed IPv6 literal.
/// Anything else is refused: a wildcard host matches `x/.example.com` or
/// `x?.example.com` too, and written into a `Location` those would send the
/// client to the host `x`.
fn url_host(host: &str) -> Option<&str> {
    let is_port = |port: &str| port.bytes().all(|b| b.is_ascii_digit());
    if let Some(literal) = host.strip_prefix('[') {
        let (address, after) = literal.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        let address_ok = !address.is_empty()
            && address
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        return (port_ok && address_ok).then_some(&host[..address.len() + 2]);
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return None,
        None => host,
    };
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    name_ok.then_some(name)
}

/// Sets the host's `Strict-Transport-Security` on a response to a TLS
/// client, replacing one the upstream sent: the edge terminates TLS, so
/// what browsers are told about it is the edge's setting, and a response
/// carries the field once (RFC 6797 §7.1; browsers read only the first,
/// §8.1). Never on plain HTTP (§7.2), where browsers ignore it anyway. A
/// host without `hsts` leaves the upstream's as it is.
pub fn set_hsts(peer: &PeerInfo, hsts: Option<&HeaderValue>, headers: &mut HeaderMap) {
    if let (Scheme::Https, Some(hsts)) = (peer.scheme, hsts) {
        headers.insert(STRICT_TRANSPORT_SECURITY, hsts.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16, uri: &str) -> Option<String> {
        let uri: Uri = uri.parse().unwrap();
        redirect_target(host, port, &uri).map(|value| value.to_str().unwrap().to_owned())
    }

    #[test]
    fn the_target_keeps_host_path_and_query_as_written() {
        let cases = [
            ("a.test", "/", "https://a.test/"),
            (
                "App.Test:80",
                "/x/y?q=1&r=%20s",
                "https://App.Test/x/y?q=1&r=%20s",
            ),
            // An empty query stays: the path and query are the client's.
            ("a.test", "/search?", "https://a.test/search?"),
            ("a.test.", "/x", "https://a.test./x"),
            ("a.test", "//b.test/x", "https://a.test//b.test/x"),
            (
                "a.test",
                "/a/../b;p=1/%2F/~u",
                "https://a.test/a/../b;p=1/%2F/~u",
            ),
            ("[2001:db8::1]:8080", "/v6?x", "https://[2001:db8::1]/v6?x"),
            ("[::1]", "/", "https://[::1]/"),
            ("127.0.0.1:80", "/ip", "https://127.0.0.1/ip"),
            // Absolute form (a proxy-style request line): the path and query.
            ("a.test", "http://a.test/abs?k=v", "https://a.test/abs?k=v"),
            ("a.test", "http://a.test", "https://a.test/"),
        ];
        for (host, uri, expected) in cases {
            assert_eq!(
                target(host, 443, uri).as_deref(),
                Some(expected),
                "{host} {uri}"
            );
        }
    }

    #[test]
    fn a_port_other_than_443_is_written() {
        assert_eq!(
            target("a.test:8080", 8443, "/x?y").as_deref(),
            Some("https://a.test:8443/x?y")
        );
        assert_eq!(
            target("[::1]:80", 8443, "/").as_deref(),
            Some("https://[::1]:8443/")
        );
    }

    #[test]
    fn hosts_that_would_change_the_url_are_not_redirected() {
        for host in [
            "x/.example.com",
            "x?.example.com",
            "x#.example.com",
            "user@a.example.com",
            "a\\b.example.com",
            "a.test:x",
            "[::1",
            "[::1]x",
            "[a/b]",
            "",
            ":80",
        ] {
            assert_eq!(target(host, 443, "/"), None, "{host:?}");
        }
        assert_eq!(target("a.test", 443, "*"), None, "OPTIONS *");
    }

    #[test]
    fn the_redirect_is_a_308_with_a_short_text() {
        let host = HeaderValue::from_static("a.test");
        let response = redirect(&host, 443, &"/p?q".parse().unwrap()).unwrap();
        assert_eq!(response.status(), StatusCode::PERMANENT_REDIRECT);
        assert_eq!(response.headers()[LOCATION], "https://a.test/p?q");
        assert_eq!(
            response.headers()[CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }

    /// RFC 6797 §7.2: never over plain HTTP; over TLS it replaces the upstream's.
    #[test]
    fn hsts_goes_to_tls_clients_only_and_replaces_the_upstreams() {
        let peer = |scheme| PeerInfo::new("192.0.2.1:5000".parse().unwrap(), scheme, None, &[]);
        let hsts = HeaderValue::from_static("max-age=600");
        let upstream_sent = || {
            let mut headers = HeaderMap::new();
            headers.insert(
                STRICT_TRANSPORT_SECURITY,
                HeaderValue::from_static("max-age=1"),
            );
            headers
        };
        let mut tls = upstream_sent();
        set_hsts(&peer(Scheme::Https), Some(&hsts), &mut tls);
        let values: Vec<_> = tls.get_all(STRICT_TRANSPORT_SECURITY).iter().collect();
        assert_eq!(values, [&hsts]);

        let mut plain = HeaderMap::new();
        set_hsts(&peer(Scheme::Http), Some(&hsts), &mut plain);
        assert!(plain.is_empty());

        let mut no_setting = upstream_sent();
        set_hsts(&peer(Scheme::Https), None, &mut no_setting);
        assert_eq!(no_setting[STRICT_TRANSPORT_SECURITY], "max-age=1");
    }
}
