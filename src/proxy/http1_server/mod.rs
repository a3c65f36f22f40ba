//! dockhand's own HTTP/1.1 server: one task per client connection reads each
//! request head into a buffer its worker thread lends while bytes are in
//! flight (`wire`), parses it with the wire layer (`crate::http1`), hands the
//! request to the same handler as hyper's server (`forward::handle`), and
//! writes the response itself (`response`), request after request. Between
//! requests a connection holds no buffer.
//!
//! What it does not serve itself goes to hyper's server with the bytes
//! already read (`handoff`): HTTP/2 with prior knowledge (h2c), and requests
//! that may switch protocols (`Upgrade`, `CONNECT`), from that request on.

mod date;
mod handoff;
mod response;
pub(super) mod wire;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};

pub use handoff::Rewound;
pub use wire::ClientIo;

use self::response::Asked;
use self::wire::{poll_io, Http1RequestBody, SharedWire, Wire};
use super::body::ProxyBody;
use super::client_body::ClientIncoming;
use super::client_identity::PeerInfo;
use super::error::{ErrorKind, ProxyError};
use super::forward::{answer, ProxyState};
use super::kept_timer::KeptTimer;
use super::send_timeout::ClientCut;
use crate::http1::buffers;
use crate::http1::{
    header_map, parse_request_head, request_facts, request_framing, BodyFraming, FieldSlots,
    FramingError, HeadError, RequestFraming, RequestHead, SharedHead, REQUEST_NAMES,
};
use crate::kept_box::KeptBox;
use crate::metrics::{ClientProtocol, OpenConnection};

/// The first bytes of an HTTP/2 connection with prior knowledge (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The most header fields a request may have: hyper's limit, kept so that
/// both servers refuse the same requests.
const MOST_REQUEST_FIELDS: usize = 100;

/// The fields the handler may add to a request before its upstream
/// (`X-Forwarded-For`, `-Proto`, `-Host`, `-Port`, `X-Real-IP`,
/// `Forwarded`, `TE`, `Upgrade` and `Connection`): its header map has
/// room for them from the start.
const ADDED_UPSTREAM_FIELDS: usize = 9;

/// The longest target the `http` crate takes (`u16::MAX - 1`).
const LONGEST_TARGET: usize = 65_534;

/// How long, and how much, a connection closed with a request body unread
/// is still read from, so that the client sees the response rather than a
/// reset (RFC 9112 §9.6).
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: u64 = 1024 * 1024;

/// What a connection's requests share.
pub struct Http1Client {
    pub state: Arc<ProxyState>,
    pub peer: Arc<PeerInfo>,
    pub cut: Arc<ClientCut>,
    pub header_read_timeout: Duration,
}

/// How the own server left a connection.
pub enum Ended<S> {
    Closed,
    /// For hyper's server, with the bytes read from it.
    HandOff(Rewound<S>),
}

/// What came next on the connection.
// Held only until it is matched: boxing the request would cost an
// allocation per request to save stack space for a moment.
#[allow(clippy::large_enum_variant)]
enum Next {
    Request(Request<ClientIncoming>, Asked),
    Refused(Refusal),
    HandOff,
    Closed,
}

/// What the connection does next, once what came is taken apart: a
/// request's exchange (`E`, its future in a kept block) or an ending.
enum Step<E> {
    Exchange(E),
    Refuse(Refusal),
    HandOff,
    Closed,
    /// No request within `--header-read-timeout`, or the server drains.
    Idle,
}

/// A request refused before it is routed, as hyper's server refuses them.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    Status(StatusCode),
    Kind(ErrorKind),
}

/// Serves the connection until it closes or is handed to hyper.
/// `prior_knowledge` says whether it may start with HTTP/2's preface.
pub async fn serve<S: ClientIo>(
    io: S,
    client: &Http1Client,
    draining: &watch::Receiver<()>,
    prior_knowledge: bool,
) -> Ended<S> {
    let wire = Wire::shared(io);
    let mut number: u64 = 0;
    let mut drain = false;
    // Counted as an open HTTP/1.1 connection from its first request on.
    let mut counted: Option<OpenConnection> = None;
    // One timer for the connection: each request's head is due
    // `--header-read-timeout` after its wait began (`kept_timer` says what
    // a move costs).
    let header_deadline = KeptTimer::new(client.header_read_timeout);
    tokio::pin!(header_deadline);
    // And one for the waits for upstreams' response heads, lent to each
    // request (`head_wait` says why).
    let head_timer = KeptTimer::new(client.state.upstream_timeout);
    tokio::pin!(head_timer);
    // One wait for the drain for the connection, for the same reason: a
    // wait made per request registered with the sender, and left, each time.
    let drained = {
        let mut draining = draining.clone();
        async move {
            // The sender gone (`Err`) is a drain too.
            let _ = draining.changed().await;
        }
    };
    tokio::pin!(drained);
    loop {
        header_deadline
            .as_mut()
            .reset(Instant::now() + client.header_read_timeout);
        let first = number == 0;
        // What came next, taken apart where it came, with no wait between:
        // a request goes straight into its exchange's kept block. Held in a
        // local across a wait (the close or the refusal below), the request
        // was written into the connection task's own state first, memory
        // that the other connections' requests have pushed out of the cache
        // by then, and the task was as large as that room for good.
        let step = {
            let next = loop {
                // The request first, and no random order drawn: a head that
                // came is served, and the two waits are looked at only while
                // none has.
                tokio::select! {
                    biased;
                    next = std::future::poll_fn(|cx| next(&wire, cx, number + 1, first && prior_knowledge)) => break Some(next),
                    () = &mut header_deadline => break None,
                    () = &mut drained, if !drain => {
                        drain = true;
                        if wire.lock().buffered().is_empty() {
                            break None;
                        }
                    }
                }
            };
            match next {
                Some(Next::Request(request, mut asked)) => {
                    number += 1;
                    counted.get_or_insert_with(|| {
                        client
                            .state
                            .metrics
                            .client_connection(ClientProtocol::Http1)
                    });
                    asked.persistent &= !drain;
                    // Boxed, once per request: an idle connection's task
                    // holds none of a request's state (and the thread keeps
                    // the box's memory for its next request).
                    Step::Exchange(KeptBox::pin(exchange(
                        client,
                        &wire,
                        request,
                        asked,
                        draining,
                        head_timer.as_mut(),
                    )))
                }
                Some(Next::Refused(refusal)) => Step::Refuse(refusal),
                Some(Next::HandOff) => Step::HandOff,
                Some(Next::Closed) => Step::Closed,
                None => Step::Idle,
            }
        };
        let exchange = match step {
            Step::Exchange(exchange) => exchange,
            Step::Idle => {
                tracing::debug!(client = %client.peer.address, "no request within --header-read-timeout, or draining: closing");
                close(&wire, false).await;
                return Ended::Closed;
            }
            Step::Closed => return Ended::Closed,
            Step::HandOff => {
                // hyper's server would not see the drain already under way.
                if drain {
                    close(&wire, false).await;
                    return Ended::Closed;
                }
                let Some((io, read)) = wire.lock().hand_off() else {
                    return Ended::Closed;
                };
                return Ended::HandOff(Rewound::new(io, read));
            }
            // Answered in HTTP/1.1 whatever the client's version, as
            // hyper's server answers them.
            Step::Refuse(refusal) => {
                let asked = Asked {
                    version: Version::HTTP_11,
                    head: false,
                    persistent: false,
                    trailers: false,
                };
                // Boxed, as the exchange: rare, and large.
                let continued = wire.lock().answer();
                let written = response::write(&wire, refusal.response(), asked, continued);
                let _ = Box::pin(written).await;
                close(&wire, true).await;
                return Ended::Closed;
            }
        };
        let kept = match exchange.await {
            Ok(persistent) => persistent,
            Err(error) => {
                tracing::debug!(%error, client = %client.peer.address, "response not sent whole");
                return Ended::Closed;
            }
        };
        let body_read = wire.lock().body_read();
        if !kept || !body_read {
            close(&wire, !body_read).await;
            return Ended::Closed;
        }
    }
}

/// Answers one request: the handler, then the response written; `Ok(true)`
/// if the connection may carry another request.
async fn exchange<S: ClientIo>(
    client: &Http1Client,
    wire: &SharedWire<S>,
    request: Request<ClientIncoming>,
    mut asked: Asked,
    draining: &watch::Receiver<()>,
    head_timer: Pin<&mut KeptTimer>,
) -> std::io::Result<bool> {
    // Pinned where they are, so that `until_gone` is handed a pointer,
    // not a copy of the whole (large) future; and the handler's ends with
    // its block, so that the writing's takes its place instead of being
    // laid out beside it.
    let response = {
        let answered = std::pin::pin!(answer(
            &client.state,
            &client.peer,
            client.cut.clone(),
            request,
            head_timer,
        ));
        match until_gone(wire, answered).await? {
            Ok(response) => response,
            Err(never) => match never {},
        }
    };
    // A server that started draining meanwhile closes after this response.
    asked.persistent &= !draining.has_changed().unwrap_or(true);
    // No body of the request is left once the handler is done with it.
    let alone = Arc::strong_count(wire) == 1;
    let continued = {
        let mut wire = wire.lock();
        asked.persistent &= wire.settle(alone);
        wire.answer()
    };
    let written = std::pin::pin!(response::write(wire, response, asked, continued));
    until_gone(wire, written).await?
}

/// Runs `work` (answering a request) unless the client goes away first,
/// which drops the answer, as hyper's server drops it.
async fn until_gone<S: ClientIo, T>(
    wire: &SharedWire<S>,
    work: impl std::future::Future<Output = T>,
) -> std::io::Result<T> {
    tokio::select! {
        biased;
        done = work => Ok(done),
        () = std::future::poll_fn(|cx| wire.lock().poll_gone(cx)) => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the client closed the connection before its answer",
        )),
    }
}

/// Reads until the next request head is whole (or refused, or the
/// connection ends) and takes it off the buffer; the request's body is
/// then framed on the wire.
fn next<S: ClientIo>(
    shared: &SharedWire<S>,
    cx: &mut Context<'_>,
    number: u64,
    prior_knowledge: bool,
) -> Poll<Next> {
    let mut wire = shared.lock();
    loop {
        let buffered = wire.buffered();
        if !buffered.is_empty() {
            if prior_knowledge
                && H2_PREFACE.starts_with(&buffered[..buffered.len().min(H2_PREFACE.len())])
            {
                if buffered.len() >= H2_PREFACE.len() {
                    return Poll::Ready(Next::HandOff);
                }
            } else {
                let mut slots = FieldSlots::new();
                match parse_request_head(buffered, &mut slots) {
                    Ok(Some(head)) => {
                        let parsed = match request_from(&head) {
                            Ok(Some(parsed)) => parsed,
                            Ok(None) => return Poll::Ready(Next::HandOff),
                            Err(refusal) => return Poll::Ready(Next::Refused(refusal)),
                        };
                        let head_len = head.bytes.len();
                        wire.consume(head_len);
                        let empty = parsed.body.is_done();
                        wire.begin(number, parsed.body, parsed.expects_continue);
                        drop(wire);
                        let body = Http1RequestBody::new(shared, number, empty);
                        let mut request = Request::new(ClientIncoming::Right(body));
                        *request.method_mut() = parsed.method;
                        *request.uri_mut() = parsed.uri;
                        *request.version_mut() = parsed.asked.version;
                        *request.headers_mut() = parsed.headers;
                        return Poll::Ready(Next::Request(request, parsed.asked));
                    }
                    Ok(None) => {}
                    Err(error) => {
                        let refusal = match error {
                            HeadError::Malformed(_) => Refusal::Status(StatusCode::BAD_REQUEST),
                            HeadError::TooLarge | HeadError::TooManyHeaders => TOO_LARGE,
                        };
                        return Poll::Ready(Next::Refused(refusal));
                    }
                }
            }
            if wire.is_full() && wire.grow().is_err() {
                return Poll::Ready(Next::Refused(TOO_LARGE));
            }
        }
        match ready!(wire.poll_fill(cx)) {
            Ok(0) | Err(_) => return Poll::Ready(Next::Closed),
            Ok(_) => {}
        }
    }
}

/// A request head taken apart for the handler.
struct Parsed {
    method: Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: BodyFraming,
    expects_continue: bool,
    asked: Asked,
}

/// The request `head` asks, `None` if it is for hyper's server (it may
/// switch protocols), or why it is refused: what hyper's server refuses
/// (a target or field the `http` crate refuses, over 100 fields) and what
/// the wire layer's strict framing refuses.
fn request_from(head: &RequestHead<'_>) -> Result<Option<Parsed>, Refusal> {
    if head.fields.len() > MOST_REQUEST_FIELDS {
        return Err(Refusal::Status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
    }
    let bad = Refusal::Status(StatusCode::BAD_REQUEST);
    // The framing first: a request hyper's server would be handed (below)
    // is held to the same strict reading as the rest.
    let body = match request_framing(head) {
        Ok(RequestFraming::None) => BodyFraming::Done,
        Ok(RequestFraming::Length(length)) => BodyFraming::length(length),
        Ok(RequestFraming::Chunked) => BodyFraming::chunked(),
        // `chunked, chunked` names a coding twice, as `gzip, chunked`
        // names one: the handler answers 501 for those.
        Err(FramingError::ChunkedTwice) => {
            return Err(Refusal::Kind(ErrorKind::UnsupportedTransferCoding))
        }
        Err(_) => return Err(bad),
    };
    let facts = request_facts(head);
    if facts.upgrade {
        return Ok(None);
    }
    let method = Method::from_bytes(head.method).map_err(|_| bad)?;
    let shared = SharedHead::copy(head.bytes);
    let uri = match Uri::from_maybe_shared(shared.slice(head.target)) {
        Ok(uri) => uri,
        Err(_) if head.target.len() > LONGEST_TARGET => {
            return Err(Refusal::Status(StatusCode::URI_TOO_LONG))
        }
        Err(_) => return Err(bad),
    };
    let capacity = head.fields.len() + ADDED_UPSTREAM_FIELDS;
    let headers =
        header_map(head.fields.iter(), capacity, &shared, Some(&REQUEST_NAMES)).map_err(|_| bad)?;
    let asked = Asked {
        version: version_of(head),
        head: method == Method::HEAD,
        persistent: facts.persistent,
        trailers: head.fields.lists("te", "trailers"),
    };
    Ok(Some(Parsed {
        method,
        uri,
        headers,
        body,
        expects_continue: facts.expects_continue,
        asked,
    }))
}

fn version_of(head: &RequestHead<'_>) -> Version {
    match head.version {
        0 => Version::HTTP_10,
        _ => Version::HTTP_11,
    }
}

/// A head over the limit, or with more fields than the wire layer holds.
const TOO_LARGE: Refusal = Refusal::Status(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);

impl Refusal {
    fn response(self) -> Response<ProxyBody> {
        match self {
            Refusal::Kind(kind) => ProxyError::from(kind).into_response(ProxyBody::message),
            Refusal::Status(status) => {
                let mut response = Response::new(ProxyBody::message(Bytes::new()));
                *response.status_mut() = status;
                response
            }
        }
    }
}

/// Ends the connection: its write side first, so that the client reads
/// the response to its end; then, when the client may still be sending a
/// body, what it sends is read and dropped for a moment (a close with
/// unread bytes would reset the connection and could lose the response).
async fn close<S: ClientIo>(wire: &SharedWire<S>, linger: bool) {
    let shutdown =
        std::future::poll_fn(|cx| poll_io(wire, cx, tokio::io::AsyncWrite::poll_shutdown));
    if timeout(LINGER, shutdown).await.is_err() || !linger {
        return;
    }
    let drained = async {
        let mut left = LINGER_BYTES;
        let mut scratch = buffers::lend();
        while left > 0 {
            let read = std::future::poll_fn(|cx| {
                let mut buf = tokio::io::ReadBuf::new(scratch.spare());
                poll_io(wire, cx, |io, cx| io.poll_read(cx, &mut buf))
                    .map_ok(|()| buf.filled().len())
            })
            .await;
            match read {
                Ok(0) | Err(_) => break,
                Ok(count) => left = left.saturating_sub(count as u64),
            }
        }
    };
    let _ = timeout(LINGER, drained).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's task is as large as the largest of its states, and
    /// holds that for as long as the connection is open, idle too.
    #[test]
    fn closing_a_connection_adds_no_buffer_to_its_task() {
        let (_client, server) = tokio::io::duplex(64);
        let wire = Wire::shared(server);
        let closing = close(&wire, true);
        let size = std::mem::size_of_val(&closing);
        assert!(size < 1024, "{size} bytes");
    }
}
