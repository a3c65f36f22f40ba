//! How bodies are framed between client and upstream (RFC 9112 §6): the
//! only transfer coding dockhand passes is `chunked`, a length beside it or
//! on a status without content is dropped, a body of unknown length is
//! announced as chunked, and a body's first frame, when it has already
//! arrived, is read before anything of the message is passed on, so that a
//! malformed one is answered with a status instead of a cut connection.
//! Which headers are hop-by-hop is `headers`'s.

use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};

use super::error::{Cause, ErrorKind, ProxyError};

/// A `Transfer-Encoding` with codings besides one final `chunked`.
#[derive(Debug, thiserror::Error)]
#[error("Transfer-Encoding {codings:?}: only chunked alone is passed on")]
pub struct OtherCodings {
    codings: String,
}

/// RFC 9112 §6.1: a server that receives a request with a transfer coding
/// it does not understand should answer `501`. hyper has decoded the final
/// `chunked`; any coding under it (`gzip, chunked`) would reach the
/// upstream as if the body were plain.
pub fn check_request_codings(headers: &HeaderMap) -> Result<(), ProxyError> {
    only_chunked(headers)
        .map_err(|other| ProxyError::new(ErrorKind::UnsupportedTransferCoding, other))
}

/// Checks an upstream's response head and drops the lengths that would be
/// wrong once it is passed on. A transfer coding besides `chunked` is
/// refused (`502`): dockhand never tells an upstream that the client
/// accepts one (`TE` is hop-by-hop), HTTP/2 clients and HTTP/1.0 ones can't
/// receive one, and hyper would pass the body on decoded of its chunks only.
pub fn check_response_head<B>(response: &mut Response<B>) -> Result<(), ProxyError> {
    let headers = response.headers_mut();
    // Most answers have no `Transfer-Encoding`: one lookup says so.
    if headers.contains_key(header::TRANSFER_ENCODING) {
        only_chunked(headers)
            .map_err(|other| ProxyError::new(ErrorKind::UpstreamTransferCoding, other))?;
        // RFC 9112 §6.3: with `Transfer-Encoding`, the length is the
        // framing and a `Content-Length` beside it is wrong. hyper read the
        // body by the framing but keeps both headers; passed on, the
        // length would cut the body for an HTTP/1.1 client and contradict
        // the DATA sent to an HTTP/2 one.
        headers.remove(header::CONTENT_LENGTH);
    }
    // RFC 9110 §8.6: no `Content-Length` on a 1xx or 204. A 304's would
    // describe the 200 it stands for, which hyper drops for HTTP/1.1
    // clients; HTTP/2 clients get the same head, without a length.
    let status = response.status();
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    Ok(())
}

fn only_chunked(headers: &HeaderMap) -> Result<(), OtherCodings> {
    let lines = headers.get_all(header::TRANSFER_ENCODING);
    let mut codings = lines
        .iter()
        .flat_map(|line| line.as_bytes().split(|byte| *byte == b','))
        .map(<[u8]>::trim_ascii);
    let only_chunked = match codings.next() {
        None => true,
        Some(first) => first.eq_ignore_ascii_case(b"chunked") && codings.next().is_none(),
    };
    if only_chunked {
        return Ok(());
    }
    let listed: Vec<&[u8]> = lines.iter().map(HeaderValue::as_bytes).collect();
    Err(OtherCodings {
        codings: String::from_utf8_lossy(&listed.join(&b", "[..])).into_owned(),
    })
}

/// Frames a request's body for its upstream. A `Content-Length` goes in
/// plain decimal: hyper accepts a client's `010`, which some servers read
/// as octal. Over HTTP/1.1 a body of unknown length is announced as
/// chunked: hyper's client otherwise sends a GET, HEAD or CONNECT without
/// it (it assumes those have none) and the body read from the client is
/// lost. HTTP/2 frames every body itself.
pub fn frame_request<B: Body>(request: &mut Request<B>) {
    let length = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    if let Some(length) = length {
        request
            .headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(length));
        return;
    }
    let body = request.body();
    let unknown = !body.is_end_stream() && body.size_hint().exact().is_none();
    if unknown && request.version() == Version::HTTP_11 {
        request.headers_mut().insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
}

/// A body's next frame, as `Body::poll_frame` gives it.
pub type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// The body's next frame if it is there now, without waiting: what hyper
/// has already read and decoded. `Poll::Pending` when it has not arrived.
pub fn ready_frame<B: Body + Unpin>(body: &mut B) -> Polled<B> {
    Pin::new(body).poll_frame(&mut Context::from_waker(Waker::noop()))
}

/// A body with its first frame read ahead, when it had arrived with the head.
pub struct ReadAhead<B> {
    first: Option<Frame<Bytes>>,
    rest: B,
}

impl<B> From<B> for ReadAhead<B> {
    fn from(rest: B) -> ReadAhead<B> {
        ReadAhead { first: None, rest }
    }
}

/// The upstream's response with its body's first frame read ahead if it
/// has already arrived: a body found malformed (a bad first chunk size) or
/// cut before any of it is sent is a `502` the client can still be answered
/// with, instead of a connection ended after the head (which an HTTP/1.1
/// client sees as no response, losing the requests it pipelined after).
/// The response is not held for a frame still to come: a stream whose
/// first bytes come late (events, long polls) gets its head at once.
pub fn read_ahead<B>(response: Response<B>) -> Result<Response<ReadAhead<B>>, ProxyError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Cause>,
{
    let (head, mut rest) = response.into_parts();
    let first = match ready_frame(&mut rest) {
        Poll::Ready(Some(Err(error))) => {
            return Err(ProxyError::new(ErrorKind::BadResponseBody, error))
        }
        Poll::Ready(Some(Ok(frame))) => Some(frame),
        Poll::Ready(None) | Poll::Pending => None,
    };
    Ok(Response::from_parts(head, ReadAhead { first, rest }))
}

impl<B: Body<Data = Bytes> + Unpin> Body for ReadAhead<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.first.take() {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None => Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        size_with_read(self.first.iter(), self.rest.size_hint())
    }
}

/// The size of a body of which `read` frames were read ahead and `rest`
/// is still to come.
pub fn size_with_read<'f>(
    read: impl Iterator<Item = &'f Frame<Bytes>>,
    rest: SizeHint,
) -> SizeHint {
    let read: u64 = read
        .filter_map(Frame::data_ref)
        .map(|data| data.len() as u64)
        .sum();
    let mut hint = SizeHint::new();
    hint.set_lower(rest.lower() + read);
    if let Some(upper) = rest.upper() {
        hint.set_upper(upper + read);
    }
    hint
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::headers::header_map;

    fn coding_error(pairs: &[(&str, &str)]) -> Option<String> {
        only_chunked(&header_map(pairs))
            .err()
            .map(|other| other.codings)
    }

    #[test]
    fn only_chunked_alone_is_passed_on() {
        assert_eq!(coding_error(&[]), None);
        assert_eq!(coding_error(&[("transfer-encoding", "chunked")]), None);
        assert_eq!(coding_error(&[("transfer-encoding", " Chunked ")]), None);
        for (lines, named) in [
            (
                &[("transfer-encoding", "gzip, chunked")][..],
                "gzip, chunked",
            ),
            (
                &[("transfer-encoding", "chunked, chunked")],
                "chunked, chunked",
            ),
            (&[("transfer-encoding", "gzip")], "gzip"),
            (&[("transfer-encoding", "identity")], "identity"),
            (
                &[
                    ("transfer-encoding", "gzip"),
                    ("transfer-encoding", "chunked"),
                ],
                "gzip, chunked",
            ),
            (&[("transfer-encoding", "")], ""),
        ] {
            assert_eq!(coding_error(lines).as_deref(), Some(named), "{lines:?}");
        }
    }

    #[test]
    fn statuses_without_content_lose_their_length() {
        for (status, kept) in [(200, true), (204, false), (304, false), (103, false)] {
            let mut response = Response::new(());
            *response.status_mut() = StatusCode::from_u16(status).unwrap();
            response
                .headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(5));
            check_response_head(&mut response).unwrap();
            let length = response.headers().get(header::CONTENT_LENGTH);
            assert_eq!(length.is_some(), kept, "{status}");
        }
    }

    #[test]
    fn a_length_beside_chunked_is_dropped_and_other_codings_refused() {
        let mut response = Response::new(());
        *response.headers_mut() =
            header_map(&[("transfer-encoding", "chunked"), ("content-length", "5")]);
        check_response_head(&mut response).unwrap();
        assert!(!response.headers().contains_key(header::CONTENT_LENGTH));
        response.headers_mut().insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, chunked"),
        );
        let error = check_response_head(&mut response).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UpstreamTransferCoding);
        let error = check_request_codings(response.headers()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::UnsupportedTransferCoding);
    }

    #[test]
    fn a_length_is_decimal_and_an_unknown_one_chunked_over_http1() {
        use http_body_util::{Empty, Full, StreamBody};
        let unknown = || {
            StreamBody::new(futures_util::stream::pending::<
                Result<Frame<Bytes>, std::convert::Infallible>,
            >())
        };
        fn framed<B: Body>(mut request: Request<B>) -> HeaderMap {
            frame_request(&mut request);
            request.headers().clone()
        }
        let headers = framed(Request::new(unknown()));
        assert_eq!(headers[header::TRANSFER_ENCODING], "chunked");
        let over_h2 = Request::builder().version(Version::HTTP_2);
        assert!(framed(over_h2.body(unknown()).unwrap()).is_empty());
        let with_length = Request::builder().header(header::CONTENT_LENGTH, "010");
        let headers = framed(with_length.body(unknown()).unwrap());
        assert_eq!(headers.len(), 1, "{headers:?}");
        assert_eq!(headers[header::CONTENT_LENGTH], "10");
        assert!(framed(Request::new(Full::new(Bytes::from_static(b"hello")))).is_empty());
        assert!(framed(Request::new(Empty::<Bytes>::new())).is_empty());
    }
}
