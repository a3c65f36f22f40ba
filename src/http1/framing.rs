//! Where a message's body ends (RFC 9112 §6), and what its head says of the
//! connection (§9.3 persistence, `Expect: 100-continue`, `Upgrade`), read
//! from a parsed head.
//!
//! Requests are held to the strict reading of §6: a request with both
//! `Transfer-Encoding` and `Content-Length` is refused (§6.1 allows it, and
//! it is how requests are smuggled past a proxy, §11.2), as is one whose
//! final coding is not `chunked` (§6.3 item 4), one with `chunked` twice
//! (§7), `Transfer-Encoding` in HTTP/1.0 (§6.1), and any `Content-Length`
//! that is not one number (§6.3 item 5: a list, a sign, other characters,
//! an overflow, or differing repeats). Any of these is answered `400`.

use super::fields::{is_visible_ascii, list_items, ConnectionOptions, Fields};
use super::request_head::RequestHead;
use super::response_head::ResponseHead;

/// How a request's body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestFraming {
    /// No body (RFC 9112 §6.3 item 7).
    None,
    /// Exactly this many bytes (possibly 0).
    Length(u64),
    /// Chunked (RFC 9112 §7.1), with `chunked::ChunkedDecoder`.
    Chunked,
}

/// How a response's body is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body: an answer to `HEAD`, a 1xx, 204 or 304, or a 2xx to
    /// `CONNECT` (the connection becomes a tunnel).
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection (RFC 9112 §6.3 items 4, 8).
    UntilClose,
}

/// A head whose framing can't be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FramingError {
    #[error("Transfer-Encoding beside Content-Length")]
    LengthWithTransferEncoding,
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    TransferEncodingInHttp10,
    #[error("the final transfer coding of a request is not chunked")]
    NotChunked,
    #[error("chunked is applied more than once")]
    ChunkedTwice,
    #[error("Transfer-Encoding is not a list of codings")]
    InvalidTransferEncoding,
    #[error("Content-Length is not one decimal number")]
    InvalidLength,
    #[error("Content-Length given twice with different values")]
    ConflictingLengths,
}

/// What a request's head says besides its framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFacts {
    /// The connection stays open after this exchange (RFC 9112 §9.3).
    pub persistent: bool,
    /// The client waits for `100 Continue` before its body (RFC 9110
    /// §10.1.1); ignored in HTTP/1.0, as the RFC says.
    pub expects_continue: bool,
    /// An `Upgrade` (RFC 9110 §7.8, HTTP/1.1 only) or a `CONNECT` (§9.3.6):
    /// the connection may become something else after the answer.
    pub upgrade: bool,
}

pub fn request_framing(head: &RequestHead<'_>) -> Result<RequestFraming, FramingError> {
    let codings = transfer_codings(&head.fields)?;
    if codings == Codings::Absent {
        return Ok(match content_length(&head.fields)? {
            Some(length) => RequestFraming::Length(length),
            None => RequestFraming::None,
        });
    }
    if head.version == 0 {
        return Err(FramingError::TransferEncodingInHttp10);
    }
    // Whatever the length says, even when it is malformed.
    if head.fields.values("content-length").next().is_some() {
        return Err(FramingError::LengthWithTransferEncoding);
    }
    match codings {
        Codings::Chunked => Ok(RequestFraming::Chunked),
        _ => Err(FramingError::NotChunked),
    }
}

/// The framing of `head`, an answer to a request with `request_method`.
pub fn response_framing(
    head: &ResponseHead<'_>,
    request_method: &[u8],
) -> Result<ResponseFraming, FramingError> {
    let status = head.status;
    if request_method == b"HEAD"
        || (100..200).contains(&status)
        || status == 204
        || status == 304
        || (request_method == b"CONNECT" && (200..300).contains(&status))
    {
        return Ok(ResponseFraming::None);
    }
    let codings = transfer_codings(&head.fields)?;
    if codings != Codings::Absent && head.version == 0 {
        // RFC 9112 §6.1: the framing of such a message is faulty.
        return Err(FramingError::TransferEncodingInHttp10);
    }
    match codings {
        // RFC 9112 §6.3 item 3: the coding overrides any length, which the
        // caller drops before passing the response on.
        Codings::Chunked => Ok(ResponseFraming::Chunked),
        Codings::NotChunked => Ok(ResponseFraming::UntilClose),
        Codings::Absent => Ok(match content_length(&head.fields)? {
            Some(length) => ResponseFraming::Length(length),
            None => ResponseFraming::UntilClose,
        }),
    }
}

pub fn request_facts(head: &RequestHead<'_>) -> RequestFacts {
    let http11 = head.version == 1;
    RequestFacts {
        persistent: persistent(head.version, head.fields.connection()),
        expects_continue: http11
            && head
                .fields
                .values("expect")
                .any(|value| value.eq_ignore_ascii_case(b"100-continue")),
        upgrade: head.method == b"CONNECT"
            || (http11 && head.fields.values("upgrade").next().is_some()),
    }
}

/// Whether the connection may carry another request after this head's
/// exchange (RFC 9112 §9.3), by its version and what its `Connection`
/// fields say: `close` ends it, whichever field says it; otherwise HTTP/1.1
/// persists and HTTP/1.0 persists only with `keep-alive` (§9.3, and
/// Appendix C.2.2). A response body read until close ends it anyway.
pub fn persistent(version: u8, connection: ConnectionOptions) -> bool {
    !connection.close && (version == 1 || connection.keep_alive)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codings {
    Absent,
    /// `chunked` last, and only once.
    Chunked,
    NotChunked,
}

/// The transfer codings over every `Transfer-Encoding` field, in order.
fn transfer_codings(fields: &Fields<'_>) -> Result<Codings, FramingError> {
    let mut codings = Codings::Absent;
    let mut seen_chunked = false;
    for value in fields.values("transfer-encoding") {
        if !is_visible_ascii(value) {
            return Err(FramingError::InvalidTransferEncoding);
        }
        // A field with no items (an empty value) ends in no coding.
        codings = Codings::NotChunked;
        for item in list_items(value) {
            let chunked = is_chunked(item);
            if chunked && seen_chunked {
                // RFC 9112 §7: chunked is never applied twice.
                return Err(FramingError::ChunkedTwice);
            }
            seen_chunked |= chunked;
            codings = if chunked {
                Codings::Chunked
            } else {
                Codings::NotChunked
            };
        }
    }
    Ok(codings)
}

/// The item is `chunked` itself: it takes no parameters (RFC 9112 §7.1),
/// so `chunked;x=1` is some other coding.
fn is_chunked(item: &[u8]) -> bool {
    item.eq_ignore_ascii_case(b"chunked")
}

/// The one `Content-Length` of every such field: each must be all digits
/// (RFC 9110 §8.6), and repeats must agree.
fn content_length(fields: &Fields<'_>) -> Result<Option<u64>, FramingError> {
    let mut length = None;
    for value in fields.values("content-length") {
        let this = decimal(value).ok_or(FramingError::InvalidLength)?;
        if length.is_some_and(|earlier| earlier != this) {
            return Err(FramingError::ConflictingLengths);
        }
        length = Some(this);
    }
    Ok(length)
}

/// A length's digits (RFC 9110 §8.6: `1*DIGIT`, no sign, no spaces) as a
/// number; `None` for anything else, or past `u64`.
pub fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |number, &digit| {
        if !digit.is_ascii_digit() {
            return None;
        }
        number.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::{parse_request_head, parse_response_head, FieldSlots};

    fn framing(head: &str) -> Result<RequestFraming, FramingError> {
        let buf = format!("{head}\r\n\r\n");
        let mut slots = FieldSlots::new();
        let head = parse_request_head(buf.as_bytes(), &mut slots)
            .unwrap()
            .unwrap();
        request_framing(&head)
    }

    fn facts(head: &str) -> RequestFacts {
        let buf = format!("{head}\r\n\r\n");
        let mut slots = FieldSlots::new();
        let head = parse_request_head(buf.as_bytes(), &mut slots)
            .unwrap()
            .unwrap();
        request_facts(&head)
    }

    fn response(head: &str, method: &str) -> Result<ResponseFraming, FramingError> {
        let buf = format!("{head}\r\n\r\n");
        let mut slots = FieldSlots::new();
        let head = parse_response_head(buf.as_bytes(), &mut slots)
            .unwrap()
            .unwrap();
        response_framing(&head, method.as_bytes())
    }

    // RFC 9112 §6.3 items 5-7.
    #[test]
    fn requests_are_framed_by_their_length_or_have_no_body() {
        assert_eq!(framing("GET / HTTP/1.1"), Ok(RequestFraming::None));
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 12"),
            Ok(RequestFraming::Length(12))
        );
        assert_eq!(
            framing("POST / HTTP/1.0\r\nContent-Length: 007"),
            Ok(RequestFraming::Length(7))
        );
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3"),
            Ok(RequestFraming::Length(3))
        );
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 18446744073709551615"),
            Ok(RequestFraming::Length(u64::MAX))
        );
    }

    // RFC 9112 §6.3 item 5: an invalid or ambiguous length is unrecoverable.
    #[test]
    fn malformed_lengths_are_refused() {
        for value in [
            "",
            "+5",
            "-5",
            "5, 5",
            "0x10",
            "1 2",
            "18446744073709551616",
            "５",
        ] {
            assert_eq!(
                framing(&format!("POST / HTTP/1.1\r\nContent-Length: {value}")),
                Err(FramingError::InvalidLength),
                "{value:?}"
            );
        }
        assert_eq!(
            framing("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4"),
            Err(FramingError::ConflictingLengths)
        );
    }

    // RFC 9112 §6.3 item 4 and §7.
    #[test]
    fn chunked_requests_end_in_chunked_once() {
        for value in ["chunked", "Chunked", "gzip, chunked", "gzip,chunked "] {
            assert_eq!(
                framing(&format!("POST / HTTP/1.1\r\nTransfer-Encoding: {value}")),
                Ok(RequestFraming::Chunked),
                "{value:?}"
            );
        }
        assert_eq!(
            framing("POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked"),
            Ok(RequestFraming::Chunked)
        );
        for value in [
            "gzip",
            "chunked, gzip",
            "identity",
            "",
            "chunked,",
            "chunked;x=1",
        ] {
            assert_eq!(
                framing(&format!("POST / HTTP/1.1\r\nTransfer-Encoding: {value}")),
                Err(FramingError::NotChunked),
                "{value:?}"
            );
        }
        assert_eq!(
            framing("POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked"),
            Err(FramingError::ChunkedTwice)
        );
        for codings in [
            "chunked\r\nTransfer-Encoding: chunked",
            "chunked, gzip, chunked",
        ] {
            assert_eq!(
                framing(&format!("POST / HTTP/1.1\r\nTransfer-Encoding: {codings}")),
                Err(FramingError::ChunkedTwice),
                "{codings:?}"
            );
        }
        assert_eq!(
            framing("POST / HTTP/1.1\r\nTransfer-Encoding: chu\u{e9}nked"),
            Err(FramingError::InvalidTransferEncoding)
        );
    }

    // RFC 9112 §6.1: a server may reject a request with both, and a
    // proxy that doesn't is how requests are smuggled (§11.2).
    #[test]
    fn transfer_encoding_with_a_length_is_refused() {
        for head in [
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked",
            "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip",
        ] {
            assert_eq!(
                framing(head),
                Err(FramingError::LengthWithTransferEncoding),
                "{head}"
            );
        }
        // Also when the length is itself malformed.
        assert_eq!(
            framing("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: x"),
            Err(FramingError::LengthWithTransferEncoding)
        );
    }

    // RFC 9112 §6.1: Transfer-Encoding was added in HTTP/1.1.
    #[test]
    fn transfer_encoding_in_http_1_0_is_refused() {
        assert_eq!(
            framing("POST / HTTP/1.0\r\nTransfer-Encoding: chunked"),
            Err(FramingError::TransferEncodingInHttp10)
        );
        assert_eq!(
            response("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked", "GET"),
            Err(FramingError::TransferEncodingInHttp10)
        );
    }

    // RFC 9112 §6.3 items 1-2: no body after HEAD, 1xx, 204, 304, or a
    // 2xx to CONNECT, whatever the head says.
    #[test]
    fn responses_without_content_have_no_body() {
        assert_eq!(
            response("HTTP/1.1 200 OK\r\nContent-Length: 5", "HEAD"),
            Ok(ResponseFraming::None)
        );
        for status in ["100 Continue", "204 No Content", "304 Not Modified"] {
            assert_eq!(
                response(
                    &format!("HTTP/1.1 {status}\r\nTransfer-Encoding: chunked"),
                    "GET"
                ),
                Ok(ResponseFraming::None),
                "{status}"
            );
        }
        assert_eq!(
            response("HTTP/1.1 200 Connection established", "CONNECT"),
            Ok(ResponseFraming::None)
        );
        assert_eq!(
            response(
                "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 1",
                "CONNECT"
            ),
            Ok(ResponseFraming::Length(1))
        );
    }

    // RFC 9112 §6.3 items 3, 4, 8.
    #[test]
    fn responses_are_chunked_sized_or_read_until_close() {
        assert_eq!(
            response(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5",
                "GET"
            ),
            Ok(ResponseFraming::Chunked)
        );
        assert_eq!(
            response("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip", "GET"),
            Ok(ResponseFraming::UntilClose)
        );
        assert_eq!(
            response("HTTP/1.1 200 OK", "GET"),
            Ok(ResponseFraming::UntilClose)
        );
        assert_eq!(
            response("HTTP/1.1 200 OK\r\nContent-Length: 5", "GET"),
            Ok(ResponseFraming::Length(5))
        );
        assert_eq!(
            response("HTTP/1.1 200 OK\r\nContent-Length: 5, 5", "GET"),
            Err(FramingError::InvalidLength)
        );
    }

    // RFC 9112 §9.3.
    #[test]
    fn persistence_follows_the_version_and_connection_options() {
        assert!(facts("GET / HTTP/1.1").persistent);
        assert!(!facts("GET / HTTP/1.1\r\nConnection: keep-alive, Close").persistent);
        assert!(!facts("GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive").persistent);
        assert!(!facts("GET / HTTP/1.0").persistent);
        assert!(facts("GET / HTTP/1.0\r\nConnection: Keep-Alive").persistent);
        assert!(!facts("GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close").persistent);
        let buf = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n";
        let mut slots = FieldSlots::new();
        let response = parse_response_head(buf, &mut slots).unwrap().unwrap();
        assert!(persistent(response.version, response.fields.connection()));
    }

    // RFC 9110 §10.1.1 (100-continue, ignored in HTTP/1.0), §7.8 (Upgrade,
    // HTTP/1.1 only), §9.3.6 (CONNECT).
    #[test]
    fn expectations_and_upgrades_are_told() {
        let plain = facts("POST / HTTP/1.1");
        assert!(!plain.expects_continue && !plain.upgrade);
        assert!(facts("POST / HTTP/1.1\r\nExpect: 100-Continue").expects_continue);
        assert!(!facts("POST / HTTP/1.0\r\nExpect: 100-continue").expects_continue);
        assert!(facts("GET / HTTP/1.1\r\nUpgrade: websocket").upgrade);
        assert!(!facts("GET / HTTP/1.0\r\nUpgrade: websocket").upgrade);
        assert!(facts("CONNECT a:443 HTTP/1.1").upgrade);
    }
}
