//! The response body the proxy sends: the upstream's body streamed frame by
//! frame (data and trailers), compressed or as it is, or a short message
//! of dockhand's own. It counts the bytes sent, notes an upstream body cut
//! (or stalled) midway, and writes the request's access-log line, and
//! counts its metrics, when it ends.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::access_log::AccessRecord;
use super::error::Cause;
use super::framing::ReadAhead;
use super::idle::ActiveRequest;
use super::response_body::UpstreamStream;
use crate::kept_box::KeptBox;
use crate::middleware::{Compressed, Encoder};
use crate::upstream::InFlight;

pub struct ProxyBody {
    inner: Inner,
    bytes_out: u64,
    record: Option<KeptBox<AccessRecord>>,
    /// The request counts as in flight to its upstream until its body ends.
    _in_flight: Option<InFlight>,
    /// And as active on its client connection, which is not idle till then.
    _active: Option<ActiveRequest>,
}

enum Inner {
    // In a kept block (no allocation): a response is moved whole through
    // each layer between its upstream and its client (the handler, the
    // access record's attaching, the writer), and a move is a copy of the
    // whole value; with the body's few hundred bytes in a block, each copy
    // is of its head and a pointer.
    Upstream(KeptBox<ReadAhead<UpstreamStream>>),
    // Boxed: rare, and an encoder's state is large.
    Compressed(Box<Compressed<ReadAhead<UpstreamStream>>>),
    Message(Option<Bytes>),
}

impl ProxyBody {
    pub fn upstream(body: ReadAhead<UpstreamStream>, in_flight: InFlight) -> ProxyBody {
        ProxyBody::new(Inner::Upstream(KeptBox::new(body)), Some(in_flight))
    }

    /// The upstream's body compressed by `encoder` (the head says so already).
    pub fn compressed(
        body: ReadAhead<UpstreamStream>,
        encoder: Encoder,
        in_flight: InFlight,
    ) -> ProxyBody {
        let compressed = Box::new(Compressed::new(body, encoder));
        ProxyBody::new(Inner::Compressed(compressed), Some(in_flight))
    }

    pub fn message(text: Bytes) -> ProxyBody {
        ProxyBody::new(Inner::Message(Some(text)), None)
    }

    fn new(inner: Inner, in_flight: Option<InFlight>) -> ProxyBody {
        ProxyBody {
            inner,
            bytes_out: 0,
            record: None,
            _in_flight: in_flight,
            _active: None,
        }
    }

    /// Counts the request as active on its client connection until this body ends.
    pub fn counting(mut self, active: ActiveRequest) -> ProxyBody {
        self._active = Some(active);
        self
    }

    /// Attaches the access-log record written when this body is done or dropped.
    pub fn with_record(mut self, record: KeptBox<AccessRecord>) -> ProxyBody {
        self.record = Some(record);
        self
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = Cause;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cause>>> {
        let this = &mut *self;
        let frame = match &mut this.inner {
            Inner::Upstream(body) => std::task::ready!(Pin::new(&mut **body).poll_frame(cx)),
            Inner::Compressed(body) => std::task::ready!(Pin::new(body).poll_frame(cx)),
            Inner::Message(text) => text.take().map(|text| Ok(Frame::data(text))),
        };
        if let (Some(Err(error)), Some(record)) = (&frame, &mut this.record) {
            // The head is sent: the error reaches hyper, which ends the
            // client's connection abnormally; the record says why.
            record.body_cut(error.as_ref());
        }
        if let Some(Ok(data)) = frame.as_ref().map(|f| f.as_ref().map(Frame::data_ref)) {
            this.bytes_out += data.map_or(0, |d| d.len() as u64);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Upstream(body) => body.is_end_stream(),
            Inner::Compressed(body) => body.is_end_stream(),
            Inner::Message(text) => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Upstream(body) => body.size_hint(),
            Inner::Compressed(body) => body.size_hint(),
            Inner::Message(text) => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}

impl Drop for ProxyBody {
    fn drop(&mut self) {
        if let Some(record) = self.record.take() {
            record.write(self.bytes_out);
            if let Some(counters) = &record.counters {
                counters.count(
                    record.status.as_u16(),
                    record.started.elapsed(),
                    self.bytes_out,
                );
            }
        }
    }
}
