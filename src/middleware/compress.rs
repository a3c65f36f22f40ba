//! Response compression: which of the location's encodings the client
//! accepts (its `Accept-Encoding`, RFC 9110 §12.5.3), and whether the
//! upstream's answer may be compressed at all. An answer is compressed
//! only when its bytes are the whole representation, not yet encoded, of a
//! type that compresses well, and not too small to gain from it; then its
//! headers say so, and `Compressed` encodes its body as it streams.

use http::header::{
    ACCEPT_ENCODING, ACCEPT_RANGES, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_RANGE,
    CONTENT_TYPE, ETAG, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::compressed_body::Encoder;
use crate::config::middleware::Encoding;

/// Bodies declared shorter than this are sent as they are: the encoding's
/// own framing (18 bytes of gzip's) and the chunked transfer eat most of
/// what compressing a few hundred bytes saves.
const MIN_SIZE: u64 = 1024;

/// What a request accepts of its location's encodings, decided before its
/// upstream is asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Accepted {
    /// The location does not compress.
    #[default]
    NotOffered,
    /// The location compresses, but not this answer: the client accepts
    /// none of its encodings, or asked with `HEAD` (whose headers would
    /// announce an encoding no body follows).
    Identity,
    With(Encoding),
}

/// What the client accepts of `offered` (in dockhand's order of preference):
/// the encoding it gives the highest weight, ties going to the first
/// offered; none when it sends no `Accept-Encoding`, refuses them all
/// (`q=0`), or prefers `identity` outright.
pub fn accepted(method: &Method, headers: &HeaderMap, offered: &[Encoding]) -> Accepted {
    if method == Method::HEAD {
        return Accepted::Identity;
    }
    let weights = Weights::of(headers);
    let mut best: Option<(Encoding, u16)> = None;
    for &encoding in offered {
        let weight = weights.of_coding(encoding.token());
        if weight > 0 && best.is_none_or(|(_, best_weight)| weight > best_weight) {
            best = Some((encoding, weight));
        }
    }
    match best {
        Some((encoding, weight)) if weights.identity.is_none_or(|identity| weight >= identity) => {
            Accepted::With(encoding)
        }
        _ => Accepted::Identity,
    }
}

/// The weights (thousandths) an `Accept-Encoding` gives its codings.
#[derive(Default)]
struct Weights {
    /// (lower-cased coding, weight), as listed.
    codings: Vec<(String, u16)>,
    /// `*`: any coding not listed.
    any: Option<u16>,
    /// `identity` when listed: an encoding weighted below it is not used.
    identity: Option<u16>,
}

impl Weights {
    fn of(headers: &HeaderMap) -> Weights {
        let mut weights = Weights::default();
        let items = headers
            .get_all(ACCEPT_ENCODING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','));
        for item in items {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let Some(weight) = weight(parts) else {
                continue;
            };
            match coding.as_str() {
                "" => {}
                "*" => weights.any = Some(weight),
                "identity" => weights.identity = Some(weight),
                // RFC 9110 §8.4.1.3: the same as gzip.
                "x-gzip" => weights.codings.push(("gzip".to_owned(), weight)),
                _ => weights.codings.push((coding, weight)),
            }
        }
        weights
    }

    /// A listed coding's weight, else `*`'s, else 0 (not acceptable).
    fn of_coding(&self, token: &str) -> u16 {
        let listed = self.codings.iter().filter(|(coding, _)| coding == token);
        listed
            .map(|(_, weight)| *weight)
            .max()
            .or(self.any)
            .unwrap_or(0)
    }
}

/// An item's `q` parameter in thousandths (1000 without one); `None` when
/// it is malformed, which leaves the item out.
fn weight<'a>(parameters: impl Iterator<Item = &'a str>) -> Option<u16> {
    let mut weight = 1000;
    for parameter in parameters {
        let (name, value) = parameter.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("q") {
            weight = qvalue(value.trim())?;
        }
    }
    Some(weight)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`.
fn qvalue(text: &str) -> Option<u16> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits_only = fraction.len() <= 3 && fraction.bytes().all(|b| b.is_ascii_digit());
    if !digits_only {
        return None;
    }
    let thousandths: u16 = format!("{fraction:0<3}").parse().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Decides on the upstream's answer: when it may be compressed, `Vary`
/// says the answer depends on `Accept-Encoding` (whether or not this
/// client gets it compressed), and if this client accepted an encoding,
/// the headers describe the compressed body and its encoder is returned.
pub fn apply(accepted: Accepted, status: StatusCode, headers: &mut HeaderMap) -> Option<Encoder> {
    if accepted == Accepted::NotOffered || !compressible(status, headers) {
        return None;
    }
    add_vary(headers);
    let Accepted::With(encoding) = accepted else {
        return None;
    };
    // Made before the headers announce it: without one, the answer goes
    // as it is, still correct.
    let encoder = Encoder::new(encoding)
        .inspect_err(|error| tracing::warn!(%error, "no {} encoder", encoding.token()))
        .ok()?;
    headers.insert(CONTENT_ENCODING, HeaderValue::from_static(encoding.token()));
    // The compressed length is known only at the end: sent chunked.
    headers.remove(CONTENT_LENGTH);
    // Byte ranges of the compressed body are not served.
    headers.remove(ACCEPT_RANGES);
    weaken_etag(headers);
    Some(encoder)
}

/// Whether the answer is a whole, unencoded body worth compressing, that
/// its sender allows to be transformed.
fn compressible(status: StatusCode, headers: &HeaderMap) -> bool {
    let has_body = !status.is_informational()
        && status != StatusCode::NO_CONTENT
        && status != StatusCode::NOT_MODIFIED;
    has_body
        && status != StatusCode::PARTIAL_CONTENT
        && !headers.contains_key(CONTENT_ENCODING)
        && !headers.contains_key(CONTENT_RANGE)
        && !has_token(headers, CACHE_CONTROL, "no-transform")
        && headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(compressible_type)
        && super::declared_size(headers).is_none_or(|length| length >= MIN_SIZE)
}

/// Text, and the structured text formats; not images (but SVG), audio,
/// video or archives, which are compressed already.
fn compressible_type(content_type: &str) -> bool {
    let media_type = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media_type.starts_with("text/")
        || media_type.ends_with("+json")
        || media_type.ends_with("+xml")
        || matches!(
            media_type.as_str(),
            "application/json"
                | "application/x-ndjson"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/xml"
                | "application/wasm"
                | "application/graphql"
                | "application/x-www-form-urlencoded"
                | "application/vnd.ms-fontobject"
                | "font/ttf"
                | "font/otf"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "image/bmp"
        )
}

/// Whether a comma-separated header lists `token` (a directive's value aside).
fn has_token(headers: &HeaderMap, name: http::header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|item| item.split('=').next().unwrap_or_default().trim())
        .any(|item| item.eq_ignore_ascii_case(token))
}

/// Adds `Accept-Encoding` to the upstream's `Vary`, unless it is there
/// (or `*`, which varies on everything already).
fn add_vary(headers: &mut HeaderMap) {
    if !has_token(headers, VARY, "accept-encoding") && !has_token(headers, VARY, "*") {
        headers.append(VARY, HeaderValue::from_static("Accept-Encoding"));
    }
}

/// A strong validator names the exact bytes, which compressing changes:
/// `W/` makes it weak, still good for `If-None-Match`.
fn weaken_etag(headers: &mut HeaderMap) {
    let Some(etag) = headers.get(ETAG) else {
        return;
    };
    if etag.as_bytes().starts_with(b"W/") {
        return;
    }
    let mut weak = b"W/".to_vec();
    weak.extend_from_slice(etag.as_bytes());
    if let Ok(weak) = HeaderValue::from_bytes(&weak) {
        headers.insert(ETAG, weak);
    }
}

#[cfg(test)]
#[path = "compress_tests.rs"]
mod tests;
