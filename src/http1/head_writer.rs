//! Request and response heads written from their pieces (RFC 9112 §3, §4,
//! §5) as a list of `IoSlice`s for one `write_vectored` (`writev`): the
//! method, target, field names and values are the caller's slices (of the
//! read buffer, or dockhand's own constants), the fixed parts and status
//! codes are static, and a number is written into a `Decimal` on the
//! caller's stack. Nothing is formatted or allocated.
//!
//! The list has a fixed capacity `N`, chosen by the caller: a head takes
//! `pieces_for(fields)` slices. A piece with CR, LF or NUL is refused (RFC
//! 9110 §5.5): a value can't end the line it is on. (`header` takes the
//! `http` crate's names and values, which can't hold them.)

use std::io::IoSlice;

use http::{HeaderName, HeaderValue};

/// What a head can't be written with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeadWriteError {
    #[error("more pieces than the writer holds")]
    Full,
    #[error("a piece of the head holds CR, LF or NUL")]
    LineBreak,
    #[error("status {0} is not three digits")]
    Status(u16),
    #[error("version 1.{0} is not HTTP/1.0 or HTTP/1.1")]
    Version(u8),
}

/// The pieces of a head, in order. After an error the head is incomplete
/// and is not to be written.
pub struct HeadWriter<'a, const N: usize> {
    pieces: [IoSlice<'a>; N],
    len: usize,
}

/// The slices a head with `fields` field lines takes: five for the start
/// line, four per field line, one for the empty line.
pub const fn pieces_for(fields: usize) -> usize {
    5 + 4 * fields + 1
}

const REQUEST_VERSIONS: [&[u8]; 2] = [b" HTTP/1.0\r\n", b" HTTP/1.1\r\n"];
const RESPONSE_VERSIONS: [&[u8]; 2] = [b"HTTP/1.0 ", b"HTTP/1.1 "];

/// "100" to "999", so a status code is a static slice.
static STATUS_CODES: [[u8; 3]; 900] = status_codes();

const fn status_codes() -> [[u8; 3]; 900] {
    let mut codes = [[0u8; 3]; 900];
    let mut index = 0;
    while index < 900 {
        let code = index + 100;
        codes[index] = [
            b'0' + (code / 100) as u8,
            b'0' + (code / 10 % 10) as u8,
            b'0' + (code % 10) as u8,
        ];
        index += 1;
    }
    codes
}

impl<'a, const N: usize> Default for HeadWriter<'a, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a, const N: usize> HeadWriter<'a, N> {
    pub fn new() -> Self {
        HeadWriter {
            pieces: [IoSlice::new(&[]); N],
            len: 0,
        }
    }

    /// `METHOD target HTTP/1.x` (RFC 9112 §3).
    pub fn request_line(
        &mut self,
        method: &'a [u8],
        target: &'a [u8],
        version: u8,
    ) -> Result<&mut Self, HeadWriteError> {
        let version = version_piece(&REQUEST_VERSIONS, version)?;
        self.push(method)?;
        self.push_own(b" ")?;
        self.push(target)?;
        self.push_own(version)?;
        Ok(self)
    }

    /// `HTTP/1.x status reason` (RFC 9112 §4).
    pub fn status_line(
        &mut self,
        version: u8,
        status: u16,
        reason: &'a [u8],
    ) -> Result<&mut Self, HeadWriteError> {
        let version = version_piece(&RESPONSE_VERSIONS, version)?;
        let code = usize::from(status)
            .checked_sub(100)
            .and_then(|index| STATUS_CODES.get(index))
            .ok_or(HeadWriteError::Status(status))?;
        self.push_own(version)?;
        self.push_own(code)?;
        self.push_own(b" ")?;
        self.push(reason)?;
        self.push_own(b"\r\n")?;
        Ok(self)
    }

    /// One field line, `name: value` (RFC 9112 §5).
    pub fn field(&mut self, name: &'a [u8], value: &'a [u8]) -> Result<&mut Self, HeadWriteError> {
        self.push(name)?;
        self.push_own(b": ")?;
        self.push(value)?;
        self.push_own(b"\r\n")?;
        Ok(self)
    }

    /// One field line from the `http` crate's types, whose constructors
    /// refuse CR, LF and NUL in names and values: not scanned again (a
    /// scan of every byte of every field was a measurable share of a
    /// request's CPU).
    pub fn header(
        &mut self,
        name: &'a HeaderName,
        value: &'a HeaderValue,
    ) -> Result<&mut Self, HeadWriteError> {
        self.push_own(name.as_str().as_bytes())?;
        self.push_own(b": ")?;
        self.push_own(value.as_bytes())?;
        self.push_own(b"\r\n")?;
        Ok(self)
    }

    /// Ends the head with its empty line: the slices to write, in order.
    pub fn finish(&mut self) -> Result<&mut [IoSlice<'a>], HeadWriteError> {
        self.push_own(b"\r\n")?;
        Ok(&mut self.pieces[..self.len])
    }

    /// One of the caller's pieces: never one with a line break in it.
    fn push(&mut self, piece: &'a [u8]) -> Result<(), HeadWriteError> {
        if piece.iter().any(|&byte| matches!(byte, b'\r' | b'\n' | 0)) {
            return Err(HeadWriteError::LineBreak);
        }
        self.push_own(piece)
    }

    /// One of the writer's own pieces (separators, versions, line ends).
    fn push_own(&mut self, piece: &'a [u8]) -> Result<(), HeadWriteError> {
        let slot = self.pieces.get_mut(self.len).ok_or(HeadWriteError::Full)?;
        *slot = IoSlice::new(piece);
        self.len += 1;
        Ok(())
    }
}

fn version_piece(
    pieces: &[&'static [u8]; 2],
    version: u8,
) -> Result<&'static [u8], HeadWriteError> {
    pieces
        .get(usize::from(version))
        .copied()
        .ok_or(HeadWriteError::Version(version))
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
    use std::io::Write;

    use super::*;

    /// Writes every slice with `write_vectored`, at most `chunk` bytes per
    /// call, as a socket that takes a little at a time would.
    fn write_all(pieces: &mut [IoSlice<'_>], chunk: usize) -> Vec<u8> {
        struct Trickle(Vec<u8>, usize);
        impl Write for Trickle {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.1);
                self.0.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut out = Trickle(Vec::new(), chunk);
        let mut pieces = pieces;
        while !pieces.is_empty() {
            let n = out.write_vectored(pieces).unwrap();
            IoSlice::advance_slices(&mut pieces, n);
        }
        out.0
    }

    // RFC 9112 §3 and §5.
    #[test]
    fn a_request_head_is_written_from_its_pieces() {
        let length = Decimal::new(1234);
        let mut writer = HeadWriter::<{ pieces_for(2) }>::new();
        writer.request_line(b"POST", b"/a?b", 1).unwrap();
        writer.field(b"Host", b"example.com").unwrap();
        writer.field(b"content-length", length.as_bytes()).unwrap();
        let pieces = writer.finish().unwrap();
        let expected = b"POST /a?b HTTP/1.1\r\nHost: example.com\r\ncontent-length: 1234\r\n\r\n";
        assert_eq!(write_all(pieces, usize::MAX), expected);
        assert_eq!(write_all(pieces, 3), expected);
    }

    // RFC 9112 §4.
    #[test]
    fn a_response_head_is_written_from_its_pieces() {
        let mut writer = HeadWriter::<{ pieces_for(1) }>::new();
        writer.status_line(0, 404, b"Not Found").unwrap();
        writer.field(b"x-dockhand-error", b"no_route").unwrap();
        let pieces = writer.finish().unwrap();
        assert_eq!(
            write_all(pieces, 7),
            b"HTTP/1.0 404 Not Found\r\nx-dockhand-error: no_route\r\n\r\n"
        );
        for status in [100, 999] {
            let mut writer = HeadWriter::<{ pieces_for(0) }>::new();
            writer.status_line(1, status, b"").unwrap();
            let written = write_all(writer.finish().unwrap(), usize::MAX);
            assert_eq!(written, format!("HTTP/1.1 {status} \r\n\r\n").as_bytes());
        }
    }

    // RFC 9110 §5.5: CR, LF and NUL never appear in a field.
    #[test]
    fn pieces_that_would_break_the_head_are_refused() {
        let mut writer = HeadWriter::<16>::new();
        assert_eq!(
            writer.field(b"x", b"a\r\nInjected: yes").err(),
            Some(HeadWriteError::LineBreak)
        );
        assert_eq!(
            writer.field(b"x", b"a\r\n").err(),
            Some(HeadWriteError::LineBreak)
        );
        assert_eq!(
            writer.field(b"x\n", b"a").err(),
            Some(HeadWriteError::LineBreak)
        );
        assert_eq!(
            writer.request_line(b"GET", b"/\0", 1).err(),
            Some(HeadWriteError::LineBreak)
        );
        assert_eq!(
            writer.status_line(1, 99, b"").err(),
            Some(HeadWriteError::Status(99))
        );
        assert_eq!(
            writer.status_line(1, 1000, b"").err(),
            Some(HeadWriteError::Status(1000))
        );
        assert_eq!(
            writer.status_line(2, 200, b"").err(),
            Some(HeadWriteError::Version(2))
        );
    }

    #[test]
    fn a_full_writer_says_so() {
        let mut writer = HeadWriter::<{ pieces_for(1) }>::new();
        writer.request_line(b"GET", b"/", 1).unwrap();
        writer.field(b"a", b"b").unwrap();
        assert_eq!(writer.field(b"c", b"d").err(), Some(HeadWriteError::Full));
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
