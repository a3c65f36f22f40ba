//! The body sent upstream. A client's body is streamed as it arrives, from a
//! slot it leaves only when the upstream connection first reads it: when
//! connecting fails, nothing was read and the next try takes it back. A small
//! body that may be sent again after an answer (a retry on a status) is kept
//! whole instead, up to `MAX_KEPT_BODY`. When reading the client's body fails
//! while it is sent, the upstream connection only sees that it failed; why
//! (the client's fault) is kept for the request, which answers it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::sync::lock;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;

use super::client_body::{ClientBodyError, ClientStream};
use super::framing::{ready_frame, size_with_read};

/// The largest body kept to be sent again.
pub const MAX_KEPT_BODY: usize = 64 * 1024;

pub enum UpstreamBody {
    Empty,
    Kept(Option<KeptBody>),
    Client(ClientBody),
}

/// A whole body held in memory, sent again as often as needed.
#[derive(Clone)]
pub struct KeptBody {
    data: Bytes,
    trailers: Option<HeaderMap>,
}

/// What is left of the client's body: bytes already read (while trying to
/// keep it whole) and the rest of the stream.
pub struct StreamedBody {
    read: VecDeque<Frame<Bytes>>,
    rest: ClientStream,
}

/// What the request's tries share of the client's body.
struct Shared {
    /// The body, until an upstream connection reads from it.
    body: Mutex<Option<StreamedBody>>,
    /// Why reading it failed, once it did.
    failure: Mutex<Option<ClientBodyError>>,
    /// Whether the try sending it waits for the client's next bytes.
    waiting_on_client: AtomicBool,
}

/// The client's body, in its slot until the upstream reads it.
pub struct ClientBody {
    shared: Arc<Shared>,
    taken: Option<StreamedBody>,
}

/// The error an upstream connection sees when reading the client's body
/// failed; why it failed is the request's, through its `BodyClaim`.
#[derive(Debug, thiserror::Error)]
#[error("the client's request body failed")]
pub struct ClientBodyFailed;

/// A handle on a client body's slot, to take it back after a failed connect
/// and to learn how the client's side of it went.
#[derive(Clone)]
pub struct BodyClaim(Arc<Shared>);

impl BodyClaim {
    /// The body again if no upstream has read from it.
    pub fn reclaim(&self) -> Option<UpstreamBody> {
        let untouched = lock(&self.0.body).is_some();
        untouched.then(|| {
            UpstreamBody::Client(ClientBody {
                shared: self.0.clone(),
                taken: None,
            })
        })
    }

    /// Why reading the client's body failed, if it did.
    pub fn failure(&self) -> Option<ClientBodyError> {
        lock(&self.0.failure).take()
    }

    /// Whether the try sending the body is waiting for the client: an
    /// upstream that has not answered may be waiting for the same bytes.
    pub fn waits_on_client(&self) -> bool {
        self.0.waiting_on_client.load(Ordering::Relaxed)
    }
}

impl UpstreamBody {
    /// The client's body streamed, and the claim that takes it back. Its
    /// first frame is read now if it has arrived: a body malformed from its
    /// start fails here, before any upstream is tried.
    pub fn streamed(mut body: ClientStream) -> Result<(UpstreamBody, BodyClaim), ClientBodyError> {
        let mut read = VecDeque::new();
        if let Poll::Ready(Some(frame)) = ready_frame(&mut body) {
            read.push_back(frame?);
        }
        Ok(UpstreamBody::from_stream(StreamedBody { read, rest: body }))
    }

    /// What is left of a client's body streamed, and the claim that takes it back.
    pub fn from_stream(body: StreamedBody) -> (UpstreamBody, BodyClaim) {
        let shared = Arc::new(Shared {
            body: Mutex::new(Some(body)),
            failure: Mutex::new(None),
            waiting_on_client: AtomicBool::new(false),
        });
        let claim = BodyClaim(shared.clone());
        (
            UpstreamBody::Client(ClientBody {
                shared,
                taken: None,
            }),
            claim,
        )
    }

    pub fn kept(body: &KeptBody) -> UpstreamBody {
        UpstreamBody::Kept(Some(body.clone()))
    }
}

/// A client's body read as far as `keep_small` reads it.
pub enum SmallBody {
    Whole(KeptBody),
    /// Over `MAX_KEPT_BODY`: what was read and the rest, to be streamed.
    TooLarge(StreamedBody),
}

/// Reads the client's body whole if it is at most `MAX_KEPT_BODY`.
pub async fn keep_small(mut body: ClientStream) -> Result<SmallBody, ClientBodyError> {
    let mut read = VecDeque::new();
    let mut size = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame?;
        size += frame.data_ref().map_or(0, Bytes::len);
        read.push_back(frame);
        if size > MAX_KEPT_BODY {
            return Ok(SmallBody::TooLarge(StreamedBody { read, rest: body }));
        }
    }
    let mut data = BytesMut::with_capacity(size);
    let mut trailers = None;
    for frame in read {
        match frame.into_data() {
            Ok(bytes) => data.extend_from_slice(&bytes),
            Err(frame) => trailers = frame.into_trailers().ok(),
        }
    }
    Ok(SmallBody::Whole(KeptBody {
        data: data.freeze(),
        trailers,
    }))
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = ClientBodyFailed;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyFailed>>> {
        match self.get_mut() {
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Kept(kept) => Poll::Ready(kept.as_mut().and_then(|body| {
                if !body.data.is_empty() {
                    return Some(Ok(Frame::data(std::mem::take(&mut body.data))));
                }
                let trailers = body.trailers.take();
                trailers.map(|trailers| Ok(Frame::trailers(trailers)))
            })),
            UpstreamBody::Client(client) => client.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Empty => true,
            UpstreamBody::Kept(kept) => kept
                .as_ref()
                .is_none_or(|body| body.data.is_empty() && body.trailers.is_none()),
            UpstreamBody::Client(client) => match &client.taken {
                Some(body) => body.is_end_stream(),
                None => lock(&client.shared.body)
                    .as_ref()
                    .is_none_or(StreamedBody::is_end_stream),
            },
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Empty => SizeHint::with_exact(0),
            UpstreamBody::Kept(kept) => {
                SizeHint::with_exact(kept.as_ref().map_or(0, |body| body.data.len() as u64))
            }
            UpstreamBody::Client(client) => match &client.taken {
                Some(body) => body.size_hint(),
                None => lock(&client.shared.body)
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), StreamedBody::size_hint),
            },
        }
    }
}

impl ClientBody {
    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyFailed>>> {
        let body = match &mut self.taken {
            Some(body) => body,
            taken @ None => match lock(&self.shared.body).take() {
                Some(body) => taken.insert(body),
                None => return Poll::Ready(None),
            },
        };
        if let Some(frame) = body.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let polled = Pin::new(&mut body.rest).poll_frame(cx);
        self.shared
            .waiting_on_client
            .store(polled.is_pending(), Ordering::Relaxed);
        match polled {
            Poll::Ready(Some(Err(error))) => {
                *lock(&self.shared.failure) = Some(error);
                Poll::Ready(Some(Err(ClientBodyFailed)))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl StreamedBody {
    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        size_with_read(self.read.iter(), self.rest.size_hint())
    }
}
