//! Header rules between client and upstream: hop-by-hop headers removed in both
//! directions, then the `X-Forwarded-*` family set, so a client can't strip them.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// `HTTP2-Settings` travels only with `Upgrade: h2c`, and is as
/// connection-specific as the rest (RFC 7540 §3.2.1).
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("http2-settings"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

/// What a connection knows about its peer, computed once per connection.
#[derive(Clone)]
pub struct PeerInfo {
    pub address: std::net::SocketAddr,
    /// The peer's IP as a header value, ready to set.
    pub ip_value: HeaderValue,
    /// Whether the peer is in `--trusted-proxies`.
    pub trusted: bool,
}

/// Removes `Connection`, every header it names, and the fixed hop-by-hop set.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether a `TE` header asks for trailers (gRPC needs `te: trailers` to reach it).
pub fn accepts_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("trailers"))
}

/// Sets the `X-Forwarded-*` headers and `X-Real-IP`. From an untrusted peer they
/// are replaced; from a trusted proxy `X-Forwarded-For` is appended to and the
/// others are kept when present.
pub fn set_forwarded(
    headers: &mut HeaderMap,
    peer: &PeerInfo,
    host: Option<&HeaderValue>,
    proto: &'static str,
) {
    if peer.trusted {
        let forwarded_for = match headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
            Some(chain) => HeaderValue::from_str(&format!("{chain}, {}", peer.address.ip()))
                .unwrap_or_else(|_| peer.ip_value.clone()),
            None => peer.ip_value.clone(),
        };
        headers.insert(&X_FORWARDED_FOR, forwarded_for);
        let ip = peer.ip_value.clone();
        headers.entry(&X_REAL_IP).or_insert(ip);
        headers
            .entry(&X_FORWARDED_PROTO)
            .or_insert(HeaderValue::from_static(proto));
        if let Some(host) = host {
            headers
                .entry(&X_FORWARDED_HOST)
                .or_insert_with(|| host.clone());
        }
    } else {
        headers.insert(&X_FORWARDED_FOR, peer.ip_value.clone());
        headers.insert(&X_REAL_IP, peer.ip_value.clone());
        headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        match host {
            Some(host) => headers.insert(&X_FORWARDED_HOST, host.clone()),
            None => headers.remove(&X_FORWARDED_HOST),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(trusted: bool) -> PeerInfo {
        PeerInfo {
            address: "192.0.2.7:5000".parse().unwrap(),
            ip_value: HeaderValue::from_static("192.0.2.7"),
            trusted,
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn removes_connection_and_what_it_names() {
        let mut map = headers(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
            ("x-kept", "yes"),
        ]);
        remove_hop_by_hop(&mut map);
        assert_eq!(map.len(), 1, "{map:?}");
        assert_eq!(map["x-kept"], "yes");
    }

    #[test]
    fn untrusted_peer_replaces_forwarded_headers() {
        let mut map = headers(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.com"),
        ]);
        set_forwarded(
            &mut map,
            &peer(false),
            Some(&HeaderValue::from_static("a.com")),
            "http",
        );
        assert_eq!(map["x-forwarded-for"], "192.0.2.7");
        assert_eq!(map["x-real-ip"], "192.0.2.7");
        assert_eq!(map["x-forwarded-proto"], "http");
        assert_eq!(map["x-forwarded-host"], "a.com");
    }

    #[test]
    fn trusted_peer_appends_and_keeps() {
        let mut map = headers(&[
            ("x-forwarded-for", "203.0.113.1"),
            ("x-real-ip", "203.0.113.1"),
            ("x-forwarded-proto", "https"),
        ]);
        set_forwarded(
            &mut map,
            &peer(true),
            Some(&HeaderValue::from_static("a.com")),
            "http",
        );
        assert_eq!(map["x-forwarded-for"], "203.0.113.1, 192.0.2.7");
        assert_eq!(map["x-real-ip"], "203.0.113.1");
        assert_eq!(map["x-forwarded-proto"], "https");
        assert_eq!(map["x-forwarded-host"], "a.com");
    }
}
