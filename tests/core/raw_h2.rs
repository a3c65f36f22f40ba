//! A raw HTTP/2 client (prior knowledge, RFC 9113) for the hostile tests:
//! frames written byte by byte, so that it can send what no well-behaved
//! client library would; header blocks as HPACK literals without indexing
//! and without Huffman coding (RFC 7541 §6.2.2), which is all a server must
//! decode; and every frame the server sends collected in order. The server's
//! SETTINGS are acknowledged as they come, so that its limits apply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Mutex};

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (RFC 9113 §6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// Error codes (RFC 9113 §7).
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const COMPRESSION_ERROR: u32 = 0x9;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Settings (RFC 9113 §6.5.2).
pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const INITIAL_WINDOW_SIZE: u16 = 0x4;

/// One frame as received.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let code = |at: usize| {
            let bytes = self.payload.get(at..at + 4)?;
            Some(u32::from_be_bytes(bytes.try_into().unwrap()))
        };
        match self.kind {
            RST_STREAM => code(0),
            GOAWAY => code(4),
            _ => None,
        }
    }

    /// The `:status` of a response HEADERS frame when the server sent it
    /// from the HPACK static table (RFC 7541 Appendix A: 200, 204, 206,
    /// 304, 400, 404 and 500 are there).
    pub fn static_status(&self) -> Option<u16> {
        if self.kind != HEADERS {
            return None;
        }
        match self.payload.first()? {
            0x88 => Some(200),
            0x89 => Some(204),
            0x8a => Some(206),
            0x8b => Some(304),
            0x8c => Some(400),
            0x8d => Some(404),
            0x8e => Some(500),
            _ => None,
        }
    }
}

/// A frame's bytes: the 9-byte header (RFC 9113 §4.1), then the payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = payload.len() as u32;
    let mut bytes = length.to_be_bytes()[1..].to_vec();
    bytes.extend_from_slice(&[kind, flags]);
    bytes.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A header block of literal fields without indexing, names and values as
/// written (so upper case and pseudo-fields in any order can be sent).
pub fn header_block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0x00);
        push_string(&mut block, name.as_bytes());
        push_string(&mut block, value.as_bytes());
    }
    block
}

/// An HPACK string literal without Huffman coding: its length as a 7-bit
/// prefix integer (RFC 7541 §5.1), then its bytes.
fn push_string(block: &mut Vec<u8>, text: &[u8]) {
    let mut length = text.len();
    if length < 127 {
        block.push(length as u8);
    } else {
        block.push(127);
        length -= 127;
        while length >= 128 {
            block.push((length % 128 + 128) as u8);
            length /= 128;
        }
        block.push(length as u8);
    }
    block.extend_from_slice(text);
}

/// The pseudo-fields of an ordinary `method` request for `host` at `/`.
pub fn request_fields<'a>(method: &'a str, host: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":authority", host),
        (":path", "/"),
    ]
}

pub fn settings(values: &[(u16, u32)]) -> Vec<u8> {
    let mut payload = Vec::new();
    for (id, value) in values {
        payload.extend_from_slice(&id.to_be_bytes());
        payload.extend_from_slice(&value.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &payload)
}

/// The value of setting `id` in a SETTINGS frame, if it has one.
pub fn setting(frame: &Frame, id: u16) -> Option<u32> {
    frame.payload.chunks_exact(6).find_map(|entry| {
        let this = u16::from_be_bytes([entry[0], entry[1]]);
        (this == id).then(|| u32::from_be_bytes(entry[2..6].try_into().unwrap()))
    })
}

pub fn window_update(stream: u32, increment: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &increment.to_be_bytes())
}

pub fn rst_stream(stream: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, stream, &code.to_be_bytes())
}

/// How long the client waits for the server to answer or close.
const PATIENCE: Duration = Duration::from_secs(10);

/// A connection that has sent the preface and its (empty) SETTINGS.
pub struct RawH2 {
    writer: Arc<Mutex<OwnedWriteHalf>>,
    frames: mpsc::UnboundedReceiver<Frame>,
    /// Every frame received so far.
    pub received: Vec<Frame>,
    closed: bool,
}

impl RawH2 {
    pub async fn connect(addr: SocketAddr) -> RawH2 {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut reader, writer) = stream.into_split();
        let writer = Arc::new(Mutex::new(writer));
        let (sender, frames) = mpsc::unbounded_channel();
        let acks = writer.clone();
        tokio::spawn(async move {
            loop {
                let mut head = [0u8; 9];
                if reader.read_exact(&mut head).await.is_err() {
                    return;
                }
                let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                let mut payload = vec![0; length];
                if reader.read_exact(&mut payload).await.is_err() {
                    return;
                }
                let frame = Frame {
                    kind: head[3],
                    flags: head[4],
                    stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
                    payload,
                };
                if frame.kind == SETTINGS && frame.flags & ACK == 0 {
                    let ack = self::frame(SETTINGS, ACK, 0, &[]);
                    let _ = acks.lock().await.write_all(&ack).await;
                }
                if sender.send(frame).is_err() {
                    return;
                }
            }
        });
        let mut connection = RawH2 {
            writer,
            frames,
            received: Vec::new(),
            closed: false,
        };
        let mut opening = PREFACE.to_vec();
        opening.extend(settings(&[]));
        connection.send(&opening).await.unwrap();
        connection
    }

    /// Writes bytes as they are (one frame, or a flood of them at once).
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.lock().await.write_all(bytes).await
    }

    /// Sends `frames` frames, the `n`th made by `make(n)`, a hundred to a
    /// write, until all went out or the server closed the connection;
    /// returns how many went out.
    pub async fn flood(&mut self, frames: usize, make: impl Fn(usize) -> Vec<u8>) -> usize {
        let mut sent = 0;
        while sent < frames {
            let end = (sent + 100).min(frames);
            let batch: Vec<u8> = (sent..end).flat_map(&make).collect();
            if self.send(&batch).await.is_err() {
                break;
            }
            sent = end;
        }
        sent
    }

    /// Sends a request head on `stream` in one HEADERS frame.
    pub async fn send_headers(&mut self, stream: u32, fields: &[(&str, &str)], end_stream: bool) {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        let headers = frame(HEADERS, flags, stream, &header_block(fields));
        self.send(&headers).await.unwrap();
    }

    /// Receives frames until one matches `wanted` (returned) or the server
    /// closes the connection (`None`), for at most 10 s.
    pub async fn wait_for(&mut self, wanted: impl Fn(&Frame) -> bool) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !self.closed {
            match tokio::time::timeout_at(deadline, self.frames.recv()).await {
                Ok(Some(frame)) => {
                    self.received.push(frame.clone());
                    if wanted(&frame) {
                        return Some(frame);
                    }
                }
                Ok(None) => self.closed = true,
                Err(_) => panic!("no answer within {PATIENCE:?}: {:?}", self.received),
            }
        }
        None
    }

    /// The server's answer on `stream`: its response HEADERS or RST_STREAM,
    /// or the GOAWAY that ended the connection.
    pub async fn answer_on(&mut self, stream: u32) -> Frame {
        self.wait_for(|frame| {
            frame.kind == GOAWAY
                || (frame.stream == stream && matches!(frame.kind, HEADERS | RST_STREAM))
        })
        .await
        .unwrap_or_else(|| panic!("closed without an answer: {:?}", self.received))
    }

    /// Receives frames until the server closes the connection (at most
    /// 10 s); returns its GOAWAY, if it sent one.
    pub async fn until_closed(&mut self) -> Option<Frame> {
        self.wait_for(|_| false).await;
        self.received
            .iter()
            .find(|frame| frame.kind == GOAWAY)
            .cloned()
    }

    /// Receives frames until `wanted` frames of `kind` with `flags` set
    /// came in all (`true`) or the server closed the connection (`false`).
    pub async fn wait_for_count(&mut self, kind: u8, flags: u8, wanted: usize) -> bool {
        while self.count(kind, flags) < wanted {
            let found = self
                .wait_for(|frame| frame.kind == kind && frame.flags & flags == flags)
                .await;
            if found.is_none() {
                return false;
            }
        }
        true
    }

    /// How many frames of `kind` with `flags` set were received so far.
    pub fn count(&self, kind: u8, flags: u8) -> usize {
        self.received
            .iter()
            .filter(|frame| frame.kind == kind && frame.flags & flags == flags)
            .count()
    }
}
