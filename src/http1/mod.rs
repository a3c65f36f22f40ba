//! HTTP/1.1 on the wire (RFC 9112), as bytes in and bytes out: request and
//! response heads parsed with `httparse` into slices of the read buffer
//! (`request_head`, `response_head`, their fields in `fields`), how a
//! message's body is framed and what its head says of the connection
//! (`framing`), the chunked body decoder (`chunked`), and heads written
//! from pieces for one `writev` (`head_writer`); and the read buffers a
//! worker thread lends its connections while bytes are in flight (`buffers`).
//!
//! Nothing here knows routing, sockets or hyper: the connection loop that
//! reads, routes and forwards is built on these parts. Every parser is
//! incremental (a prefix is "incomplete", never an error it would not be
//! with the rest) and bounded, and none panics on any input.

pub mod buffers;
pub mod chunked;
pub mod fields;
pub mod framing;
pub mod head_writer;
pub mod request_head;
pub mod response_head;

pub use chunked::{ChunkedDecoder, ChunkedError, Progress};
pub use fields::{Field, Fields};
pub use framing::{
    request_facts, request_framing, response_framing, response_persistent, FramingError,
    RequestFacts, RequestFraming, ResponseFraming,
};
pub use head_writer::{Decimal, HeadWriteError, HeadWriter};
pub use request_head::{parse_request_head, HeadError, RequestHead};
pub use response_head::{parse_response_head, ResponseHead};

/// The largest head (request line or status line and header fields, up to
/// and including the empty line) read; larger request heads are answered
/// `431`. The same limit as the hyper path's.
pub const MAX_HEAD_BYTES: usize = crate::proxy::MAX_HEADER_BYTES;

/// The most header fields in one head, and in one trailer section.
pub const MAX_HEADERS: usize = 128;
