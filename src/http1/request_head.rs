//! A request head (RFC 9112 §3, §5) parsed with `httparse` in place: the
//! method, target and field lines are slices of the read buffer, the fields
//! sit in the caller's `FieldSlots`, and nothing is allocated. A head that
//! has not all arrived is `None`; one larger than `MAX_REQUEST_HEAD_BYTES` or with
//! more than `MAX_HEADERS` fields is refused before it has all arrived.

use super::fields::{FieldSlots, Fields};
use super::{MAX_HEADERS, MAX_REQUEST_HEAD_BYTES};

/// A head the caller refuses: `431` for the limits, `400` for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("the head is over its size limit")]
    TooLarge,
    #[error("the head has more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    #[error("malformed head: {0}")]
    Malformed(httparse::Error),
}

impl HeadError {
    /// Whether the answer is `431 Request Header Fields Too Large`
    /// (RFC 6585 §5) rather than `400`.
    pub fn is_too_large(&self) -> bool {
        matches!(self, HeadError::TooLarge | HeadError::TooManyHeaders)
    }
}

/// A parsed request head; everything borrows the buffer it was parsed from.
#[derive(Debug)]
pub struct RequestHead<'a> {
    pub method: &'a [u8],
    /// The request target as sent (RFC 9112 §3.2); its form is the caller's
    /// to check.
    pub target: &'a [u8],
    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub fields: Fields<'a>,
    /// The head as read, up to and including its empty line (what its
    /// fields are slices of): the body (or the next request) starts at
    /// its length.
    pub bytes: &'a [u8],
}

/// Parses the request head at the start of `buf`: `None` while it is
/// incomplete. Empty lines before the request line are skipped (RFC 9112
/// §2.2) and counted in `head_len`.
pub fn parse_request_head<'a>(
    buf: &'a [u8],
    slots: &'a mut FieldSlots<'a>,
) -> Result<Option<RequestHead<'a>>, HeadError> {
    let mut request = httparse::Request::new(&mut []);
    let status = request.parse_with_uninit_headers(buf, &mut slots.0);
    let Some(head_len) = complete_head(status, buf.len(), MAX_REQUEST_HEAD_BYTES)? else {
        return Ok(None);
    };
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        // httparse fills these in before it says the head is complete.
        return Err(HeadError::Malformed(httparse::Error::Token));
    };
    Ok(Some(RequestHead {
        method: method.as_bytes(),
        target: target.as_bytes(),
        version,
        fields: Fields::new(request.headers),
        bytes: &buf[..head_len],
    }))
}

/// The head's length once `httparse` has all of it, within `limit` bytes
/// and the field limit. Shared with `response_head`.
pub(super) fn complete_head(
    status: httparse::Result<usize>,
    buffered: usize,
    limit: usize,
) -> Result<Option<usize>, HeadError> {
    match status {
        Ok(httparse::Status::Complete(len)) if len > limit => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(len)),
        // More than the limit buffered and still no end: it can only grow.
        Ok(httparse::Status::Partial) if buffered > limit => Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooManyHeaders),
        Err(error) => Err(HeadError::Malformed(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GET: &[u8] = b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n\r\n";

    #[test]
    fn a_complete_head_is_slices_of_the_buffer() {
        let mut buf = GET.to_vec();
        buf.extend_from_slice(b"POST / HTTP/1.1\r\n");
        let mut slots = FieldSlots::new();
        let head = parse_request_head(&buf, &mut slots).unwrap().unwrap();
        assert_eq!(head.method, b"GET");
        assert_eq!(head.target, b"/a?b=c");
        assert_eq!(head.version, 1);
        assert_eq!(head.bytes.len(), GET.len());
        let fields: Vec<_> = head.fields.iter().map(|f| (f.name, f.value)).collect();
        assert_eq!(
            fields,
            [(&b"Host"[..], &b"example.com"[..]), (b"Accept", b"*/*")]
        );
        let range = buf.as_ptr_range();
        assert!(range.contains(&head.target.as_ptr()));
        assert!(range.contains(&head.fields.iter().next().unwrap().value.as_ptr()));
    }

    // RFC 9112 §2.2 (a recipient MAY skip empty lines before a request
    // line), and every prefix is incomplete, never refused.
    #[test]
    fn every_prefix_is_incomplete_and_empty_lines_before_it_are_skipped() {
        let buf = [&b"\r\n"[..], GET].concat();
        for end in 0..buf.len() {
            assert!(
                parse_request_head(&buf[..end], &mut FieldSlots::new())
                    .unwrap()
                    .is_none(),
                "{end}"
            );
        }
        assert_eq!(
            parse_request_head(&buf, &mut FieldSlots::new())
                .unwrap()
                .unwrap()
                .bytes
                .len(),
            buf.len()
        );
    }

    #[test]
    fn http_1_0_is_version_0() {
        let mut slots = FieldSlots::new();
        let head = parse_request_head(b"GET / HTTP/1.0\r\n\r\n", &mut slots)
            .unwrap()
            .unwrap();
        assert_eq!(head.version, 0);
        assert!(head.fields.is_empty());
    }

    // RFC 6585 §5: 431 for a head too large, whether or not it has ended.
    #[test]
    fn a_head_over_the_limit_is_too_large_before_it_ends() {
        let mut buf = b"GET / HTTP/1.1\r\nx: ".to_vec();
        buf.resize(MAX_REQUEST_HEAD_BYTES + 1, b'a');
        assert_eq!(
            parse_request_head(&buf, &mut FieldSlots::new()).unwrap_err(),
            HeadError::TooLarge
        );
        buf.extend_from_slice(b"\r\n\r\n");
        assert_eq!(
            parse_request_head(&buf, &mut FieldSlots::new()).unwrap_err(),
            HeadError::TooLarge
        );
        assert!(HeadError::TooLarge.is_too_large());
    }

    #[test]
    fn a_head_at_the_limit_is_parsed() {
        let mut buf = b"GET / HTTP/1.1\r\nx: ".to_vec();
        buf.resize(MAX_REQUEST_HEAD_BYTES - 4, b'a');
        buf.extend_from_slice(b"\r\n\r\n");
        let mut slots = FieldSlots::new();
        let head = parse_request_head(&buf, &mut slots).unwrap().unwrap();
        assert_eq!(head.bytes.len(), MAX_REQUEST_HEAD_BYTES);
    }

    #[test]
    fn more_than_the_header_limit_is_refused() {
        let mut buf = b"GET / HTTP/1.1\r\n".to_vec();
        for _ in 0..MAX_HEADERS {
            buf.extend_from_slice(b"a: b\r\n");
        }
        let at_limit = [&buf[..], b"\r\n"].concat();
        assert_eq!(
            parse_request_head(&at_limit, &mut FieldSlots::new())
                .unwrap()
                .unwrap()
                .fields
                .len(),
            MAX_HEADERS
        );
        buf.extend_from_slice(b"a: b\r\n\r\n");
        let error = parse_request_head(&buf, &mut FieldSlots::new()).unwrap_err();
        assert_eq!(error, HeadError::TooManyHeaders);
        assert!(error.is_too_large());
    }

    // RFC 9112 §3: one space between the parts of the request line; §5.1:
    // no whitespace between a field name and its colon; §5.2: no obs-fold.
    #[test]
    fn malformed_heads_are_refused() {
        for bad in [
            &b"GET  / HTTP/1.1\r\n\r\n"[..],
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
            b"G\x01T / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nx: a\x00b\r\n\r\n",
        ] {
            let error = parse_request_head(bad, &mut FieldSlots::new()).unwrap_err();
            assert!(
                matches!(error, HeadError::Malformed(_)),
                "{}: {error:?}",
                bad.escape_ascii()
            );
            assert!(!error.is_too_large());
        }
    }
}
