//! Hop-by-hop header rules between client and upstream: removed in both
//! directions, except `TE: trailers`. Which upgrade is announced again is
//! `upgrade`'s; the headers that say who the client is are `client_identity`'s.

use http::header::{self, HeaderMap, HeaderName};

/// `HTTP2-Settings` travels only with `Upgrade: h2c`, and is as
/// connection-specific as the rest (RFC 7540 §3.2.1). `Trailer` is not
/// here: it is end-to-end (RFC 9110 §6.6.2), and an HTTP/1.1 sender sends
/// only the trailers it names.
static HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    HeaderName::from_static("http2-settings"),
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes `Connection`, every header it names, and the fixed hop-by-hop set.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // Most heads carry none of them: one pass over their names costs less
    // than a lookup of each of the seven.
    if !headers.keys().any(|name| HOP_BY_HOP.contains(name)) {
        return;
    }
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

/// A header map of `pairs`, for the proxy's unit tests.
#[cfg(test)]
pub(super) fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_connection_and_what_it_names() {
        let mut map = header_map(&[
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
            ("x-kept", "yes"),
            // End-to-end (RFC 9110 §6.6.2): it names the trailers to send.
            ("trailer", "x-checksum"),
        ]);
        remove_hop_by_hop(&mut map);
        assert_eq!(map.len(), 2, "{map:?}");
        assert_eq!(map["x-kept"], "yes");
        assert_eq!(map["trailer"], "x-checksum");
    }
}
