//! Where a message body's data lies in the bytes read (RFC 9112 §6): a
//! length counted down, chunked data through `ChunkedDecoder`, or everything
//! until the connection closes. Shared by the request bodies dockhand's
//! server reads and the response bodies its upstream exchange reads; the
//! reading and the buffer are theirs.

use std::ops::Range;

use super::chunked::{ChunkedDecoder, ChunkedError};

/// What is left of a body.
#[derive(Debug)]
pub enum BodyFraming {
    /// This many bytes are still due.
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    /// Everything until the peer closes.
    UntilClose,
    /// The body has ended.
    Done,
}

/// What one look at the bytes read found.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    /// The body data in the input (possibly empty).
    pub data: Range<usize>,
    /// The bytes of the input used, data included.
    pub consumed: usize,
}

impl BodyFraming {
    /// A body of `length` bytes; `Done` when it is empty.
    pub fn length(length: u64) -> BodyFraming {
        match length {
            0 => BodyFraming::Done,
            _ => BodyFraming::Length(length),
        }
    }

    pub fn chunked() -> BodyFraming {
        BodyFraming::Chunked(Box::default())
    }

    pub fn is_done(&self) -> bool {
        matches!(self, BodyFraming::Done)
    }

    /// Finds the next data in `input` and what of it the body used; turns
    /// `Done` once the body's last byte is used. A chunked body's trailer
    /// section is read from its decoder before the next call.
    pub fn take(&mut self, input: &[u8]) -> Result<Taken, ChunkedError> {
        let taken = match self {
            BodyFraming::Length(left) => {
                let take = usize::try_from(*left).map_or(input.len(), |left| left.min(input.len()));
                *left -= take as u64;
                Taken {
                    data: 0..take,
                    consumed: take,
                }
            }
            BodyFraming::Chunked(decoder) => {
                let progress = decoder.decode(input)?;
                Taken {
                    data: progress.data,
                    consumed: progress.consumed,
                }
            }
            BodyFraming::UntilClose => Taken {
                data: 0..input.len(),
                consumed: input.len(),
            },
            BodyFraming::Done => Taken {
                data: 0..0,
                consumed: 0,
            },
        };
        Ok(taken)
    }

    /// Whether the data taken so far ends the body (a chunked body's
    /// trailers are still in its decoder: see `trailers`).
    pub fn ended(&self) -> bool {
        match self {
            BodyFraming::Length(left) => *left == 0,
            BodyFraming::Chunked(decoder) => decoder.is_done(),
            BodyFraming::UntilClose => false,
            BodyFraming::Done => true,
        }
    }

    /// A chunked body's trailer section, once it has ended.
    pub fn trailers(&self) -> &[u8] {
        match self {
            BodyFraming::Chunked(decoder) => decoder.trailers(),
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_takes_what_is_due_and_leaves_the_next_message() {
        let mut body = BodyFraming::length(5);
        let taken = body.take(b"helloGET /").unwrap();
        assert_eq!(
            taken,
            Taken {
                data: 0..5,
                consumed: 5
            }
        );
        assert!(body.ended());
        assert!(BodyFraming::length(0).is_done());
    }

    #[test]
    fn chunked_data_is_found_between_its_lines() {
        let mut body = BodyFraming::chunked();
        let taken = body.take(b"5\r\nhello\r\n0\r\n\r\n").unwrap();
        assert_eq!(taken.data, 3..8);
        let rest = &b"5\r\nhello\r\n0\r\n\r\n"[taken.consumed..];
        let taken = body.take(rest).unwrap();
        assert!(taken.data.is_empty());
        assert_eq!(taken.consumed, rest.len());
        assert!(body.ended());
    }

    #[test]
    fn until_close_takes_everything() {
        let mut body = BodyFraming::UntilClose;
        assert_eq!(body.take(b"abc").unwrap().consumed, 3);
        assert!(!body.ended());
    }
}
