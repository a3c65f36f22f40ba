//! A response body compressed as it streams: each data frame is encoded
//! and flushed on its own, so nothing waits for more of the body (a
//! server-sent event reaches the client when the upstream sends it) and
//! no more than a frame is held; trailers follow the encoding's end.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::config::middleware::Encoding;

/// The levels used, chosen from the throughput measured on one core by
/// `cargo bench --bench compression` (the table is in README,
/// "Middlewares"): the slowest of them still compresses 1 MB of JSON at
/// over 60 MiB/s. gzip 6 would be 6.5 times slower than 1 (25 MiB/s) for
/// bodies a quarter to a third smaller; brotli 4 is 16-21% smaller than 1
/// at 66-115 MiB/s, where 6 halves the speed again; zstd 1 and 3 make the
/// same sizes at over 300 MiB/s, so zstd's own default stays.
const GZIP_LEVEL: u32 = 1;
const BROTLI_LEVEL: u32 = 4;
const ZSTD_LEVEL: i32 = 3;

/// Brotli's window: 2^20 bytes, a quarter of its 4 MiB default, which
/// matters little to the ratio of web pages and bounds what a long body's
/// ring buffer grows to (level 4's tables, about 1.3 MiB, come on top).
const BROTLI_WINDOW_BITS: u32 = 20;
/// Brotli's input buffer; flushed at each frame anyway.
const BROTLI_BUFFER: usize = 4096;

/// One encoding's compressor, writing into a buffer taken at each flush.
pub enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    // Boxed: its state is a few kilobytes inline.
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

impl Encoder {
    pub fn encoding(&self) -> Encoding {
        match self {
            Encoder::Gzip(_) => Encoding::Gzip,
            Encoder::Brotli(_) => Encoding::Brotli,
            Encoder::Zstd(_) => Encoding::Zstd,
        }
    }

    /// At the level chosen for `encoding`.
    pub fn new(encoding: Encoding) -> io::Result<Encoder> {
        let level = match encoding {
            Encoding::Gzip => GZIP_LEVEL as i32,
            Encoding::Brotli => BROTLI_LEVEL as i32,
            Encoding::Zstd => ZSTD_LEVEL,
        };
        Encoder::at_level(encoding, level)
    }

    /// At `level`: gzip 0..=9, brotli 0..=11, zstd 1..=22.
    pub fn at_level(encoding: Encoding, level: i32) -> io::Result<Encoder> {
        Ok(match encoding {
            Encoding::Gzip => Encoder::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(level as u32),
            )),
            Encoding::Brotli => Encoder::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                BROTLI_BUFFER,
                level as u32,
                BROTLI_WINDOW_BITS,
            ))),
            Encoding::Zstd => Encoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), level)?),
        })
    }

    /// `data` encoded and flushed: everything the client needs to decode
    /// it, now.
    pub fn encode(&mut self, data: &[u8]) -> io::Result<Bytes> {
        let output = match self {
            Encoder::Gzip(encoder) => write_and_flush(encoder, data)?.get_mut(),
            Encoder::Brotli(encoder) => write_and_flush(encoder.as_mut(), data)?.get_mut(),
            Encoder::Zstd(encoder) => write_and_flush(encoder, data)?.get_mut(),
        };
        Ok(Bytes::from(std::mem::take(output)))
    }

    /// The encoding's end (and gzip's checksum).
    pub fn finish(self) -> io::Result<Bytes> {
        let output = match self {
            Encoder::Gzip(encoder) => encoder.finish()?,
            Encoder::Brotli(encoder) => encoder.into_inner(),
            Encoder::Zstd(encoder) => encoder.finish()?,
        };
        Ok(Bytes::from(output))
    }
}

fn write_and_flush<'w, W: Write>(writer: &'w mut W, data: &[u8]) -> io::Result<&'w mut W> {
    writer.write_all(data)?;
    writer.flush()?;
    Ok(writer)
}

pin_project! {
    /// `inner` compressed; its errors pass through, and the encoder's
    /// (which writes to memory) become the body's.
    pub struct Compressed<B> {
        #[pin]
        inner: B,
        // `None` once the encoding has ended.
        encoder: Option<Encoder>,
        // The upstream's trailers, sent after the encoding's end.
        trailers: Option<Frame<Bytes>>,
    }
}

impl<B> Compressed<B> {
    pub fn new(inner: B, encoder: Encoder) -> Compressed<B> {
        Compressed {
            inner,
            encoder: Some(encoder),
            trailers: None,
        }
    }
}

impl<B> Body for Compressed<B>
where
    B: Body<Data = Bytes>,
    B::Error: From<io::Error>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        loop {
            let Some(encoder) = this.encoder.as_mut() else {
                return Poll::Ready(this.trailers.take().map(Ok));
            };
            let data = match ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) if data.is_empty() => continue,
                    Ok(data) => encoder.encode(&data),
                    Err(trailers) => {
                        *this.trailers = Some(trailers);
                        finish(this.encoder)
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => finish(this.encoder),
            };
            match data {
                // A flush with nothing new to say (brotli may buffer).
                Ok(data) if data.is_empty() => continue,
                Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Err(error) => return Poll::Ready(Some(Err(error.into()))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn finish(encoder: &mut Option<Encoder>) -> io::Result<Bytes> {
    encoder.take().map_or(Ok(Bytes::new()), Encoder::finish)
}

#[cfg(test)]
#[path = "compressed_body_tests.rs"]
mod tests;
