//! One client connection as the own HTTP/1.1 server shares it between its
//! connection task (which reads heads and writes responses) and the request
//! body it hands to the handler (which may be read from another task, by
//! hyper's client): the socket, the bytes read and not used yet, and where
//! the current request's body ends. The bytes sit in a buffer lent by the
//! worker thread, held only while some are in flight.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::http1::buffers::{self, HeadTooLarge, LentBuffer};
use crate::http1::{arena, trailer_fields, BodyFraming, ChunkedError};
use crate::sync::SpinLock;

/// What a client connection may be: its socket, or the TLS stream over it.
pub trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> ClientIo for S {}

/// The interim answer a client that sent `Expect: 100-continue` waits for
/// before its body (RFC 9110 §10.1.1).
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// The most of a body nobody reads that is skipped, if it has arrived,
/// to keep its connection for the next request.
const SKIPPED_BYTES: usize = 64 * 1024;

pub(super) type SharedWire<S> = Arc<SpinLock<Wire<S>>>;

pub(super) struct Wire<S> {
    /// `None` once the connection was handed to hyper's server.
    io: Option<S>,
    /// Bytes read and not used yet; `None` whenever there are none.
    buffer: Option<LentBuffer>,
    /// The request whose body `body` frames, counted from 1.
    request: u64,
    body: BodyFraming,
    /// The body could not be read to its end: the connection ends.
    broken: bool,
    /// `100 Continue` is owed (and this much of it written) before the
    /// body is read, unless the response has begun.
    continue_owed: Option<usize>,
    answering: bool,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RequestBodyError {
    #[error("reading the request body: {0}")]
    Read(#[source] io::Error),
    #[error("the client closed the connection before the body's end")]
    Cut,
    #[error("malformed chunked body: {0}")]
    Chunked(#[source] ChunkedError),
    #[error("malformed trailers")]
    Trailers,
    #[error("the request body was already read to its end or abandoned")]
    Gone,
}

impl<S: ClientIo> Wire<S> {
    pub(super) fn new(io: S) -> Wire<S> {
        Wire {
            io: Some(io),
            buffer: None,
            request: 0,
            body: BodyFraming::Done,
            broken: false,
            continue_owed: None,
            answering: false,
        }
    }

    pub(super) fn shared(io: S) -> SharedWire<S> {
        Arc::new(SpinLock::new(Wire::new(io)))
    }

    /// The bytes read and not used yet.
    pub(super) fn buffered(&self) -> &[u8] {
        self.buffer.as_deref().unwrap_or_default()
    }

    /// Drops the first `count` bytes read, and the buffer once it is empty.
    pub(super) fn consume(&mut self, count: usize) {
        if let Some(buffer) = &mut self.buffer {
            buffer.consume(count);
            if buffer.is_empty() {
                self.buffer = None;
            }
        }
    }

    /// Makes room for a head that fills the buffer.
    pub(super) fn grow(&mut self) -> Result<(), HeadTooLarge> {
        self.buffer.as_mut().map_or(Ok(()), LentBuffer::grow)
    }

    /// Whether the buffer is full (a head that does not fit yet).
    pub(super) fn is_full(&mut self) -> bool {
        self.buffer
            .as_mut()
            .is_some_and(|buffer| buffer.spare().is_empty())
    }

    /// Reads more into the buffer (lent for the read, and given back if
    /// nothing came): `Ok(0)` when the client closed.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(io) = &mut self.io else {
            return Poll::Ready(Ok(0));
        };
        buffers::poll_fill(&mut self.buffer, |spare| {
            let mut read = ReadBuf::new(spare);
            Pin::new(io)
                .poll_read(cx, &mut read)
                .map_ok(|()| read.filled().len())
        })
    }

    /// Starts request number `request`, whose body is framed by `body`.
    pub(super) fn begin(&mut self, request: u64, body: BodyFraming, expects_continue: bool) {
        self.request = request;
        self.continue_owed = (expects_continue && !body.is_done()).then_some(0);
        self.body = body;
        self.answering = false;
    }

    /// The response's head is about to be written: no `100 Continue` from
    /// now on. What of one was written in part is returned, for the head to
    /// follow it.
    pub(super) fn answer(&mut self) -> &'static [u8] {
        self.answering = true;
        match self.continue_owed.take() {
            // Not begun: the client gets the final answer instead.
            Some(0) | None => &[],
            Some(written) => &CONTINUE[written..],
        }
    }

    /// Whether the current request's body was read to its end, so that the
    /// next request starts at the next byte.
    pub(super) fn body_read(&self) -> bool {
        self.body.is_done() && !self.broken
    }

    /// Just before the response: whether the connection can still carry
    /// another request after it. A body nobody reads any more (`alone`: no
    /// `Http1RequestBody` is left) is skipped if the rest of it has already
    /// arrived, as hyper's server skips it, so that a request answered
    /// without its body (a 404 to a POST) keeps its connection. A body that
    /// failed, or that nobody will read to its end, ends the connection, and
    /// the response says so (`Connection: close`).
    pub(super) fn settle(&mut self, alone: bool) -> bool {
        // No `100 Continue` for a body skipped here (one begun is finished
        // by `answer`).
        self.answering = true;
        if alone {
            let mut cx = Context::from_waker(Waker::noop());
            let mut skipped = 0;
            while skipped <= SKIPPED_BYTES {
                match self.poll_body(self.request, &mut cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        skipped += frame.data_ref().map_or(0, Bytes::len);
                    }
                    _ => break,
                }
            }
        }
        !self.broken && (self.body.is_done() || !alone)
    }

    /// Ready once the client has closed the connection (or it failed) while
    /// its request is answered: hyper's server then drops the answer, and
    /// with it the upstream's exchange. Looked at only once the body has
    /// been read (until then the body reads the connection), and only while
    /// no bytes of a next request wait (those are its to read).
    pub(super) fn poll_gone(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.body.is_done() || !self.buffered().is_empty() {
            return Poll::Pending;
        }
        match self.poll_fill(cx) {
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(()),
            Poll::Ready(Ok(_)) | Poll::Pending => Poll::Pending,
        }
    }

    pub(super) fn io(&mut self) -> io::Result<Pin<&mut S>> {
        match &mut self.io {
            Some(io) => Ok(Pin::new(io)),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// The connection and the bytes read from it, for hyper's server.
    pub(super) fn hand_off(&mut self) -> Option<(S, Option<LentBuffer>)> {
        Some((self.io.take()?, self.buffer.take()))
    }

    /// Writes what is left of `100 Continue`.
    fn poll_continue(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(written) = self.continue_owed {
            if written == CONTINUE.len() {
                // Flushed: over TLS it would wait in the stream's buffer.
                ready!(self.io()?.poll_flush(cx))?;
                self.continue_owed = None;
                break;
            }
            if self.answering {
                // Unsent, or finished ahead of the response's head (`answer`).
                break;
            }
            let count = ready!(self.io()?.poll_write(cx, &CONTINUE[written..]))?;
            if count == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.continue_owed = Some(written + count);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_body(
        &mut self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        if request != self.request {
            return Poll::Ready(Some(Err(RequestBodyError::Gone)));
        }
        loop {
            if self.body.is_done() {
                return Poll::Ready(None);
            }
            match self.next_frame() {
                Ok(Some(frame)) => return Poll::Ready(Some(Ok(frame))),
                Ok(None) => {}
                Err(error) => return Poll::Ready(Some(Err(self.fail(error)))),
            }
            if self.body.is_done() {
                return Poll::Ready(None);
            }
            if let Err(error) = ready!(self.poll_continue(cx)) {
                return Poll::Ready(Some(Err(self.fail(RequestBodyError::Read(error)))));
            }
            if self.is_full() {
                // A chunk line or trailer section that fills the buffer.
                if self.grow().is_err() {
                    return Poll::Ready(Some(Err(self.fail(RequestBodyError::Trailers))));
                }
            }
            match ready!(self.poll_fill(cx)) {
                Ok(0) => return Poll::Ready(Some(Err(self.fail(RequestBodyError::Cut)))),
                Ok(_) => {}
                Err(error) => {
                    return Poll::Ready(Some(Err(self.fail(RequestBodyError::Read(error)))))
                }
            }
        }
    }

    /// The next frame within what was read: data, or the trailers at the
    /// end; `None` when more must be read (or the body ended bare).
    fn next_frame(&mut self) -> Result<Option<Frame<Bytes>>, RequestBodyError> {
        let Some(buffer) = self.buffer.as_deref().filter(|buffer| !buffer.is_empty()) else {
            return Ok(None);
        };
        let taken = self.body.take(buffer).map_err(RequestBodyError::Chunked)?;
        let data = (!taken.data.is_empty()).then(|| arena::copy(&buffer[taken.data]));
        self.consume(taken.consumed);
        if let Some(data) = data {
            if self.body.ended() && self.body.trailers().is_empty() {
                self.body = BodyFraming::Done;
            }
            return Ok(Some(Frame::data(data)));
        }
        if !self.body.ended() {
            return Ok(None);
        }
        let section = self.body.trailers();
        let trailers = match section.is_empty() {
            true => None,
            false => Some(trailer_fields(section).ok_or(RequestBodyError::Trailers)?),
        };
        self.body = BodyFraming::Done;
        Ok(trailers.map(Frame::trailers))
    }

    fn fail(&mut self, error: RequestBodyError) -> RequestBodyError {
        self.broken = true;
        self.body = BodyFraming::Done;
        error
    }
}

/// Polls `operation` on the connection's socket, under the lock; an error
/// once the connection was handed to hyper's server.
pub(super) fn poll_io<S: ClientIo, T>(
    wire: &SharedWire<S>,
    cx: &mut Context<'_>,
    operation: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    match wire.lock().io() {
        Ok(io) => operation(io, cx),
        Err(error) => Poll::Ready(Err(error)),
    }
}

/// Reads one request's body off a connection of the own server.
trait BodySource: Send {
    fn poll_body(
        &mut self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>>;
    fn ended(&self, request: u64) -> bool;
    fn left(&self, request: u64) -> Option<u64>;
}

impl<S: ClientIo> BodySource for Wire<S> {
    fn poll_body(
        &mut self,
        request: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        Wire::poll_body(self, request, cx)
    }

    fn ended(&self, request: u64) -> bool {
        request != self.request || self.body.is_done()
    }

    fn left(&self, request: u64) -> Option<u64> {
        match self.body {
            BodyFraming::Length(left) if request == self.request => Some(left),
            _ => None,
        }
    }
}

/// A request body read by the own HTTP/1.1 server, from the connection
/// its head came on.
pub struct Http1RequestBody {
    /// `None` for a body known empty from the head: the connection is not
    /// looked at (nor shared, which would cost its count twice).
    wire: Option<Arc<SpinLock<dyn BodySource>>>,
    request: u64,
}

impl Http1RequestBody {
    pub(super) fn new<S: ClientIo>(wire: &SharedWire<S>, request: u64, empty: bool) -> Self {
        let wire = (!empty).then(|| wire.clone() as Arc<SpinLock<dyn BodySource>>);
        Http1RequestBody { wire, request }
    }
}

impl Body for Http1RequestBody {
    type Data = Bytes;
    type Error = RequestBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, RequestBodyError>>> {
        match &self.wire {
            Some(wire) => wire.lock().poll_body(self.request, cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.wire
            .as_ref()
            .is_none_or(|wire| wire.lock().ended(self.request))
    }

    fn size_hint(&self) -> SizeHint {
        let Some(wire) = &self.wire else {
            return SizeHint::with_exact(0);
        };
        match wire.lock().left(self.request) {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}
