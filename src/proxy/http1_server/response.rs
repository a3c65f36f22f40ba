//! Writes a response to an HTTP/1.1 client: the head as the request and the
//! body call for (RFC 9112 §6: a length, chunked, or until close; nothing
//! after `HEAD`, 1xx, 204 or 304), with `Date` and the connection's fate,
//! then the body as it comes. The head goes out with the first data when
//! that is ready at once, in one `writev`.

use std::io::{self, IoSlice};
use std::task::{ready, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::header::{self, HeaderMap};
use http::{Response, StatusCode, Version};
use http_body::Body;
use http_body_util::BodyExt;

use super::date;
use super::wire::{poll_io, ClientIo, SharedWire};
use crate::http1::fields::list_items;
use crate::http1::framing::decimal;
use crate::http1::head_writer::{self, field};
use crate::http1::{header_maps, last_chunk, may_be_trailer, Decimal, KeptHead};
use crate::proxy::body::ProxyBody;

/// What the request says of its response.
#[derive(Clone, Copy, Debug)]
pub(super) struct Asked {
    pub version: Version,
    pub head: bool,
    /// The connection may carry another request after this one.
    pub persistent: bool,
    /// The client takes trailer fields (`TE: trailers`).
    pub trailers: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

thread_local! {
    /// Where this thread writes the heads of its responses.
    static HEAD: KeptHead = const { KeptHead::new() };
}

/// Writes `response` and its body, after `continued` (what is left of a
/// `100 Continue` begun: `Wire::answer`); `Ok(true)` if the connection may
/// carry another request. An error (the client gone, a body cut midway) ends the
/// connection, with the body's end unsent so the client sees it incomplete.
pub(super) async fn write<S: ClientIo>(
    wire: &SharedWire<S>,
    response: Response<ProxyBody>,
    asked: Asked,
    continued: &'static [u8],
) -> io::Result<bool> {
    let (parts, mut body) = response.into_parts();
    let facts = HeadFacts::of(&parts.headers);
    let framing = framing(parts.status, facts.content_length, &body, asked);
    let persistent = asked.persistent && framing != Framing::UntilClose && !facts.lists_close;
    let mut head = HEAD.with(KeptHead::take);
    head.extend_from_slice(continued);
    write_head(&mut head, &parts, framing, asked, persistent, &facts);
    let result = write_body(wire, &head, &mut body, framing, asked, &parts.headers).await;
    header_maps::give_back(parts.headers);
    HEAD.with(|kept| kept.give_back(head));
    result.map(|()| persistent)
}

/// What a response's fields say of its framing and its connection, read in
/// one walk over them: looking each name up costs more than the walk over
/// a usual head's few fields.
struct HeadFacts {
    /// The first `Content-Length`, if it is a length (digits alone).
    content_length: Option<u64>,
    /// A `Connection` lists `close`.
    lists_close: bool,
    has_date: bool,
}

impl HeadFacts {
    fn of(headers: &HeaderMap) -> HeadFacts {
        let mut facts = HeadFacts {
            content_length: None,
            lists_close: false,
            has_date: false,
        };
        let mut length_read = false;
        for (name, value) in headers {
            if name == header::CONTENT_LENGTH {
                if !std::mem::replace(&mut length_read, true) {
                    facts.content_length = decimal(value.as_bytes());
                }
            } else if name == header::CONNECTION {
                facts.lists_close |=
                    list_items(value.as_bytes()).any(|item| item.eq_ignore_ascii_case(b"close"));
            } else if name == header::DATE {
                facts.has_date = true;
            }
        }
        facts
    }
}

fn framing(
    status: StatusCode,
    content_length: Option<u64>,
    body: &ProxyBody,
    asked: Asked,
) -> Framing {
    if asked.head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Framing::None;
    }
    if let Some(length) = content_length {
        return Framing::Length(length);
    }
    if body.is_end_stream() {
        return Framing::Length(0);
    }
    if let Some(length) = body.size_hint().exact() {
        return Framing::Length(length);
    }
    match asked.version {
        Version::HTTP_10 => Framing::UntilClose,
        _ => Framing::Chunked,
    }
}

fn write_head(
    head: &mut Vec<u8>,
    parts: &http::response::Parts,
    framing: Framing,
    asked: Asked,
    persistent: bool,
    facts: &HeadFacts,
) {
    let reason = match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(reason) => reason.as_bytes(),
        None => parts.status.canonical_reason().unwrap_or("").as_bytes(),
    };
    head_writer::status_line(head, asked.version, parts.status, reason);
    for (name, value) in &parts.headers {
        // The framing and the connection's fate are this hop's, written below.
        if name == header::TRANSFER_ENCODING || name == header::CONNECTION {
            continue;
        }
        if name == header::CONTENT_LENGTH && framing != Framing::None {
            continue;
        }
        field(head, name.as_str().as_bytes(), value.as_bytes());
    }
    match framing {
        Framing::Length(length) => {
            field(head, b"content-length", Decimal::new(length).as_bytes());
        }
        Framing::Chunked => field(head, b"transfer-encoding", b"chunked"),
        Framing::None | Framing::UntilClose => {}
    }
    if !facts.has_date {
        field(head, b"date", &date::now());
    }
    if !persistent {
        field(head, b"connection", b"close");
    } else if asked.version == Version::HTTP_10 {
        field(head, b"connection", b"keep-alive");
    }
    head_writer::end(head);
}

async fn write_body<S: ClientIo>(
    wire: &SharedWire<S>,
    head: &[u8],
    body: &mut ProxyBody,
    framing: Framing,
    asked: Asked,
    headers: &HeaderMap,
) -> io::Result<()> {
    if framing == Framing::None {
        return write_all(wire, &mut [IoSlice::new(head)]).await;
    }
    // The head waits for the first data only if it is there at once.
    let mut head = Some(head);
    let mut sent = 0u64;
    loop {
        let frame = match body.frame().now_or_never() {
            Some(frame) => frame,
            None => {
                if let Some(head) = head.take() {
                    write_all(wire, &mut [IoSlice::new(head)]).await?;
                }
                body.frame().await
            }
        };
        let head_now = head.take().unwrap_or_default();
        let frame = match frame {
            None => return finish(wire, head_now, framing, sent, None).await,
            Some(Err(error)) => {
                // What came before is sent; the end never is.
                write_all(wire, &mut [IoSlice::new(head_now)]).await?;
                return Err(io::Error::other(error));
            }
            Some(Ok(frame)) => frame,
        };
        let frame = match frame.into_data() {
            Ok(data) => {
                sent += data.len() as u64;
                write_data(wire, head_now, data, framing, sent).await?;
                continue;
            }
            Err(frame) => frame,
        };
        if let Ok(trailers) = frame.into_trailers() {
            let trailers = asked.trailers.then_some((&trailers, headers));
            return finish(wire, head_now, framing, sent, trailers).await;
        }
    }
}

async fn write_data<S: ClientIo>(
    wire: &SharedWire<S>,
    head: &[u8],
    data: Bytes,
    framing: Framing,
    sent: u64,
) -> io::Result<()> {
    if let Framing::Length(length) = framing {
        if sent > length {
            return Err(io::Error::other("the body is longer than its length"));
        }
    }
    if framing == Framing::Chunked {
        if data.is_empty() {
            return write_all(wire, &mut [IoSlice::new(head)]).await;
        }
        let (line, len) = chunk_size_line(data.len());
        return write_all(
            wire,
            &mut [
                IoSlice::new(head),
                IoSlice::new(&line[..len]),
                IoSlice::new(&data),
                IoSlice::new(b"\r\n"),
            ],
        )
        .await;
    }
    write_all(wire, &mut [IoSlice::new(head), IoSlice::new(&data)]).await
}

/// A chunk's size line (RFC 9112 §7.1): hex digits and CRLF, on the stack.
fn chunk_size_line(size: usize) -> ([u8; 18], usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut line = [0; 18];
    let digits = (usize::BITS - size.leading_zeros()).div_ceil(4).max(1) as usize;
    for (at, slot) in line[..digits].iter_mut().enumerate() {
        let shift = 4 * (digits - 1 - at);
        *slot = DIGITS[(size >> shift) & 0xf];
    }
    line[digits..digits + 2].copy_from_slice(b"\r\n");
    (line, digits + 2)
}

async fn finish<S: ClientIo>(
    wire: &SharedWire<S>,
    head: &[u8],
    framing: Framing,
    sent: u64,
    trailers: Option<(&HeaderMap, &HeaderMap)>,
) -> io::Result<()> {
    match framing {
        Framing::Length(length) if sent < length => {
            write_all(wire, &mut [IoSlice::new(head)]).await?;
            Err(io::Error::other("the body ended before its length"))
        }
        Framing::Chunked => {
            let sendable = trailers.into_iter().flat_map(|(trailers, headers)| {
                trailers
                    .iter()
                    .filter(move |(name, _)| may_send_trailer(headers, name))
            });
            let end = last_chunk(sendable);
            write_all(wire, &mut [IoSlice::new(head), IoSlice::new(&end)]).await
        }
        _ => write_all(wire, &mut [IoSlice::new(head)]).await,
    }
}

/// Whether the trailer field `name` may follow a response with `headers`,
/// as hyper's server decides: the response's `Trailer` field announces it,
/// and it may be a trailer at all (RFC 9110 §6.5.1).
fn may_send_trailer(headers: &HeaderMap, name: &header::HeaderName) -> bool {
    may_be_trailer(name)
        && headers.get_all(header::TRAILER).iter().any(|value| {
            list_items(value.as_bytes())
                .any(|item| item.eq_ignore_ascii_case(name.as_str().as_bytes()))
        })
}

/// Writes every slice, then flushes (a TLS stream holds what it encrypts).
/// Writes `slices` whole and flushes them, under one lock of the wire for
/// as far as each poll gets. Nothing to write is nothing to do: what was
/// written before was flushed by its own write.
async fn write_all<S: ClientIo>(
    wire: &SharedWire<S>,
    mut slices: &mut [IoSlice<'_>],
) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    if slices.is_empty() {
        return Ok(());
    }
    std::future::poll_fn(|cx| {
        poll_io(wire, cx, |mut io, cx| {
            while !slices.is_empty() {
                let written = ready!(io.as_mut().poll_write_vectored(cx, slices))?;
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                IoSlice::advance_slices(&mut slices, written);
            }
            io.poll_flush(cx)
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines_are_lower_case_hex() {
        for (size, line) in [
            (1, "1\r\n"),
            (15, "f\r\n"),
            (16, "10\r\n"),
            (16384, "4000\r\n"),
        ] {
            let (bytes, len) = chunk_size_line(size);
            assert_eq!(&bytes[..len], line.as_bytes());
        }
    }

    #[test]
    fn a_heads_facts_are_read_in_one_walk() {
        let facts = HeadFacts::of(&crate::proxy::headers::header_map(&[
            ("content-length", "12"),
            ("connection", "keep-alive"),
            ("content-length", "13"),
            ("connection", "x-trace, Close"),
            ("date", "Wed, 02 Dec 2026 18:00:00 GMT"),
        ]));
        assert_eq!(facts.content_length, Some(12), "the first one");
        assert!(facts.lists_close, "a later Connection line lists close");
        assert!(facts.has_date);

        let facts = HeadFacts::of(&crate::proxy::headers::header_map(&[
            ("content-length", "twelve"),
            ("connection", "keep-alive, closed"),
        ]));
        assert_eq!(facts.content_length, None);
        assert!(!facts.lists_close && !facts.has_date);

        let signed = HeadFacts::of(&crate::proxy::headers::header_map(&[(
            "content-length",
            "+12",
        )]));
        assert_eq!(signed.content_length, None, "a length has no sign");
    }

    #[test]
    fn only_announced_trailers_that_may_be_trailers_are_sent() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::TRAILER,
            http::HeaderValue::from_static("X-Checksum, content-length"),
        );
        let checksum = header::HeaderName::from_static("x-checksum");
        assert!(may_send_trailer(&headers, &checksum));
        assert!(!may_send_trailer(&headers, &header::CONTENT_LENGTH));
        assert!(!may_send_trailer(
            &headers,
            &header::HeaderName::from_static("x-other")
        ));
        assert!(!may_send_trailer(&HeaderMap::new(), &checksum));
    }
}
