//! The headers that say who the client is (its address, and the protocol,
//! host, port and path prefix it asked for) are dockhand's to set. From an
//! untrusted peer, every such claim the client sent is replaced with what the
//! connection says, or removed; from a `--trusted-proxies` peer the claims are
//! kept, the address chains (`Forwarded`, `X-Forwarded-For`) are appended to
//! and what is absent is set. Headers in dockhand's own namespace
//! (`x-dockhand-*`) are taken from no client.
//!
//! This runs for every request: what depends only on the connection is built
//! once per connection (`PeerInfo`), and a value built per request is written
//! once, into the thread's buffer of small copies (`http1::arena`).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use bytes::{BufMut, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ipnet::IpNet;

use crate::connect::SetFields;
use crate::http1::arena;
use crate::http1::fields::is_tchar;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
static X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");
static X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static X_CLIENT_IP: HeaderName = HeaderName::from_static("x-client-ip");

/// Request headers whose names start with this mean what dockhand says.
const OWN_NAMESPACE: &str = "x-dockhand-";

/// Between the elements of a list header's value.
const LIST_SEPARATOR: &[u8] = b", ";

/// How the client reached dockhand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    /// Over the HTTPS listener (TLS).
    Https,
}

impl Scheme {
    /// As `X-Forwarded-Proto` and `Forwarded: proto=` write it.
    pub fn as_str(self) -> &'static str {
        self.value().to_str().expect("a scheme is ASCII")
    }

    /// `as_str` as a header value, kept for every request to borrow.
    fn value(self) -> &'static HeaderValue {
        static HTTP: HeaderValue = HeaderValue::from_static("http");
        static HTTPS: HeaderValue = HeaderValue::from_static("https");
        match self {
            Scheme::Http => &HTTP,
            Scheme::Https => &HTTPS,
        }
    }
}

/// What a connection knows about its peer, computed once per connection.
pub struct PeerInfo {
    pub address: SocketAddr,
    pub scheme: Scheme,
    /// The peer's IP as a header value, ready to set.
    ip_value: HeaderValue,
    /// The peer's IP as RFC 7239 writes a node: the value of `for=`.
    forwarded_node: Box<str>,
    /// The port the peer connected to, for `X-Forwarded-Port`; none when
    /// the listener could not tell its own address.
    local_port: Option<HeaderValue>,
    /// `--trusted-proxies`, kept only for a peer that is one (so `Some`
    /// says the peer is trusted): the client
    /// it speaks for is found in its `X-Forwarded-For` (a copy per
    /// connection of a proxy, which keeps its connections open).
    trusted_proxies: Option<Box<[IpNet]>>,
}

impl PeerInfo {
    pub fn new(
        address: SocketAddr,
        scheme: Scheme,
        local_port: Option<HeaderValue>,
        trusted_proxies: &[IpNet],
    ) -> PeerInfo {
        // Peers on a dual-stack listener arrive as `::ffff:a.b.c.d`: they are IPv4 clients.
        let ip = address.ip().to_canonical();
        let trusted = trusted_proxies.iter().any(|net| net.contains(&ip));
        PeerInfo {
            address,
            scheme,
            ip_value: HeaderValue::from_str(&ip.to_string())
                .expect("an IP address is a valid header value"),
            forwarded_node: forwarded_node(ip).into_boxed_str(),
            local_port,
            trusted_proxies: trusted.then(|| trusted_proxies.into()),
        }
    }

    /// Whether the peer is one of `--trusted-proxies`.
    pub fn is_trusted(&self) -> bool {
        self.trusted_proxies.is_some()
    }

    /// The client's address as `--trusted-proxies` establish it: the
    /// peer's, unless the peer is a trusted proxy; then the last address
    /// of its `X-Forwarded-For` that is not a trusted proxy too (each proxy
    /// appends the address it was reached from; the ones before could be
    /// made up by the client), or the first when all are.
    pub fn client_ip(&self, headers: &HeaderMap) -> IpAddr {
        let peer = self.address.ip().to_canonical();
        let Some(trusted) = &self.trusted_proxies else {
            return peer;
        };
        let chain: Vec<&str> = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .collect();
        let mut client = peer;
        // From the right: the nearest hops first.
        for item in chain.into_iter().rev() {
            // An entry that is not an address ends what can be believed.
            let Ok(address) = item.trim().parse::<IpAddr>() else {
                break;
            };
            let address = address.to_canonical();
            client = address;
            if !trusted.iter().any(|net| net.contains(&address)) {
                break;
            }
        }
        client
    }
}

/// An address as an RFC 7239 node (§6): IPv4 as it is; IPv6 in brackets,
/// and quoted, since `[`, `:` and `]` can't appear in a token.
fn forwarded_node(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("\"[{ip}]\""),
    }
}

/// Sets (in `set`) the headers that claim who the client is, for a request
/// that came from `peer` (over its scheme) and asked for `host`, and
/// removes the client's `x-dockhand-*` ones from `headers`.
pub fn set_client_identity<'a>(
    headers: &mut HeaderMap,
    set: &mut SetFields<'a>,
    peer: &'a PeerInfo,
    host: Option<&'a HeaderValue>,
) {
    remove_own_namespace(headers);
    let this_hop = ForwardedElement {
        node: &peer.forwarded_node,
        scheme: peer.scheme,
        host: host.map(|host| (host, is_token(host.as_bytes()))),
    };
    if peer.is_trusted() {
        extend_claims(headers, set, peer, this_hop);
    } else {
        replace_claims(set, peer, this_hop);
    }
}

/// From an untrusted peer: only what the connection says is passed on.
fn replace_claims<'a>(set: &mut SetFields<'a>, peer: &'a PeerInfo, this_hop: ForwardedElement<'a>) {
    let forwarded = build_value(this_hop.len(), |value| this_hop.write(value));
    set.set(&header::FORWARDED, forwarded.map(Cow::Owned));
    set.set_borrowed(&X_FORWARDED_FOR, Some(&peer.ip_value));
    set.set_borrowed(&X_REAL_IP, Some(&peer.ip_value));
    set.set_borrowed(&X_FORWARDED_PROTO, Some(peer.scheme.value()));
    set.set_borrowed(&X_FORWARDED_HOST, this_hop.host.map(|(host, _)| host));
    set.set_borrowed(&X_FORWARDED_PORT, peer.local_port.as_ref());
    // dockhand says neither (a `rewrite.strip_prefix` is not announced), so a
    // client's would reach the upstream unchecked.
    set.set(&X_FORWARDED_PREFIX, None);
    set.set(&X_CLIENT_IP, None);
}

/// From a trusted proxy: its claims are kept, the chains get this hop, and
/// what it did not say is said.
fn extend_claims<'a>(
    headers: &HeaderMap,
    set: &mut SetFields<'a>,
    peer: &'a PeerInfo,
    this_hop: ForwardedElement<'a>,
) {
    let forwarded = appended(headers, &header::FORWARDED, this_hop.len(), |value| {
        this_hop.write(value)
    });
    set.set(&header::FORWARDED, forwarded.map(Cow::Owned));
    let ip = peer.ip_value.as_bytes();
    let forwarded_for = appended(headers, &X_FORWARDED_FOR, ip.len(), |value| {
        value.extend_from_slice(ip)
    });
    set.set(&X_FORWARDED_FOR, forwarded_for.map(Cow::Owned));
    let mut unless_said = |name: &'static HeaderName, value: Option<Cow<'a, HeaderValue>>| {
        if let Some(value) = value.filter(|_| !headers.contains_key(name)) {
            set.set(name, Some(value));
        }
    };
    unless_said(&X_REAL_IP, Some(Cow::Borrowed(&peer.ip_value)));
    unless_said(&X_FORWARDED_PROTO, Some(Cow::Borrowed(peer.scheme.value())));
    unless_said(
        &X_FORWARDED_HOST,
        this_hop.host.map(|(host, _)| Cow::Borrowed(host)),
    );
    unless_said(
        &X_FORWARDED_PORT,
        peer.local_port.as_ref().map(Cow::Borrowed),
    );
}

/// Removes every `x-dockhand-*` header.
fn remove_own_namespace(headers: &mut HeaderMap) {
    let is_own = |name: &HeaderName| name.as_str().starts_with(OWN_NAMESPACE);
    // Nearly every request has none: looking first spares it the list.
    if !headers.keys().any(is_own) {
        return;
    }
    let own: Vec<HeaderName> = headers
        .keys()
        .filter(|name| is_own(name))
        .cloned()
        .collect();
    for name in own {
        headers.remove(name);
    }
}

/// One RFC 7239 element about this hop: `for=NODE;proto=PROTO;host=HOST`.
struct ForwardedElement<'a> {
    node: &'a str,
    scheme: Scheme,
    /// The host, and whether it is a token (written as it is, else quoted):
    /// told once, for both the length and the writing.
    host: Option<(&'a HeaderValue, bool)>,
}

impl ForwardedElement<'_> {
    const FOR: &'static [u8] = b"for=";
    const PROTO: &'static [u8] = b";proto=";
    const HOST: &'static [u8] = b";host=";

    /// The bytes `write` writes.
    fn len(&self) -> usize {
        let host = self.host.map_or(0, |(host, token)| {
            Self::HOST.len() + parameter_len(host.as_bytes(), token)
        });
        Self::FOR.len() + self.node.len() + Self::PROTO.len() + self.scheme.as_str().len() + host
    }

    fn write(&self, out: &mut BytesMut) {
        out.extend_from_slice(Self::FOR);
        out.extend_from_slice(self.node.as_bytes());
        out.extend_from_slice(Self::PROTO);
        out.extend_from_slice(self.scheme.as_str().as_bytes());
        if let Some((host, token)) = self.host {
            out.extend_from_slice(Self::HOST);
            write_parameter(host.as_bytes(), token, out);
        }
    }
}

/// The length of `raw` written as an RFC 7239 value (see
/// `write_parameter`); `token`: whether `raw` is one.
fn parameter_len(raw: &[u8], token: bool) -> usize {
    if token {
        return raw.len();
    }
    let escapes = raw.iter().filter(|&&byte| needs_escape(byte)).count();
    raw.len() + escapes + 2
}

/// Writes `raw` as RFC 7239 §4 writes a value: as it is when it is a token,
/// else as a quoted-string (a host with a port, an IPv6 host) with `"` and
/// `\` escaped. Header value bytes are all allowed in a quoted-string
/// otherwise (RFC 7230 §3.2.6).
fn write_parameter(raw: &[u8], token: bool, out: &mut BytesMut) {
    if token {
        out.extend_from_slice(raw);
        return;
    }
    out.put_u8(b'"');
    for &byte in raw {
        if needs_escape(byte) {
            out.put_u8(b'\\');
        }
        out.put_u8(byte);
    }
    out.put_u8(b'"');
}

fn needs_escape(byte: u8) -> bool {
    byte == b'"' || byte == b'\\'
}

/// RFC 7230 §3.2.6: one or more `tchar`.
fn is_token(raw: &[u8]) -> bool {
    !raw.is_empty() && raw.iter().all(|&byte| is_tchar(byte))
}

/// The value of the list header `name` with one more element, which `write`
/// writes in `element_len` bytes: every value already there (every line, in
/// order, as one list), then the element.
fn appended(
    headers: &HeaderMap,
    name: &HeaderName,
    element_len: usize,
    write: impl FnOnce(&mut BytesMut),
) -> Option<HeaderValue> {
    let earlier = || {
        headers
            .get_all(name)
            .iter()
            .filter(|value| !value.is_empty())
    };
    let earlier_len: usize = earlier()
        .map(|value| value.len() + LIST_SEPARATOR.len())
        .sum();
    build_value(earlier_len + element_len, |out| {
        for value in earlier() {
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(LIST_SEPARATOR);
        }
        write(out);
    })
}

/// A header value that `write` writes in `len` bytes, cut from the
/// thread's `arena`. None only if `write` wrote bytes a header can't hold,
/// which the callers never do: their bytes come from header values and
/// from dockhand.
fn build_value(len: usize, write: impl FnOnce(&mut BytesMut)) -> Option<HeaderValue> {
    let value = arena::written(len, write);
    debug_assert_eq!(
        value.len(),
        len,
        "the length computed is the length written"
    );
    HeaderValue::from_maybe_shared(value).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::header_map;

    /// `headers` as the upstream gets them: with the identity set.
    fn set_client_identity(headers: &mut HeaderMap, peer: &PeerInfo, host: Option<&HeaderValue>) {
        let mut set = SetFields::default();
        super::set_client_identity(headers, &mut set, peer, host);
        set.apply(headers);
    }

    fn peer(address: &str, trusted: bool) -> PeerInfo {
        let trusted_proxies: Vec<IpNet> = match trusted {
            true => vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
            false => Vec::new(),
        };
        PeerInfo::new(
            address.parse().unwrap(),
            Scheme::Http,
            Some(HeaderValue::from(8080u16)),
            &trusted_proxies,
        )
    }

    fn forwarded_for(address: &str, host: &str) -> String {
        let mut map = HeaderMap::new();
        let host = HeaderValue::from_str(host).unwrap();
        set_client_identity(&mut map, &peer(address, false), Some(&host));
        map["forwarded"].to_str().unwrap().to_owned()
    }

    #[test]
    fn the_client_behind_trusted_proxies_is_the_last_untrusted_forwarded_address() {
        let proxies: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let from = |peer: &str| PeerInfo::new(peer.parse().unwrap(), Scheme::Http, None, &proxies);
        let chain = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(&X_FORWARDED_FOR, HeaderValue::from_str(value).unwrap());
            }
            headers
        };
        let ip = |text: &str| text.parse::<IpAddr>().unwrap();
        // An untrusted peer is the client, whatever it claims.
        let claims = chain(&["198.51.100.1"]);
        assert_eq!(from("192.0.2.9:1").client_ip(&claims), ip("192.0.2.9"));
        // Through two trusted proxies: the address before them, not the
        // one the client put first.
        let through = chain(&["203.0.113.66, 198.51.100.1", "10.1.1.1"]);
        assert_eq!(from("10.0.0.2:1").client_ip(&through), ip("198.51.100.1"));
        // No claim: the proxy itself; only proxies: the first of them.
        assert_eq!(from("10.0.0.2:1").client_ip(&chain(&[])), ip("10.0.0.2"));
        assert_eq!(
            from("10.0.0.2:1").client_ip(&chain(&["10.3.3.3"])),
            ip("10.3.3.3")
        );
        // Garbage ends the chain where it is.
        let garbage = chain(&["198.51.100.1, nonsense, 10.1.1.1"]);
        assert_eq!(from("10.0.0.2:1").client_ip(&garbage), ip("10.1.1.1"));
    }

    #[test]
    fn nodes_quote_ipv6_addresses_only() {
        assert_eq!(forwarded_node("192.0.2.7".parse().unwrap()), "192.0.2.7");
        assert_eq!(
            forwarded_node("2001:db8::1".parse().unwrap()),
            "\"[2001:db8::1]\""
        );
    }

    #[test]
    fn forwarded_quotes_what_is_not_a_token() {
        assert_eq!(
            forwarded_for("192.0.2.7:5000", "a.example"),
            "for=192.0.2.7;proto=http;host=a.example"
        );
        assert_eq!(
            forwarded_for("[2001:db8::1]:5000", "a.example:8080"),
            "for=\"[2001:db8::1]\";proto=http;host=\"a.example:8080\""
        );
        assert_eq!(
            forwarded_for("192.0.2.7:5000", "[2001:db8::2]"),
            "for=192.0.2.7;proto=http;host=\"[2001:db8::2]\""
        );
        assert_eq!(
            forwarded_for("192.0.2.7:5000", r#"a"b\c d"#),
            r#"for=192.0.2.7;proto=http;host="a\"b\\c d""#
        );
    }

    #[test]
    fn a_mapped_ipv4_peer_is_named_as_ipv4() {
        assert_eq!(
            forwarded_for("[::ffff:192.0.2.7]:5000", "a.example"),
            "for=192.0.2.7;proto=http;host=a.example"
        );
    }

    #[test]
    fn an_element_without_host_has_no_host_parameter() {
        let mut map = HeaderMap::new();
        set_client_identity(&mut map, &peer("192.0.2.7:5000", false), None);
        assert_eq!(map["forwarded"], "for=192.0.2.7;proto=http");
        assert!(map.get("x-forwarded-host").is_none());
    }

    #[test]
    fn an_untrusted_peer_has_every_claim_replaced_or_removed() {
        let mut map = header_map(&[
            ("forwarded", "for=6.6.6.6;proto=https;host=evil.test"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "6.6.6.7"),
            ("x-real-ip", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-host", "evil.test"),
            ("x-forwarded-port", "443"),
            ("x-forwarded-prefix", "/admin"),
            ("x-client-ip", "6.6.6.6"),
            ("x-kept", "yes"),
        ]);
        let host = HeaderValue::from_static("a.example");
        set_client_identity(&mut map, &peer("192.0.2.7:5000", false), Some(&host));
        let single = |name: &str| {
            let values: Vec<_> = map.get_all(name).iter().collect();
            assert_eq!(values.len(), 1, "{name}: {values:?}");
            values[0].to_str().unwrap().to_owned()
        };
        assert_eq!(
            single("forwarded"),
            "for=192.0.2.7;proto=http;host=a.example"
        );
        assert_eq!(single("x-forwarded-for"), "192.0.2.7");
        assert_eq!(single("x-real-ip"), "192.0.2.7");
        assert_eq!(single("x-forwarded-proto"), "http");
        assert_eq!(single("x-forwarded-host"), "a.example");
        assert_eq!(single("x-forwarded-port"), "8080");
        assert!(map.get("x-forwarded-prefix").is_none());
        assert!(map.get("x-client-ip").is_none());
        assert_eq!(map["x-kept"], "yes");
    }

    #[test]
    fn a_trusted_peer_has_its_chains_extended_and_its_claims_kept() {
        let mut map = header_map(&[
            ("forwarded", "for=203.0.113.1;proto=https"),
            ("forwarded", "for=203.0.113.2"),
            ("x-forwarded-for", "203.0.113.1"),
            ("x-forwarded-for", "203.0.113.2"),
            ("x-real-ip", "203.0.113.1"),
            ("x-forwarded-proto", "https"),
            ("x-forwarded-port", "443"),
            ("x-forwarded-prefix", "/app"),
            ("x-client-ip", "203.0.113.1"),
        ]);
        let host = HeaderValue::from_static("a.example");
        set_client_identity(&mut map, &peer("192.0.2.7:5000", true), Some(&host));
        assert_eq!(
            map["forwarded"],
            "for=203.0.113.1;proto=https, for=203.0.113.2, for=192.0.2.7;proto=http;host=a.example"
        );
        assert_eq!(map.get_all("forwarded").iter().count(), 1);
        assert_eq!(
            map["x-forwarded-for"],
            "203.0.113.1, 203.0.113.2, 192.0.2.7"
        );
        assert_eq!(map.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(map["x-real-ip"], "203.0.113.1");
        assert_eq!(map["x-forwarded-proto"], "https");
        assert_eq!(map["x-forwarded-host"], "a.example");
        assert_eq!(map["x-forwarded-port"], "443");
        assert_eq!(map["x-forwarded-prefix"], "/app");
        assert_eq!(map["x-client-ip"], "203.0.113.1");
    }

    #[test]
    fn a_trusted_peer_that_says_nothing_gets_this_hop_only() {
        let mut map = HeaderMap::new();
        let host = HeaderValue::from_static("a.example");
        set_client_identity(&mut map, &peer("[2001:db8::1]:5000", true), Some(&host));
        assert_eq!(
            map["forwarded"],
            "for=\"[2001:db8::1]\";proto=http;host=a.example"
        );
        assert_eq!(map["x-forwarded-for"], "2001:db8::1");
        assert_eq!(map["x-real-ip"], "2001:db8::1");
        assert_eq!(map["x-forwarded-proto"], "http");
        assert_eq!(map["x-forwarded-port"], "8080");
        assert!(map.get("x-forwarded-prefix").is_none());
    }

    #[test]
    fn dockhand_headers_are_taken_from_no_peer() {
        for trusted in [false, true] {
            let mut map = header_map(&[
                ("x-dockhand-error", "no_host"),
                ("x-dockhand-user", "admin"),
                ("x-dockhand-user", "root"),
                ("x-dockhandy", "kept"),
            ]);
            set_client_identity(&mut map, &peer("192.0.2.7:5000", trusted), None);
            let own: Vec<_> = map
                .keys()
                .filter(|name| name.as_str().starts_with("x-dockhand-"))
                .collect();
            assert!(own.is_empty(), "trusted: {trusted}, left: {own:?}");
            assert_eq!(map["x-dockhandy"], "kept");
        }
    }
}
