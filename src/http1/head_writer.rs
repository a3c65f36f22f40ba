//! Request and response heads (RFC 9112 §3, §4, §5) written into one
//! buffer, to go out in one `write`: a head of a few dozen short pieces cost
//! the kernel more as that many `writev` pieces than one copy here (about 4%
//! of dockhand's CPU per request, measured), and laying the pieces out cost
//! as much again. Nothing is formatted: a status is its three digits, and a
//! number is written into a `Decimal` on the caller's stack.
//!
//! Field names and values are taken as they are: the `http` crate's, and
//! `httparse`'s, can't hold CR, LF or NUL (RFC 9110 §5.5). The request
//! target is checked, so that no target can end the request line early.

use std::cell::RefCell;

use http::{StatusCode, Version};

/// What a head can't be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadWriteError {
    #[error("the method or target holds CR, LF, NUL or a space")]
    LineBreak,
    #[error("version 1.{0} is not HTTP/1.0 or HTTP/1.1")]
    Version(u8),
}

/// A head larger than this is not kept for the next one.
const MOST_KEPT_BYTES: usize = 16 * 1024;

/// A worker thread's buffer for the heads of one kind, lent to one head at
/// a time: a head whose write waits keeps it, and a head written meanwhile
/// takes a new one (one of the two is kept when both are given back).
pub struct KeptHead(RefCell<Vec<u8>>);

impl KeptHead {
    pub const fn new() -> Self {
        KeptHead(RefCell::new(Vec::new()))
    }

    /// The buffer, empty.
    pub fn take(&self) -> Vec<u8> {
        let mut head = std::mem::take(&mut *self.0.borrow_mut());
        head.clear();
        head
    }

    /// Keeps `head` for the next one, if it is the larger buffer and not
    /// grown past what a usual head needs.
    pub fn give_back(&self, head: Vec<u8>) {
        let mut kept = self.0.borrow_mut();
        if head.capacity() <= MOST_KEPT_BYTES && kept.capacity() < head.capacity() {
            *kept = head;
        }
    }
}

impl Default for KeptHead {
    fn default() -> Self {
        KeptHead::new()
    }
}

/// `METHOD target HTTP/1.x` (RFC 9112 §3).
pub fn request_line(
    head: &mut Vec<u8>,
    method: &[u8],
    target: &[u8],
    version: u8,
) -> Result<(), HeadWriteError> {
    let version = match version {
        0 => b" HTTP/1.0\r\n",
        1 => b" HTTP/1.1\r\n",
        other => return Err(HeadWriteError::Version(other)),
    };
    let breaks_line = |piece: &[u8]| {
        piece
            .iter()
            .any(|&byte| matches!(byte, b'\r' | b'\n' | b' ' | 0))
    };
    if breaks_line(method) || breaks_line(target) {
        return Err(HeadWriteError::LineBreak);
    }
    head.extend_from_slice(method);
    head.push(b' ');
    head.extend_from_slice(target);
    head.extend_from_slice(version);
    Ok(())
}

/// `HTTP/1.x status reason` (RFC 9112 §4): HTTP/1.0 for `HTTP_10`, else
/// HTTP/1.1.
pub fn status_line(head: &mut Vec<u8>, version: Version, status: StatusCode, reason: &[u8]) {
    head.extend_from_slice(match version {
        Version::HTTP_10 => b"HTTP/1.0 ",
        _ => b"HTTP/1.1 ",
    });
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(reason);
    head.extend_from_slice(b"\r\n");
}

/// One field line, `name: value` (RFC 9112 §5).
pub fn field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// The empty line that ends a head.
pub fn end(head: &mut Vec<u8>) {
    head.extend_from_slice(b"\r\n");
}

/// A number's decimal digits, written on the stack (for `Content-Length`).
#[derive(Clone, Copy, Debug)]
pub struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub fn new(mut number: u64) -> Self {
        let mut digits = [b'0'; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (number % 10) as u8;
            number /= 10;
            if number == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 9112 §3 and §5.
    #[test]
    fn a_request_head_is_written_whole() {
        let length = Decimal::new(1234);
        let mut head = Vec::new();
        request_line(&mut head, b"POST", b"/a?b", 1).unwrap();
        field(&mut head, b"Host", b"example.com");
        field(&mut head, b"content-length", length.as_bytes());
        end(&mut head);
        assert_eq!(
            head,
            b"POST /a?b HTTP/1.1\r\nHost: example.com\r\ncontent-length: 1234\r\n\r\n"
        );
    }

    // RFC 9112 §4.
    #[test]
    fn a_response_head_is_written_whole() {
        let mut head = Vec::new();
        status_line(
            &mut head,
            Version::HTTP_10,
            StatusCode::NOT_FOUND,
            b"Not Found",
        );
        field(&mut head, b"x-dockhand-error", b"no_route");
        end(&mut head);
        assert_eq!(
            head,
            b"HTTP/1.0 404 Not Found\r\nx-dockhand-error: no_route\r\n\r\n"
        );
        let mut head = Vec::new();
        status_line(
            &mut head,
            Version::HTTP_11,
            StatusCode::from_u16(999).unwrap(),
            b"",
        );
        assert_eq!(head, b"HTTP/1.1 999 \r\n");
    }

    // RFC 9110 §5.5, RFC 9112 §3: nothing in the method or target may end
    // the request line early, or split it.
    #[test]
    fn a_request_line_that_would_break_is_refused() {
        for (method, target) in [
            (&b"GET"[..], &b"/\0"[..]),
            (b"GET", b"/a\r\nInjected: yes"),
            (b"GET", b"/a b"),
            (b"GE\nT", b"/"),
        ] {
            let mut head = Vec::new();
            assert_eq!(
                request_line(&mut head, method, target, 1),
                Err(HeadWriteError::LineBreak)
            );
            assert!(head.is_empty(), "nothing written");
        }
        assert_eq!(
            request_line(&mut Vec::new(), b"GET", b"/", 2),
            Err(HeadWriteError::Version(2))
        );
    }

    #[test]
    fn a_kept_head_is_the_larger_and_never_a_huge_one() {
        let kept = KeptHead::new();
        let mut head = kept.take();
        head.extend_from_slice(b"a head");
        let capacity = head.capacity();
        kept.give_back(head);
        let again = kept.take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), capacity);
        kept.give_back(Vec::with_capacity(MOST_KEPT_BYTES + 1));
        kept.give_back(again);
        assert_eq!(kept.take().capacity(), capacity);
    }

    #[test]
    fn decimals_are_written_on_the_stack() {
        for number in [0, 7, 10, 1234, u64::MAX] {
            assert_eq!(
                Decimal::new(number).as_bytes(),
                number.to_string().as_bytes()
            );
        }
    }
}
