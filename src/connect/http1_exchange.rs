//! One HTTP/1.1 exchange with an upstream address, done by the task of the
//! request itself: a connection from this worker thread's idle pool (or a
//! new one), the request head (borrowed from its handler, which keeps it
//! for every try) gathered into one buffer for one `write`,
//! the body streamed (while the answer is watched for: an upstream may
//! answer before it has read everything), the response head parsed by
//! `http1`, and the response body read by `http1_body`, which puts the
//! connection back in the pool once the body has ended. No task or channel
//! sits between a request and its upstream connection, and no lock but the
//! thread pool's own, which only its sweeper shares.
//!
//! A kept connection the upstream closed just as it was reused fails before
//! any byte of an answer; a request with no body is then sent once more, on
//! a new connection, if the upstream can't have read it (writing it failed)
//! or if reading it twice is harmless (an idempotent method: RFC 9110
//! §9.2.2 forbids a proxy to retry the others). Once any byte of an answer
//! came back, the upstream had the request: it is never sent again.

use std::future::Future;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::connection::UpstreamConnection;
use super::dial::Connector;
use super::error::{BoxError as Cause, ExchangeError};
use super::http1_body::{Http1Body, RestOfBody, Source};
use super::set_fields::SetFieldsRef;
use super::thread_pool::check_out;
use crate::http1::buffers::{self, LentBuffer};
use crate::http1::head_writer::{self, KeptHead};
use crate::http1::{
    header_map, last_chunk, may_be_trailer, parse_response_head, persistent, response_framing,
    FieldSlots, ResponseFraming, SharedHead, RESPONSE_NAMES,
};

/// The fields dockhand may add to a response before its client
/// (`Strict-Transport-Security`, a location's response rules, `Vary`):
/// its header map has room for a few from the start.
const ADDED_RESPONSE_FIELDS: usize = 4;

/// How the request body is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RequestEncoding {
    None,
    Length(u64),
    Chunked,
}

/// A request head as its handler keeps it for every try, borrowed for one
/// exchange: written out from here (again, if it is sent again), so that
/// no try copies it. What is set replaces the request's fields of the
/// same names, and what the endpoint adds replaces both.
#[derive(Clone, Copy)]
pub struct Outgoing<'a> {
    pub method: &'a Method,
    /// The path and query.
    pub target: &'a str,
    pub headers: &'a HeaderMap,
    /// Set by dockhand (who the client is, the Host).
    pub set: SetFieldsRef<'a>,
    /// Set by the endpoint (its `headers.add`).
    pub added: &'a [(HeaderName, HeaderValue)],
}

impl Outgoing<'_> {
    /// The value of `name` as sent.
    fn get(&self, name: &HeaderName) -> Option<&HeaderValue> {
        if let Some((_, value)) = self.added.iter().find(|(added, _)| added == name) {
            return Some(value);
        }
        match self.set.get(name) {
            Some(value) => value,
            None => self.headers.get(name),
        }
    }

    fn is_added(&self, name: &HeaderName) -> bool {
        self.added.iter().any(|(added, _)| added == name)
    }

    fn is_set(&self, name: &HeaderName) -> bool {
        self.set.is_set(name)
    }
}

/// Sends the request to `address` and reads the response head.
pub fn exchange<'a, B>(
    connector: &'a Connector,
    address: SocketAddr,
    head: Outgoing<'a>,
    body: B,
) -> impl Future<Output = Result<Response<Http1Body>, ExchangeError>> + Send + 'a
where
    B: Body<Data = Bytes> + Unpin + Send + Sync + 'static,
    B::Error: Into<Cause> + Send,
{
    let framing = RequestFraming::of(&head, &body);
    // The body is taken by the try that sends it (there is no other: only
    // a bodyless request is sent again), and may outlive the exchange.
    let mut body = Some(body);
    async move {
        let mut kept = check_out(address);
        loop {
            let reused = kept.is_some();
            let connection = match kept.take() {
                Some(connection) => connection,
                // Boxed: opening is rare once connections are kept, and its
                // future (a TLS handshake's included) is large to carry in
                // every request's.
                None => Box::pin(connector.connect_to(address)).await?,
            };
            match send_on(connection, address, &head, &mut body, framing).await {
                // Sent again only without a body: the first try consumed none.
                Err(error)
                    if reused
                        && framing.encoding == RequestEncoding::None
                        && error.allows_resending(head.method) =>
                {
                    tracing::debug!(%address, %error, "a kept connection was closed: sending on a new one");
                }
                result => return result,
            }
        }
    }
}

/// How the request body is sent, and the length the head says: what
/// hyper's client did, so upstreams see the same heads. A length given is
/// kept (in plain decimal), also for a body that has ended (sent as none);
/// a known size becomes `Content-Length`, and an unknown one is chunked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RequestFraming {
    encoding: RequestEncoding,
    content_length: Option<u64>,
}

impl RequestFraming {
    fn of<B: Body>(head: &Outgoing<'_>, body: &B) -> RequestFraming {
        let given = head
            .get(&header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok()?.parse::<u64>().ok());
        let length = given.or_else(|| body.size_hint().exact());
        let encoding = match length {
            _ if body.is_end_stream() => RequestEncoding::None,
            Some(length) => RequestEncoding::Length(length),
            None => RequestEncoding::Chunked,
        };
        let content_length = match encoding {
            RequestEncoding::Length(length) => Some(length),
            _ => given,
        };
        RequestFraming {
            encoding,
            content_length,
        }
    }
}

async fn send_on<B>(
    mut connection: UpstreamConnection,
    address: SocketAddr,
    head: &Outgoing<'_>,
    body: &mut Option<B>,
    framing: RequestFraming,
) -> Result<Response<Http1Body>, ExchangeError>
where
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Cause> + Send,
{
    write_head(&mut connection, head, framing)
        .await
        .map_err(ExchangeError::Write)?;
    let method = framing_method(head.method);
    let encoding = framing.encoding;
    let body = body.take();
    let ((parsed, buffer), source) = match body {
        Some(body) if encoding != RequestEncoding::None => {
            send_body_and_read_head(connection, body, encoding, method).await?
        }
        _ => {
            let read = read_head(&mut connection, &mut None, method).await?;
            (read, Source::Whole(connection))
        }
    };
    // Kept only once the body was sent whole.
    let reusable = parsed.persistent && matches!(source, Source::Whole(_));
    let mut response = Response::new(Http1Body::new(
        source,
        address,
        buffer,
        parsed.framing,
        reusable,
    ));
    *response.status_mut() = parsed.status;
    *response.version_mut() = parsed.version;
    *response.headers_mut() = parsed.headers;
    if let Some(reason) = parsed.reason {
        response.extensions_mut().insert(reason);
    }
    Ok(response)
}

/// Writes the body while watching for the answer: an upstream may answer
/// (`413`, a redirect, or a stream that echoes the body as it reads it)
/// before it has read the whole body, and then the answer is what counts.
/// The rest of the body is then still written, beside the response body's
/// reading (`Source::Sharing`), as hyper's client does: an upstream that
/// goes on reading waits for it (RFC 9112 §9.5 lets a client stop only
/// for an answer that refuses the body; one that does closes the
/// connection, which ends the writing). The connection is whole again
/// (and may be kept) only once the body was sent whole before the answer.
async fn send_body_and_read_head<B>(
    connection: UpstreamConnection,
    mut body: B,
    encoding: RequestEncoding,
    method: &'static [u8],
) -> Result<((ParsedHead, LentBuffer), Source), ExchangeError>
where
    B: Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Cause> + Send,
{
    let (mut reader, mut writer) = tokio::io::split(connection);
    // Boxed, so that it can go on in the response body if the answer comes first.
    let mut writing: RestOfBody = Box::pin(async move {
        write_body(&mut writer, &mut body, encoding).await?;
        Ok(writer)
    });
    // What was read of the head while the body was being written.
    let mut read_so_far = None;
    // `Ok`: the answer came first; `Err`: the body was sent first (its writer).
    let first = {
        let reading = read_head(&mut reader, &mut read_so_far, method);
        tokio::pin!(reading);
        tokio::select! {
            biased;
            parsed = &mut reading => Ok(parsed?),
            written = &mut writing => Err(written?),
        }
    };
    match first {
        Ok(early) => {
            let rest = Some(writing);
            Ok((early, Source::Sharing { reader, rest }))
        }
        // The body was sent whole first: the head is read on (what was
        // read of it so far is in `read_so_far`), and the connection is whole.
        Err(writer) => {
            let read = read_head(&mut reader, &mut read_so_far, method).await?;
            Ok((read, Source::Whole(reader.unsplit(writer))))
        }
    }
}

thread_local! {
    /// Where this thread writes the heads of its upstream requests.
    static HEAD: KeptHead = const { KeptHead::new() };
}

/// Writes the head, the request line and then each field (those set, then
/// the endpoint's, in place of the request's of their names; the framing's
/// last), gathered into this thread's head buffer for one `write`.
async fn write_head(
    connection: &mut UpstreamConnection,
    request: &Outgoing<'_>,
    framing: RequestFraming,
) -> io::Result<()> {
    let mut head = HEAD.with(KeptHead::take);
    let written = match head_writer::request_line(
        &mut head,
        request.method.as_str().as_bytes(),
        request.target.as_bytes(),
        1,
    ) {
        Ok(()) => {
            let is_framing = |name: &HeaderName| {
                name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING
            };
            for (name, value) in request.headers {
                if !is_framing(name) && !request.is_set(name) && !request.is_added(name) {
                    head_writer::field(&mut head, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            for (name, value) in request.set.iter() {
                if let Some(value) = value.filter(|_| !request.is_added(name)) {
                    head_writer::field(&mut head, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            for (name, value) in request.added {
                if !is_framing(name) {
                    head_writer::field(&mut head, name.as_str().as_bytes(), value.as_bytes());
                }
            }
            if let Some(length) = framing.content_length {
                let length = head_writer::Decimal::new(length);
                head_writer::field(&mut head, b"content-length", length.as_bytes());
            } else if framing.encoding == RequestEncoding::Chunked {
                head_writer::field(&mut head, b"transfer-encoding", b"chunked");
            }
            head_writer::end(&mut head);
            connection.write_all(&head).await
        }
        Err(error) => Err(io::Error::new(io::ErrorKind::InvalidInput, error)),
    };
    HEAD.with(|kept| kept.give_back(head));
    written
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    writer: &mut W,
    mut pieces: &mut [IoSlice<'_>],
) -> io::Result<()> {
    while !pieces.is_empty() {
        let written = writer.write_vectored(pieces).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut pieces, written);
    }
    Ok(())
}

async fn write_body<W, B>(
    writer: &mut W,
    body: &mut B,
    encoding: RequestEncoding,
) -> Result<(), ExchangeError>
where
    W: AsyncWrite + Unpin,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Cause>,
{
    let mut left = match encoding {
        RequestEncoding::Length(length) => Some(length),
        _ => None,
    };
    let chunked = encoding == RequestEncoding::Chunked;
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|error| ExchangeError::Body(error.into()))?;
        let frame = match frame.into_data() {
            Ok(data) => data,
            Err(frame) => {
                trailers = frame.into_trailers().ok();
                continue;
            }
        };
        if frame.is_empty() {
            continue;
        }
        if let Some(left) = &mut left {
            *left = left
                .checked_sub(frame.len() as u64)
                .ok_or_else(|| ExchangeError::Body("longer than its Content-Length".into()))?;
        }
        let written = if chunked {
            let size = ChunkSizeLine::new(frame.len());
            let mut pieces = [
                IoSlice::new(size.as_bytes()),
                IoSlice::new(&frame),
                IoSlice::new(b"\r\n"),
            ];
            write_all_vectored(writer, &mut pieces).await
        } else {
            writer.write_all(&frame).await
        };
        written.map_err(ExchangeError::Write)?;
    }
    if left.is_some_and(|left| left > 0) {
        return Err(ExchangeError::Body(
            "shorter than its Content-Length".into(),
        ));
    }
    if chunked {
        let sendable = trailers
            .iter()
            .flatten()
            .filter(|(name, _)| may_be_trailer(name));
        let end = last_chunk(sendable);
        writer.write_all(&end).await.map_err(ExchangeError::Write)?;
    }
    writer.flush().await.map_err(ExchangeError::Write)
}

/// A chunk's size line, `<hex size>\r\n` (RFC 9112 §7.1), written on the stack.
struct ChunkSizeLine {
    bytes: [u8; 18],
    start: usize,
}

impl ChunkSizeLine {
    fn new(size: usize) -> ChunkSizeLine {
        let mut bytes = [0; 18];
        bytes[16..].copy_from_slice(b"\r\n");
        let mut start = 16;
        let mut left = size;
        loop {
            start -= 1;
            bytes[start] = b"0123456789ABCDEF"[left % 16];
            left /= 16;
            if left == 0 {
                break;
            }
        }
        ChunkSizeLine { bytes, start }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// The request's method as far as the response's framing goes: a `HEAD`'s
/// answer has no body, nor has a `CONNECT`'s `2xx`; the others' have theirs.
fn framing_method(method: &Method) -> &'static [u8] {
    match *method {
        Method::HEAD => b"HEAD",
        Method::CONNECT => b"CONNECT",
        _ => b"GET",
    }
}

/// Whether the connection speaks something else than HTTP/1.1 after this
/// answer, and so can't be kept: a `101` switched protocols (RFC 9110
/// §15.2.2), a `2xx` to `CONNECT` made it a tunnel (RFC 9110 §9.3.6).
fn ends_http(status: u16, method: &[u8]) -> bool {
    status == 101 || (method == b"CONNECT" && (200..300).contains(&status))
}

/// A final response head, read and parsed.
struct ParsedHead {
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    /// The upstream's reason phrase, when not the status's usual one.
    reason: Option<hyper::ext::ReasonPhrase>,
    framing: ResponseFraming,
    persistent: bool,
}

/// Reads until a final response head is whole (interim `1xx` answers are
/// read past), and gives it with the buffer it was read into, which holds
/// what followed it. The connection's end is `Closed` or `Read` only while
/// nothing at all has come back. `slot` holds what was read so far between
/// calls, and no buffer while nothing was: the wait for an upstream's
/// answer holds none (a worker answering hundreds of requests at once
/// would otherwise hold hundreds, past what its free list keeps).
async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    slot: &mut Option<LentBuffer>,
    method: &'static [u8],
) -> Result<(ParsedHead, LentBuffer), ExchangeError> {
    let mut interim_read = false;
    loop {
        // Nothing to parse before the first read, nor after an interim
        // answer that was all the buffer held.
        if let Some(mut buffer) = slot.take_if(|buffer| !buffer.is_empty()) {
            match parse(&buffer, method)? {
                Some((Some(parsed), head_len)) => {
                    buffer.consume(head_len);
                    return Ok((parsed, buffer));
                }
                Some((None, head_len)) => {
                    interim_read = true;
                    buffer.consume(head_len);
                    // The final head may have come with it.
                    *slot = Some(buffer);
                    continue;
                }
                None if buffer.spare().is_empty() => {
                    buffer.grow().map_err(|_| ExchangeError::HeadTooLarge)?;
                }
                None => {}
            }
            *slot = Some(buffer);
        }
        let answered = interim_read || slot.as_deref().is_some_and(|read| !read.is_empty());
        let read = std::future::poll_fn(|cx| {
            buffers::poll_fill(slot, |spare| {
                let mut read = ReadBuf::new(spare);
                Pin::new(&mut *reader)
                    .poll_read(cx, &mut read)
                    .map_ok(|()| read.filled().len())
            })
        })
        .await
        .map_err(|error| match answered {
            true => ExchangeError::CutAnswer(error),
            false => ExchangeError::Read(error),
        })?;
        match (read, answered) {
            (0, true) => {
                return Err(ExchangeError::CutAnswer(
                    io::ErrorKind::UnexpectedEof.into(),
                ))
            }
            (0, false) => return Err(ExchangeError::Closed),
            _ => {}
        }
    }
}

/// The head at the start of `buffer` and its length once it is whole;
/// `Some((None, len))` for an interim answer, to be read past.
#[allow(clippy::type_complexity)]
fn parse(
    buffer: &[u8],
    method: &'static [u8],
) -> Result<Option<(Option<ParsedHead>, usize)>, ExchangeError> {
    let mut slots = FieldSlots::new();
    let head = match parse_response_head(buffer, &mut slots) {
        Ok(Some(head)) => head,
        Ok(None) => return Ok(None),
        Err(error) if error.is_too_large() => return Err(ExchangeError::HeadTooLarge),
        Err(error) => return Err(ExchangeError::NotHttp(error.into())),
    };
    if head.is_interim() {
        return Ok(Some((None, head.bytes.len())));
    }
    let framing = response_framing(&head, method).map_err(|e| ExchangeError::NotHttp(e.into()))?;
    let status = StatusCode::from_u16(head.status).map_err(|e| ExchangeError::NotHttp(e.into()))?;
    // Fields about this connection alone are left out of the map, where
    // removing them (`remove_hop_by_hop`) would cost more than all the
    // rest of the map; a `Connection` naming other fields is kept for it.
    let connection = head.fields.connection();
    let passed_on = head.fields.iter().filter(|field| {
        !(connection.only_options
            && (field.name.eq_ignore_ascii_case(b"connection")
                || field.name.eq_ignore_ascii_case(b"keep-alive")))
    });
    let capacity = head.fields.len() + ADDED_RESPONSE_FIELDS;
    let head_copy = SharedHead::copy(head.bytes);
    let headers = header_map(passed_on, capacity, &head_copy, Some(&RESPONSE_NAMES))
        .map_err(|e| ExchangeError::NotHttp(e.into()))?;
    let canonical = status.canonical_reason().map(str::as_bytes);
    let reason = (canonical != Some(head.reason))
        .then(|| hyper::ext::ReasonPhrase::try_from(head.reason.to_vec()).ok())
        .flatten();
    let parsed = ParsedHead {
        status,
        version: if head.version == 0 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        },
        headers,
        reason,
        persistent: persistent(head.version, connection)
            && framing != ResponseFraming::UntilClose
            && !ends_http(head.status, method),
        framing,
    };
    Ok(Some((Some(parsed), head.bytes.len())))
}

#[cfg(test)]
mod tests;
