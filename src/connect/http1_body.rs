//! A response body read by dockhand's own HTTP/1.1 exchange from its
//! upstream connection, framed as its head said (a length, chunked with
//! trailers, or until the upstream closes). When the body has ended, the
//! connection goes back to the worker thread's pool if it can carry
//! another request, and the read buffer goes back to the thread's
//! buffers; a body dropped before its end closes the connection. When the
//! answer came before the request body was sent whole, the rest of that
//! body is written while this body is read.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf, ReadHalf, WriteHalf};

use super::connection::UpstreamConnection;
use super::error::ExchangeError;
use super::thread_pool::check_in;
use crate::http1::buffers::LentBuffer;
use crate::http1::{arena, trailer_fields, BodyFraming, ResponseFraming};

/// A response body read from its upstream connection, which goes back to
/// this thread's pool once the body has ended (if it can carry another
/// request), and is closed if the body is dropped before. Its read buffer
/// goes back to the thread's buffers at the end too, whenever the body
/// itself is dropped.
pub struct Http1Body {
    connection: Option<Source>,
    address: SocketAddr,
    /// Bytes read and not passed on yet; `None` once the body has ended.
    buffer: Option<LentBuffer>,
    state: BodyFraming,
    reusable: bool,
    /// A chunked body's trailers, given after its last data.
    trailers: Option<Box<HeaderMap>>,
    /// Data was given by the last poll: an error found now waits one poll,
    /// so that the server writes that data out before the error ends the
    /// client's connection (hyper drops what it has not written yet).
    gave_data: bool,
    /// The error held back for that one poll.
    held_error: Option<Http1BodyError>,
}

impl std::fmt::Debug for Http1Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Body")
            .field("address", &self.address)
            .field("reusable", &self.reusable)
            .finish_non_exhaustive()
    }
}

/// The rest of a request body being written, which gives the connection's
/// write half back once the body is sent whole.
pub(super) type RestOfBody =
    Pin<Box<dyn Future<Output = Result<WriteHalf<UpstreamConnection>, ExchangeError>> + Send>>;

/// Where the body is read from.
pub(super) enum Source {
    /// The connection, the request sent whole: kept after the body if it
    /// can carry another request.
    Whole(UpstreamConnection),
    /// The answer came before the request body was sent whole: the rest of
    /// it is written as the response body is read (each poll that reads
    /// drives it too), until it ends or the response does. The connection
    /// is not kept.
    Sharing {
        reader: ReadHalf<UpstreamConnection>,
        rest: Option<RestOfBody>,
    },
}

impl Source {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Source::Whole(connection) => Pin::new(connection).poll_read(cx, buf),
            Source::Sharing { reader, rest } => {
                // A failed write is not this body's error: the upstream's
                // answer, read on, says what became of the request.
                if rest
                    .as_mut()
                    .is_some_and(|rest| rest.as_mut().poll(cx).is_ready())
                {
                    *rest = None;
                }
                Pin::new(reader).poll_read(cx, buf)
            }
        }
    }
}

/// Why a response body could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum Http1BodyError {
    #[error("reading the response body: {0}")]
    Read(#[source] io::Error),
    #[error("the upstream closed the connection before the body's end")]
    Cut,
    #[error("malformed chunked body: {0}")]
    Chunked(#[source] crate::http1::ChunkedError),
    #[error("malformed trailers")]
    Trailers,
}

impl Http1Body {
    pub(super) fn new(
        connection: Source,
        address: SocketAddr,
        buffer: LentBuffer,
        framing: ResponseFraming,
        reusable: bool,
    ) -> Http1Body {
        let state = match framing {
            ResponseFraming::None => BodyFraming::Done,
            ResponseFraming::Length(length) => BodyFraming::length(length),
            ResponseFraming::Chunked => BodyFraming::chunked(),
            ResponseFraming::UntilClose => BodyFraming::UntilClose,
        };
        let mut body = Http1Body {
            connection: Some(connection),
            address,
            buffer: Some(buffer),
            state,
            reusable,
            trailers: None,
            gave_data: false,
            held_error: None,
        };
        if body.state.is_done() {
            body.finish();
        }
        body
    }

    /// The body ended: its connection is kept if nothing follows the body
    /// (bytes after it would be an answer to nothing), and its buffer is
    /// given back.
    fn finish(&mut self) {
        self.state = BodyFraming::Done;
        let nothing_after = self.buffer.take().is_none_or(|buffer| buffer.is_empty());
        if let Some(Source::Whole(connection)) = self.connection.take() {
            if self.reusable && nothing_after {
                check_in(self.address, connection);
            }
        }
    }

    /// The body can't be read any further: its connection is closed.
    fn fail(&mut self, error: Http1BodyError) -> Http1BodyError {
        self.reusable = false;
        self.finish();
        error
    }

    /// The next data within what was read, or `None` when more must be read.
    fn next_data(&mut self) -> Result<Option<Bytes>, Http1BodyError> {
        let Some(buffer) = self.buffer.as_mut().filter(|buffer| !buffer.is_empty()) else {
            return Ok(None);
        };
        if self.state.is_done() {
            return Ok(None);
        }
        let taken = self.state.take(buffer).map_err(Http1BodyError::Chunked)?;
        let done = self.state.ended();
        if done && !self.state.trailers().is_empty() {
            self.trailers = Some(Box::new(
                trailer_fields(self.state.trailers()).ok_or(Http1BodyError::Trailers)?,
            ));
        }
        let (data, consumed) = (taken.data, taken.consumed);
        let bytes = arena::copy(&buffer[data]);
        buffer.consume(consumed);
        if done {
            self.finish();
        }
        Ok(Some(bytes))
    }

    /// Reads more into the buffer: `Ok(0)` at the end of the connection.
    fn poll_read_more(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, Http1BodyError>> {
        let (Some(connection), Some(buffer)) = (&mut self.connection, &mut self.buffer) else {
            return Poll::Ready(Ok(0));
        };
        let mut read = ReadBuf::new(buffer.spare());
        ready!(connection.poll_read(cx, &mut read)).map_err(Http1BodyError::Read)?;
        let count = read.filled().len();
        buffer.mark_filled(count);
        Poll::Ready(Ok(count))
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Http1BodyError>>> {
        loop {
            match self.next_data() {
                Err(error) => return Poll::Ready(Some(Err(self.fail(error)))),
                Ok(Some(data)) if !data.is_empty() => {
                    return Poll::Ready(Some(Ok(Frame::data(data))))
                }
                Ok(_) => {}
            }
            if self.state.is_done() {
                let trailers = self.trailers.take().filter(|trailers| !trailers.is_empty());
                return Poll::Ready(trailers.map(|trailers| Ok(Frame::trailers(*trailers))));
            }
            match ready!(self.poll_read_more(cx)) {
                Ok(0) if matches!(self.state, BodyFraming::UntilClose) => {
                    self.reusable = false;
                    self.finish();
                }
                Ok(0) => return Poll::Ready(Some(Err(self.fail(Http1BodyError::Cut)))),
                Ok(_) => {}
                Err(error) => return Poll::Ready(Some(Err(self.fail(error)))),
            }
        }
    }
}

impl Body for Http1Body {
    type Data = Bytes;
    type Error = Http1BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Http1BodyError>>> {
        let this = self.get_mut();
        if let Some(error) = this.held_error.take() {
            return Poll::Ready(Some(Err(error)));
        }
        let polled = this.poll_next(cx);
        let gave_data = this.gave_data;
        this.gave_data = matches!(&polled, Poll::Ready(Some(Ok(frame))) if frame.is_data());
        match polled {
            Poll::Ready(Some(Err(error))) if gave_data => {
                this.held_error = Some(error);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            polled => polled,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.state.is_done() && self.trailers.is_none() && self.held_error.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            BodyFraming::Length(left) => SizeHint::with_exact(left),
            BodyFraming::Done if self.trailers.is_none() => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
