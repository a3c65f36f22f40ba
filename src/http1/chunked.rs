//! The chunked transfer coding (RFC 9112 §7.1) decoded incrementally: a
//! state machine fed the bytes as they arrive, in slices of any size, that
//! tells where the data is within each slice (so the body is passed on
//! without copying it), where the body ends, and what its trailer section
//! holds.
//!
//! Bounded: a chunk size has at most 16 significant hex digits (a `u64`), a
//! chunk-size line at most `MAX_CHUNK_LINE` bytes, all chunk extensions of
//! one body fewer than `MAX_EXTENSION_BYTES` (§7.1.1 asks a server to limit
//! them), the trailer section at most `MAX_HEAD_BYTES` and `MAX_HEADERS`
//! fields. Every line of the framing ends in CRLF: a bare LF is refused.
//! Extensions are skipped unread, as §7.1.1 allows.

use std::ops::Range;

use super::{MAX_HEADERS, MAX_HEAD_BYTES};

/// The most bytes of one chunk-size line (size, whitespace, extensions),
/// without its CRLF.
pub const MAX_CHUNK_LINE: usize = 4096;
/// The most significant hex digits of a chunk size: what a `u64` holds.
pub const MAX_SIZE_DIGITS: u32 = 16;
/// All the chunk extensions of one body are shorter than this (hyper's
/// limit, so the new path refuses no less than the old one).
pub const MAX_EXTENSION_BYTES: u64 = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    #[error("a chunk size is not hex digits")]
    InvalidSize,
    #[error("a chunk size has more than {MAX_SIZE_DIGITS} significant digits")]
    SizeTooLong,
    #[error("a chunk-size line is longer than {MAX_CHUNK_LINE} bytes")]
    LineTooLong,
    #[error("the chunk extensions add up to {MAX_EXTENSION_BYTES} bytes or more")]
    ExtensionsTooLong,
    #[error("a line of the chunked framing ends in a bare LF")]
    BareLf,
    #[error("a trailer field line ends in a bare LF")]
    TrailerBareLf,
    #[error("a CR in the chunked framing is not followed by LF")]
    MissingLf,
    #[error("a chunk's data is not followed by CRLF")]
    MissingDataCrlf,
    #[error("the trailer section is larger than {MAX_HEAD_BYTES} bytes")]
    TrailersTooLarge,
    #[error("the trailer section has more than {MAX_HEADERS} fields")]
    TooManyTrailers,
    #[error("malformed trailer section: {0}")]
    InvalidTrailers(httparse::Error),
}

/// What one call to `ChunkedDecoder::decode` did with its input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// The bytes of the input used: the rest is for the next call (or, once
    /// `done`, the next message).
    pub consumed: usize,
    /// Body data within the input (empty when there is none); it always
    /// ends at `consumed`.
    pub data: Range<usize>,
    /// The body has ended: the last chunk and the trailer section are read.
    pub done: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The first digit of a chunk size.
    Start,
    Size,
    /// Whitespace after the size (RFC 9112 §7.1.1's BWS before `;`).
    SizeWhitespace,
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// After the last chunk's line, or after a trailer field line.
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// The chunk's size while its line is read, then its data still due.
    size: u64,
    significant_digits: u32,
    line_len: usize,
    extension_bytes: u64,
    /// The trailer section as it arrives; allocated only when there is one.
    trailers: Vec<u8>,
    trailer_fields: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Start,
            size: 0,
            significant_digits: 0,
            line_len: 0,
            extension_bytes: 0,
            trailers: Vec::new(),
            trailer_fields: 0,
        }
    }

    /// Reads `input` up to the end of the next run of data (returned as a
    /// range of `input`), the end of the body, or the end of `input`.
    /// Call again with what was not consumed, and with more input when all
    /// of it was. After an error the body can't be trusted: the connection
    /// ends.
    pub fn decode(&mut self, input: &[u8]) -> Result<Progress, ChunkedError> {
        let mut at = 0;
        while at < input.len() && self.state != State::Done {
            if self.state == State::Data {
                let available = input.len() - at;
                let take = usize::try_from(self.size).map_or(available, |due| due.min(available));
                // `take` is at most `size`, so this can't underflow.
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = State::DataCr;
                }
                return Ok(Progress {
                    consumed: at + take,
                    data: at..at + take,
                    done: false,
                });
            }
            self.step(input[at])?;
            at += 1;
        }
        Ok(Progress {
            consumed: at,
            data: at..at,
            done: self.is_done(),
        })
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The trailer section once the body is done: its field lines and the
    /// empty line that ends it, or nothing when it has no fields.
    pub fn trailers(&self) -> &[u8] {
        &self.trailers
    }

    fn step(&mut self, byte: u8) -> Result<(), ChunkedError> {
        self.state = match (self.state, byte) {
            (State::Start, _) => {
                let digit = hex_digit(byte).ok_or(ChunkedError::InvalidSize)?;
                self.line_len = 0;
                self.significant_digits = 0;
                self.size = 0;
                self.size_digit(digit)?;
                State::Size
            }
            (State::Size, b'\r') | (State::SizeWhitespace, b'\r') | (State::Extension, b'\r') => {
                State::SizeLf
            }
            (State::Size, b'\n') | (State::SizeWhitespace, b'\n') | (State::Extension, b'\n') => {
                return Err(ChunkedError::BareLf)
            }
            (State::Size, b' ' | b'\t') | (State::SizeWhitespace, b' ' | b'\t') => {
                self.line_byte()?;
                State::SizeWhitespace
            }
            (State::Size, b';') | (State::SizeWhitespace, b';') => {
                self.line_byte()?;
                State::Extension
            }
            (State::Size, _) => {
                let digit = hex_digit(byte).ok_or(ChunkedError::InvalidSize)?;
                self.size_digit(digit)?;
                State::Size
            }
            (State::SizeWhitespace, _) => return Err(ChunkedError::InvalidSize),
            (State::Extension, _) => {
                self.line_byte()?;
                self.extension_bytes += 1;
                if self.extension_bytes >= MAX_EXTENSION_BYTES {
                    return Err(ChunkedError::ExtensionsTooLong);
                }
                State::Extension
            }
            (State::SizeLf, b'\n') if self.size == 0 => State::TrailerStart,
            (State::SizeLf, b'\n') => State::Data,
            (State::DataCr, b'\r') => State::DataLf,
            (State::DataLf, b'\n') => State::Start,
            (State::DataCr, _) | (State::DataLf, _) => return Err(ChunkedError::MissingDataCrlf),
            (State::TrailerStart, b'\r') => State::EndLf,
            (State::TrailerStart, b'\n') | (State::TrailerLine, b'\n') => {
                return Err(ChunkedError::TrailerBareLf)
            }
            (State::TrailerStart, _) | (State::TrailerLine, _) => {
                self.trailer_byte(byte)?;
                if byte == b'\r' {
                    State::TrailerLf
                } else {
                    State::TrailerLine
                }
            }
            (State::TrailerLf, b'\n') => {
                if self.trailer_fields >= MAX_HEADERS {
                    return Err(ChunkedError::TooManyTrailers);
                }
                self.trailer_fields += 1;
                self.trailer_byte(byte)?;
                State::TrailerStart
            }
            (State::EndLf, b'\n') => {
                self.end_trailers()?;
                State::Done
            }
            (State::SizeLf | State::TrailerLf | State::EndLf, _) => {
                return Err(ChunkedError::MissingLf)
            }
            // Data is taken by `decode` before any byte is stepped, and
            // nothing is stepped once done.
            (State::Data, _) | (State::Done, _) => self.state,
        };
        Ok(())
    }

    fn size_digit(&mut self, digit: u8) -> Result<(), ChunkedError> {
        self.line_byte()?;
        if self.significant_digits > 0 || digit > 0 {
            self.significant_digits += 1;
        }
        if self.significant_digits > MAX_SIZE_DIGITS {
            return Err(ChunkedError::SizeTooLong);
        }
        self.size = self
            .size
            .checked_mul(16)
            .and_then(|size| size.checked_add(u64::from(digit)))
            .ok_or(ChunkedError::SizeTooLong)?;
        Ok(())
    }

    fn line_byte(&mut self) -> Result<(), ChunkedError> {
        self.line_len += 1;
        if self.line_len > MAX_CHUNK_LINE {
            return Err(ChunkedError::LineTooLong);
        }
        Ok(())
    }

    fn trailer_byte(&mut self, byte: u8) -> Result<(), ChunkedError> {
        if self.trailers.len() >= MAX_HEAD_BYTES {
            return Err(ChunkedError::TrailersTooLarge);
        }
        self.trailers.push(byte);
        Ok(())
    }

    /// The empty line after the trailer fields has come: they must parse
    /// as field lines (RFC 9112 §7.1.2 refers to §5's syntax).
    fn end_trailers(&mut self) -> Result<(), ChunkedError> {
        if self.trailers.is_empty() {
            return Ok(());
        }
        self.trailers.extend_from_slice(b"\r\n");
        let mut parsed = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let fields = self.trailer_fields.min(MAX_HEADERS);
        match httparse::parse_headers(&self.trailers, &mut parsed[..fields]) {
            Ok(httparse::Status::Complete((len, _))) if len == self.trailers.len() => Ok(()),
            Ok(_) => Err(ChunkedError::InvalidTrailers(httparse::Error::NewLine)),
            Err(error) => Err(ChunkedError::InvalidTrailers(error)),
        }
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body and trailers of `input` fed in pieces of `piece` bytes, and
    /// the bytes left after the body.
    fn decode_in_pieces(
        input: &[u8],
        piece: usize,
    ) -> Result<(Vec<u8>, Vec<u8>, usize), ChunkedError> {
        let mut decoder = ChunkedDecoder::new();
        let mut body = Vec::new();
        let mut fed = 0;
        let mut buffered: &[u8] = &[];
        while !decoder.is_done() {
            if buffered.is_empty() {
                let end = (fed + piece).min(input.len());
                if fed == end {
                    break;
                }
                buffered = &input[fed..end];
                fed = end;
            }
            let progress = decoder.decode(buffered)?;
            body.extend_from_slice(&buffered[progress.data.clone()]);
            buffered = &buffered[progress.consumed..];
        }
        assert!(decoder.is_done(), "incomplete: {}", input.escape_ascii());
        Ok((body, decoder.trailers().to_vec(), fed - buffered.len()))
    }

    fn decode(input: &[u8]) -> Result<(Vec<u8>, Vec<u8>, usize), ChunkedError> {
        decode_in_pieces(input, input.len())
    }

    // RFC 9112 §7.1: chunks, the last chunk, trailers; extensions skipped
    // (§7.1.1); whatever follows belongs to the next message.
    #[test]
    fn chunks_decode_to_the_same_body_however_they_arrive() {
        let input = b"5;name=value\r\nhello\r\n6 ; a ; b=\"c\"\r\n world\r\n0\r\nEtag: x\r\nA: b\r\n\r\nGET";
        let expected = (
            b"hello world".to_vec(),
            b"Etag: x\r\nA: b\r\n\r\n".to_vec(),
            input.len() - 3,
        );
        for piece in 1..=input.len() {
            assert_eq!(
                decode_in_pieces(input, piece),
                Ok(expected.clone()),
                "{piece}"
            );
        }
    }

    #[test]
    fn data_is_a_range_of_the_input() {
        let mut decoder = ChunkedDecoder::new();
        let input = b"3\r\nabc\r\n0\r\n\r\n";
        let progress = decoder.decode(input).unwrap();
        assert_eq!(
            progress,
            Progress {
                consumed: 6,
                data: 3..6,
                done: false
            }
        );
        let progress = decoder.decode(&input[6..]).unwrap();
        assert_eq!(
            progress,
            Progress {
                consumed: 7,
                data: 7..7,
                done: true
            }
        );
        assert!(decoder.trailers().is_empty());
        let after = decoder.decode(b"more").unwrap();
        assert_eq!((after.consumed, after.done), (0, true));
    }

    #[test]
    fn a_prefix_is_incomplete_never_an_error() {
        let input = b"a\r\n0123456789\r\n0\r\nx: y\r\n\r\n";
        for end in 0..input.len() {
            let mut decoder = ChunkedDecoder::new();
            let mut rest = &input[..end];
            while !rest.is_empty() {
                let progress = decoder.decode(rest).unwrap();
                assert!(!progress.done, "{end}");
                rest = &rest[progress.consumed..];
            }
        }
    }

    // 16 hex digits are a u64; leading zeros don't count.
    #[test]
    fn chunk_sizes_are_bounded() {
        let mut decoder = ChunkedDecoder::new();
        let progress = decoder.decode(b"0000ffffffffffffffff\r\nab").unwrap();
        assert_eq!(progress.data, 22..24);
        assert_eq!(
            decode(b"10000000000000000\r\n"),
            Err(ChunkedError::SizeTooLong)
        );
        let zeros = [&[b'0'; MAX_CHUNK_LINE][..], b"1\r\n"].concat();
        assert_eq!(decode(&zeros), Err(ChunkedError::LineTooLong));
    }

    // RFC 9112 §7.1.1: a server ought to limit the extensions it takes.
    #[test]
    fn extensions_are_bounded_per_line_and_per_body() {
        let long = [
            &b"1;"[..],
            &[b'x'; MAX_CHUNK_LINE - 2],
            b"\r\na\r\n0\r\n\r\n",
        ]
        .concat();
        assert_eq!(decode(&long).map(|(body, ..)| body), Ok(b"a".to_vec()));
        let longer = [&b"1;"[..], &[b'x'; MAX_CHUNK_LINE - 1], b"\r\na\r\n"].concat();
        assert_eq!(decode(&longer), Err(ChunkedError::LineTooLong));
        let chunk = [&b"1;"[..], &[b'x'; 4000], b"\r\na\r\n"].concat();
        let many = [&chunk.repeat(5)[..], b"0\r\n\r\n"].concat();
        assert_eq!(decode(&many), Err(ChunkedError::ExtensionsTooLong));
        let fewer = [&chunk.repeat(4)[..], b"0\r\n\r\n"].concat();
        assert_eq!(decode(&fewer).map(|(body, ..)| body), Ok(b"aaaa".to_vec()));
    }

    // RFC 9112 §7.1: chunk-size and data end in CRLF.
    #[test]
    fn framing_errors_are_refused() {
        for (input, error) in [
            (&b"x\r\n"[..], ChunkedError::InvalidSize),
            (b" 1\r\n", ChunkedError::InvalidSize),
            (b"-1\r\n", ChunkedError::InvalidSize),
            (b"1 2\r\n", ChunkedError::InvalidSize),
            (b"1\n", ChunkedError::BareLf),
            (b"1;a\n", ChunkedError::BareLf),
            (b"1\rx", ChunkedError::MissingLf),
            (b"1\r\nab", ChunkedError::MissingDataCrlf),
            (b"1\r\na\n", ChunkedError::MissingDataCrlf),
            (b"1\r\na\rx", ChunkedError::MissingDataCrlf),
            (b"0\r\n\n", ChunkedError::TrailerBareLf),
            (b"0\r\na: b\n", ChunkedError::TrailerBareLf),
            (b"0\r\na: b\r\r", ChunkedError::MissingLf),
            (b"0\r\n\rx", ChunkedError::MissingLf),
        ] {
            assert_eq!(decode(input), Err(error), "{}", input.escape_ascii());
        }
    }

    // RFC 9112 §7.1.2: trailer fields are field lines (§5).
    #[test]
    fn trailers_are_field_lines_within_the_head_limits() {
        for bad in [
            &b"0\r\nno colon\r\n\r\n"[..],
            b"0\r\n folded: x\r\n\r\n",
            b"0\r\na b: c\r\n\r\n",
        ] {
            assert!(
                matches!(decode(bad), Err(ChunkedError::InvalidTrailers(_))),
                "{}",
                bad.escape_ascii()
            );
        }
        let many = [&b"0\r\n"[..], &b"a: b\r\n".repeat(MAX_HEADERS), b"\r\n"].concat();
        assert!(decode(&many).is_ok());
        let too_many = [&b"0\r\n"[..], &b"a: b\r\n".repeat(MAX_HEADERS + 1), b"\r\n"].concat();
        assert_eq!(decode(&too_many), Err(ChunkedError::TooManyTrailers));
        let big = [&b"0\r\nx: "[..], &[b'a'; MAX_HEAD_BYTES], b"\r\n\r\n"].concat();
        assert_eq!(decode(&big), Err(ChunkedError::TrailersTooLarge));
    }
}
