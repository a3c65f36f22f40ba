//! Protocol switches (`Upgrade`, RFC 9110 §7.8): which of the protocols a
//! client asks for its location forwards (`upgrades`), whether an upstream's
//! `101` switches to one of them, and the splice of the two connections once
//! both have switched. A request asking for no allowed protocol goes upstream
//! as a plain request: hop-by-hop removal has taken its `Upgrade`,
//! `HTTP2-Settings` and `Connection`, so the upstream has no switch to
//! answer, and a `101` it sends anyway is refused rather than tunnelled (a
//! tunnel would carry whatever the client sends next past routing).

use http::header::{self, HeaderMap, HeaderValue};
use hyper_util::rt::TokioIo;

use crate::config::Upgrades;
use crate::upstream::InFlight;

/// The client's `Upgrade` protocols, every line joined, when its
/// `Connection` asks for a switch; `None` otherwise.
pub fn asked(headers: &HeaderMap) -> Option<HeaderValue> {
    if !list_items(headers, &header::CONNECTION).any(|token| token.eq_ignore_ascii_case("upgrade"))
    {
        return None;
    }
    joined(list_items(headers, &header::UPGRADE))
}

/// Of the protocols `asked`, those `allowed`, as the `Upgrade` sent
/// upstream; `None` when none is.
pub fn forwarded(asked: &HeaderValue, allowed: &Upgrades) -> Option<HeaderValue> {
    let text = asked.to_str().ok()?;
    joined(items(text).filter(|protocol| allowed.allows(protocol_name(protocol))))
}

/// Sets `Connection: upgrade` and `Upgrade`, after hop-by-hop removal took them.
pub fn set_upgrade(headers: &mut HeaderMap, protocols: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocols);
}

/// The protocol an upstream's `101` (with `response` headers) switched to,
/// when the request `forwarded` a switch and every protocol the upstream
/// names is one it offered (RFC 9110 §7.8: a server switches only to
/// protocols the client listed); otherwise why the switch is refused.
pub fn accepted_switch(
    forwarded: Option<&HeaderValue>,
    response: &HeaderMap,
) -> Result<HeaderValue, UnexpectedSwitch> {
    let to = joined(list_items(response, &header::UPGRADE));
    let Some(offered) = forwarded else {
        return Err(UnexpectedSwitch::NotAsked { to });
    };
    let Some(to) = to else {
        return Err(UnexpectedSwitch::Unnamed);
    };
    let offered_text = offered.to_str().unwrap_or_default();
    let was_offered = |protocol: &str| {
        items(offered_text)
            .any(|offer| protocol_name(offer).eq_ignore_ascii_case(protocol_name(protocol)))
    };
    match to.to_str() {
        Ok(text) if items(text).all(was_offered) => Ok(to),
        _ => Err(UnexpectedSwitch::NotOffered {
            to,
            offered: offered.clone(),
        }),
    }
}

/// Why an upstream's `101` is answered with `502 unexpected_upgrade`.
#[derive(Debug, thiserror::Error)]
pub enum UnexpectedSwitch {
    #[error("the upstream switched protocols (to {to:?}) though no upgrade its location allows was asked for")]
    NotAsked { to: Option<HeaderValue> },
    #[error("the upstream answered 101 without naming a protocol in Upgrade")]
    Unnamed,
    #[error("the upstream switched to {to:?}, which the request did not offer ({offered:?})")]
    NotOffered {
        to: HeaderValue,
        offered: HeaderValue,
    },
}

/// Copies bytes both ways between the client and the upstream once both sides
/// have switched protocols; ends when either side closes. The connection
/// counts as in flight to its upstream until then.
pub async fn splice(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    _in_flight: InFlight,
) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(pair) => pair,
        Err(error) => {
            tracing::debug!(%error, "protocol switch failed");
            return;
        }
    };
    let mut client = TokioIo::new(client);
    let mut upstream = TokioIo::new(upstream);
    if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(%error, "upgraded connection ended");
    }
}

/// `websocket/13` → `websocket`: what `upgrades` lists.
fn protocol_name(protocol: &str) -> &str {
    protocol.split('/').next().unwrap_or(protocol).trim()
}

/// The non-empty items of a comma-separated header, over all its lines.
fn list_items<'h>(
    headers: &'h HeaderMap,
    name: &header::HeaderName,
) -> impl Iterator<Item = &'h str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(items)
}

fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// The items as one header value, `None` when there are none.
fn joined<'i>(items: impl Iterator<Item = &'i str>) -> Option<HeaderValue> {
    let text = items.collect::<Vec<_>>().join(", ");
    if text.is_empty() {
        return None;
    }
    HeaderValue::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::values;
    use crate::proxy::headers::header_map;

    fn allowing(protocols: &[&str]) -> Upgrades {
        values::upgrades(protocols.iter().map(|p| (*p).to_owned()).collect())
    }

    #[test]
    fn a_switch_is_asked_for_with_connection_upgrade() {
        let asked_for = header_map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
            ("upgrade", "x-other"),
        ]);
        assert_eq!(asked(&asked_for).unwrap(), "websocket, x-other");
        assert!(asked(&header_map(&[("upgrade", "websocket")])).is_none());
        assert!(asked(&header_map(&[("connection", "upgrade")])).is_none());
    }

    #[test]
    fn only_allowed_protocols_are_forwarded() {
        let default = Upgrades::default();
        let asked = |text: &'static str| HeaderValue::from_static(text);
        assert_eq!(
            forwarded(&asked("WebSocket"), &default).unwrap(),
            "WebSocket"
        );
        assert!(forwarded(&asked("h2c"), &default).is_none());
        assert!(forwarded(&asked("h2c/1"), &default).is_none());
        assert_eq!(
            forwarded(&asked("h2c, websocket"), &default).unwrap(),
            "websocket"
        );
        assert!(forwarded(&asked("websocket"), &allowing(&[])).is_none());
        assert_eq!(
            forwarded(&asked("custom/2, websocket"), &allowing(&["custom"])).unwrap(),
            "custom/2"
        );
    }

    #[test]
    fn a_101_must_switch_to_a_protocol_offered() {
        let offered = HeaderValue::from_static("websocket");
        let switched = |to: &[(&str, &str)]| accepted_switch(Some(&offered), &header_map(to));
        assert_eq!(switched(&[("upgrade", "WebSocket")]).unwrap(), "WebSocket");
        assert!(matches!(
            switched(&[("upgrade", "h2c")]),
            Err(UnexpectedSwitch::NotOffered { .. })
        ));
        assert!(matches!(
            switched(&[("upgrade", "websocket, h2c")]),
            Err(UnexpectedSwitch::NotOffered { .. })
        ));
        assert!(matches!(switched(&[]), Err(UnexpectedSwitch::Unnamed)));
        let unasked = accepted_switch(None, &header_map(&[("upgrade", "h2c")]));
        assert!(matches!(unasked, Err(UnexpectedSwitch::NotAsked { .. })));
    }
}
