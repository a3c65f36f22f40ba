//! The body sent upstream. A client's body is streamed as it arrives, from a
//! slot it leaves only when the upstream connection first reads it: when
//! connecting fails, nothing was read and the next try takes it back. A small
//! body that may be sent again after an answer (a retry on a status) is kept
//! whole instead, up to `MAX_KEPT_BODY`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use crate::sync::lock;
use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

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
    rest: Option<Incoming>,
}

/// The client's body, in its slot until the upstream reads it.
pub struct ClientBody {
    slot: Arc<Mutex<Option<StreamedBody>>>,
    taken: Option<StreamedBody>,
}

/// A handle on a client body's slot, to take it back after a failed connect.
#[derive(Clone)]
pub struct BodyClaim(Arc<Mutex<Option<StreamedBody>>>);

impl BodyClaim {
    /// The body again if no upstream has read from it.
    pub fn reclaim(&self) -> Option<UpstreamBody> {
        let body = lock(&self.0).take()?;
        Some(UpstreamBody::from_stream(body).0)
    }
}

impl UpstreamBody {
    /// The client's body streamed, and the claim that takes it back.
    pub fn streamed(body: Incoming) -> (UpstreamBody, BodyClaim) {
        UpstreamBody::from_stream(StreamedBody {
            read: VecDeque::new(),
            rest: Some(body),
        })
    }

    /// What is left of a client's body streamed, and the claim that takes it back.
    pub fn from_stream(body: StreamedBody) -> (UpstreamBody, BodyClaim) {
        let slot = Arc::new(Mutex::new(Some(body)));
        let claim = BodyClaim(slot.clone());
        (
            UpstreamBody::Client(ClientBody { slot, taken: None }),
            claim,
        )
    }

    pub fn kept(body: &KeptBody) -> UpstreamBody {
        UpstreamBody::Kept(Some(body.clone()))
    }
}

/// Reads the client's body whole if it is at most `MAX_KEPT_BODY`; a larger
/// one comes back as what was read plus the rest, to be streamed.
pub async fn keep_small(mut body: Incoming) -> Result<KeptBody, StreamedBody> {
    let mut read = VecDeque::new();
    let mut size = 0;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The client's body broke: what was read and the error go upstream as they are.
            return Err(StreamedBody {
                read,
                rest: Some(body),
            });
        };
        size += frame.data_ref().map_or(0, Bytes::len);
        read.push_back(frame);
        if size > MAX_KEPT_BODY {
            return Err(StreamedBody {
                read,
                rest: Some(body),
            });
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
    Ok(KeptBody {
        data: data.freeze(),
        trailers,
    })
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Kept(kept) => Poll::Ready(kept.as_mut().and_then(|body| {
                if !body.data.is_empty() {
                    return Some(Ok(Frame::data(std::mem::take(&mut body.data))));
                }
                let trailers = body.trailers.take();
                trailers.map(|trailers| Ok(Frame::trailers(trailers)))
            })),
            UpstreamBody::Client(client) => {
                let body = match &mut client.taken {
                    Some(body) => body,
                    taken @ None => match lock(&client.slot).take() {
                        Some(body) => taken.insert(body),
                        None => return Poll::Ready(None),
                    },
                };
                if let Some(frame) = body.read.pop_front() {
                    return Poll::Ready(Some(Ok(frame)));
                }
                match &mut body.rest {
                    Some(rest) => Pin::new(rest).poll_frame(cx),
                    None => Poll::Ready(None),
                }
            }
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
                None => lock(&client.slot)
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
                None => lock(&client.slot)
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), StreamedBody::size_hint),
            },
        }
    }
}

impl StreamedBody {
    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self
            .read
            .iter()
            .map(|frame| frame.data_ref().map_or(0, |data| data.len() as u64))
            .sum();
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + read);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint
    }
}
