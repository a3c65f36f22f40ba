//! Hop-by-hop header rules between client and upstream: removed in both
//! directions, except `TE: trailers`. Which upgrade is announced again is
//! `upgrade`'s; the headers that say who the client is are `client_identity`'s.

use http::header::{self, HeaderMap};

use crate::http1::fields::list_items;

/// `HTTP2-Settings` travels only with `Upgrade: h2c`, and is as
/// connection-specific as the rest (RFC 7540 §3.2.1). `Trailer` is not
/// here: it is end-to-end (RFC 9110 §6.6.2), and an HTTP/1.1 sender sends
/// only the trailers it names.
/// Kept as text: comparing two strings looks at their lengths first, so
/// the one pass over a head's names costs a few instructions a name.
static HOP_BY_HOP: [&str; 7] = [
    "connection",
    "http2-settings",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// Removes `Connection`, every header it names, and the fixed hop-by-hop set.
/// Allocates nothing: the names are looked up as the text they are.
pub fn remove_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds which of the seven are there: most
    // heads carry none, the rest one or two, and only those are looked up
    // again to be removed.
    let mut present = [false; HOP_BY_HOP.len()];
    for name in headers.keys() {
        let name = name.as_str();
        if let Some(index) = HOP_BY_HOP.iter().position(|hop| *hop == name) {
            present[index] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    // One `Connection` line at a time, held apart (a reference count, not a
    // copy) while the names it lists are removed. Removing `Connection`
    // itself is left to the end, so that every line of it is read.
    let mut line = 0;
    while let Some(listed) = headers
        .get_all(header::CONNECTION)
        .iter()
        .nth(line)
        .cloned()
    {
        for name in list_items(listed.as_bytes()) {
            // Items are visible ASCII, so always text.
            let name = std::str::from_utf8(name).unwrap_or_default();
            if !name.eq_ignore_ascii_case(header::CONNECTION.as_str()) {
                headers.remove(name);
            }
        }
        line += 1;
    }
    for (name, _) in HOP_BY_HOP.iter().zip(present).filter(|(_, there)| *there) {
        headers.remove(*name);
    }
}

/// Whether a `TE` header asks for trailers (gRPC needs `te: trailers` to reach it).
pub fn accepts_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .flat_map(|value| list_items(value.as_bytes()))
        .any(|token| token.eq_ignore_ascii_case(b"trailers"))
}

/// A header map of `pairs`, for the proxy's unit tests.
#[cfg(test)]
pub(super) fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
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

    #[test]
    fn every_connection_line_is_read_whatever_it_lists() {
        let mut map = header_map(&[
            // Naming `Connection` itself must not hide the lines after it.
            ("connection", "Connection, X-First,, not a name"),
            ("connection", " x-second ,close"),
            ("x-first", "1"),
            ("x-second", "2"),
            ("x-kept", "yes"),
        ]);
        remove_hop_by_hop(&mut map);
        assert_eq!(map.len(), 1, "{map:?}");
        assert_eq!(map["x-kept"], "yes");
    }

    #[test]
    fn each_fixed_hop_by_hop_header_goes_without_a_connection_header() {
        for hop in HOP_BY_HOP.iter().skip(1) {
            let mut map = header_map(&[("x-kept", "yes"), (hop, "1"), ("vary", "te")]);
            remove_hop_by_hop(&mut map);
            assert_eq!(map.len(), 2, "{hop}: {map:?}");
            assert!(!map.contains_key(*hop), "{hop}");
        }
    }
}
