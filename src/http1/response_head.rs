//! An upstream's response head (RFC 9112 §4) parsed with `httparse` in
//! place, like `request_head`: status, reason, version and field lines as
//! slices of the read buffer, within the same limits.

use super::fields::{FieldSlots, Fields};
use super::request_head::{complete_head, HeadError};
use super::MAX_HEAD_BYTES;

/// A parsed response head; everything borrows the buffer it was parsed from.
#[derive(Debug)]
pub struct ResponseHead<'a> {
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub status: u16,
    pub reason: &'a [u8],
    pub fields: Fields<'a>,
    /// The head as read, up to and including its empty line (what its
    /// fields are slices of).
    pub bytes: &'a [u8],
}

impl ResponseHead<'_> {
    /// An interim response (RFC 9110 §15.2): a final one follows on the same
    /// exchange. `101 Switching Protocols` is final: the protocol changes.
    pub fn is_interim(&self) -> bool {
        (100..200).contains(&self.status) && self.status != 101
    }
}

/// Parses the response head at the start of `buf`: `None` while it is
/// incomplete.
pub fn parse_response_head<'a>(
    buf: &'a [u8],
    slots: &'a mut FieldSlots<'a>,
) -> Result<Option<ResponseHead<'a>>, HeadError> {
    let mut response = httparse::Response::new(&mut []);
    let status = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots.0,
    );
    let Some(head_len) = complete_head(status, buf.len(), MAX_HEAD_BYTES)? else {
        return Ok(None);
    };
    let (Some(version), Some(status), Some(reason)) =
        (response.version, response.code, response.reason)
    else {
        // httparse fills these in before it says the head is complete.
        return Err(HeadError::Malformed(httparse::Error::Status));
    };
    Ok(Some(ResponseHead {
        version,
        status,
        reason: reason.as_bytes(),
        fields: Fields::new(response.headers),
        bytes: &buf[..head_len],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    #[test]
    fn a_response_head_is_parsed_in_place() {
        let mut slots = FieldSlots::new();
        let head = parse_response_head(OK, &mut slots).unwrap().unwrap();
        assert_eq!(
            (head.version, head.status, head.reason),
            (1, 200, &b"OK"[..])
        );
        assert_eq!(head.bytes.len(), OK.len() - 2);
        assert_eq!(head.fields.values("content-length").next(), Some(&b"2"[..]));
        assert!(!head.is_interim());
        for end in 0..head.bytes.len() {
            assert!(
                parse_response_head(&OK[..end], &mut FieldSlots::new())
                    .unwrap()
                    .is_none(),
                "{end}"
            );
        }
    }

    // RFC 9110 §15.2: 1xx are interim, except 101 which switches protocols.
    #[test]
    fn interim_responses_are_told() {
        let head = |line: &[u8]| {
            let buf = [line, b"\r\n\r\n"].concat();
            parse_response_head(&buf, &mut FieldSlots::new())
                .unwrap()
                .unwrap()
                .is_interim()
        };
        assert!(head(b"HTTP/1.1 100 Continue"));
        assert!(head(b"HTTP/1.1 103 Early Hints"));
        assert!(!head(b"HTTP/1.1 101 Switching Protocols"));
        assert!(!head(b"HTTP/1.1 204 No Content"));
    }

    // RFC 9112 §4: the reason phrase may be empty.
    #[test]
    fn an_empty_reason_is_kept_empty() {
        let mut slots = FieldSlots::new();
        let head = parse_response_head(b"HTTP/1.0 404 \r\n\r\n", &mut slots)
            .unwrap()
            .unwrap();
        assert_eq!((head.version, head.status, head.reason), (0, 404, &b""[..]));
    }

    #[test]
    fn oversized_and_malformed_responses_are_refused() {
        let mut big = b"HTTP/1.1 200 OK\r\nx: ".to_vec();
        big.resize(MAX_HEAD_BYTES + 1, b'a');
        assert_eq!(
            parse_response_head(&big, &mut FieldSlots::new()).unwrap_err(),
            HeadError::TooLarge
        );
        for bad in [
            &b"HTTP/1.1 2000 OK\r\n\r\n"[..],
            b"HTTP/1.1 OK\r\n\r\n",
            b"ICY 200 OK\r\n\r\n",
        ] {
            assert!(
                matches!(
                    parse_response_head(bad, &mut FieldSlots::new()),
                    Err(HeadError::Malformed(_))
                ),
                "{}",
                bad.escape_ascii()
            );
        }
    }
}
