//! HTTP/1.1 on the wire (RFC 9112), as bytes in and bytes out: request and
//! response heads parsed with `httparse` into slices of the read buffer
//! (`request_head`, `response_head`, their fields in `fields` and trailer
//! fields in `trailers`), how a
//! message's body is framed and what its head says of the connection
//! (`framing`), where a body's data lies (`body`, with the chunked decoder
//! of `chunked`), and heads written
//! into one buffer for one `write` (`head_writer`); the read buffers a
//! worker thread lends its connections while bytes are in flight
//! (`buffers`), the buffer it cuts a request's small copies from
//! (`arena`), the header maps it keeps for its requests (`header_maps`) and
//! the custom header names it has met (`header_names`).
//!
//! Nothing here knows routing, sockets or hyper: the connection loop that
//! reads, routes and forwards is built on these parts. Every parser is
//! incremental (a prefix is "incomplete", never an error it would not be
//! with the rest) and bounded, and none panics on any input.

pub mod arena;
pub mod body;
pub mod buffers;
pub mod chunked;
pub mod fields;
pub mod framing;
pub mod head_writer;
pub mod header_maps;
pub mod header_names;
pub mod request_head;
pub mod response_head;
pub mod trailers;

pub use body::{BodyFraming, Taken};
pub use chunked::{ChunkedDecoder, ChunkedError, Progress};
pub use fields::{header_map, Field, FieldSlots, Fields, InvalidField, SharedHead};
pub use framing::{
    persistent, request_facts, request_framing, response_framing, FramingError, RequestFacts,
    RequestFraming, ResponseFraming,
};
pub use head_writer::{Decimal, HeadWriteError, KeptHead};
pub use header_names::{REQUEST_NAMES, RESPONSE_NAMES};
pub use request_head::{parse_request_head, HeadError, RequestHead};
pub use response_head::{parse_response_head, ResponseHead};
pub use trailers::{last_chunk, may_be_trailer, trailer_fields};

/// The largest response head (status line and header fields, up to and
/// including the empty line) read from an upstream, and the largest
/// trailer section.
pub const MAX_HEAD_BYTES: usize = crate::proxy::MAX_HEADER_BYTES;

/// The largest request head read, answered `431` past it: room for a
/// target of up to 65,534 bytes (what the `http` crate takes; `414` past
/// it) beside header fields of up to `MAX_HEAD_BYTES`, whose limit the
/// handler holds them to. The same limits as hyper's server's.
pub const MAX_REQUEST_HEAD_BYTES: usize = 2 * MAX_HEAD_BYTES;

/// The most header fields in one head, and in one trailer section.
pub const MAX_HEADERS: usize = 128;
