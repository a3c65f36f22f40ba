//! Inputs for the differential check: pipelined requests (valid ones:
//! bodies by length or chunked, with extensions and trailers, HTTP/1.0 and
//! 1.1, keep-alive and close), then mutations aimed at framing (lengths
//! repeated, conflicting or malformed, transfer codings in every shape,
//! bare LF, oversized chunk sizes and lines) and plain garbage.

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, RngCore};

/// A request before it is written out, so mutations can aim at its parts.
struct Request {
    line: Vec<u8>,
    fields: Vec<Vec<u8>>,
    body: Vec<u8>,
}

impl Request {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.line);
        out.extend_from_slice(b"\r\n");
        for field in &self.fields {
            out.extend_from_slice(field);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }
}

const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "M-SEARCH",
];
const TARGETS: [&str; 7] = [
    "/",
    "/a/b?c=d",
    "/%20x",
    "*",
    "http://a.example/x",
    "/a;b",
    "//x",
];
const CODINGS: [&str; 14] = [
    "chunked",
    "Chunked",
    " chunked ",
    "gzip, chunked",
    "chunked, chunked",
    "chunked, gzip",
    "gzip",
    "identity",
    "",
    "chunked,",
    ",chunked",
    "chunked;q=1",
    "chunk\u{e9}d",
    "\u{ff}, chunked",
];
const LENGTHS: [&str; 10] = [
    "+1",
    "-1",
    "1, 1",
    "0x1",
    " 01",
    "",
    "18446744073709551616",
    "18446744073709551614",
    "1 1",
    "\u{661}",
];
const CONNECTIONS: [&str; 6] = [
    "close",
    "keep-alive",
    "Keep-Alive, close",
    "upgrade",
    "x, close",
    "\u{e9}close",
];

fn chunked_body(rng: &mut SmallRng, data: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let size = rng.random_range(1..=rest.len());
        let digits = match rng.random_range(0..40) {
            0..=9 => format!("{size:X}"),
            10..=19 => format!("000{size:x}"),
            // Around the bound of a chunk-size line (RFC 9112 §7.1.1).
            20 => format!("{}{size:x}", "0".repeat(rng.random_range(4085..4100))),
            _ => format!("{size:x}"),
        };
        body.extend_from_slice(digits.as_bytes());
        if rng.random_bool(0.05) {
            // Around the bounds of a line's and a body's extensions.
            body.push(b';');
            body.extend(std::iter::repeat_n(b'x', rng.random_range(3990..4100)));
        } else {
            body.extend_from_slice(extension(rng).as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(&rest[..size]);
        body.extend_from_slice(b"\r\n");
        rest = &rest[size..];
    }
    body.extend_from_slice(b"0");
    body.extend_from_slice(extension(rng).as_bytes());
    body.extend_from_slice(b"\r\n");
    if rng.random_bool(0.3) {
        for index in 0..rng.random_range(1..3) {
            body.extend_from_slice(format!("Trailer-{index}: v{index}\r\n").as_bytes());
        }
    }
    body.extend_from_slice(b"\r\n");
    body
}

const EXTENSIONS: [&str; 8] = ["", "", "", ";a", ";a=b", "; a = \"b c\"", " ;x", "\t;y=1;z"];

fn extension(rng: &mut SmallRng) -> &'static str {
    EXTENSIONS.choose(rng).copied().unwrap_or_default()
}

fn request(rng: &mut SmallRng) -> Request {
    let method = *METHODS.choose(rng).unwrap_or(&"GET");
    let target = *TARGETS.choose(rng).unwrap_or(&"/");
    let http10 = rng.random_bool(0.15);
    let version = if http10 { "HTTP/1.0" } else { "HTTP/1.1" };
    let mut fields = vec![b"Host: a.example".to_vec()];
    if http10 && rng.random_bool(0.6) {
        fields.push(b"Connection: keep-alive".to_vec());
    }
    if rng.random_bool(0.1) {
        fields.push(b"Expect: 100-continue".to_vec());
    }
    for index in 0..rng.random_range(0..3) {
        fields.push(format!("X-Field-{index}: value {index}").into_bytes());
    }
    let data: Vec<u8> = (0..rng.random_range(0..40))
        .map(|_| *b"abc\r\n0;x\n\t\x00\xff".choose(rng).unwrap_or(&b'a'))
        .collect();
    let body = match rng.random_range(0..3) {
        0 if data.is_empty() => Vec::new(),
        0 | 1 => {
            fields.push(format!("Content-Length: {}", data.len()).into_bytes());
            data
        }
        _ if http10 => Vec::new(),
        _ => {
            fields.push(b"Transfer-Encoding: chunked".to_vec());
            chunked_body(rng, &data)
        }
    };
    let first = rng.random_range(0..fields.len());
    fields.swap(0, first);
    Request {
        line: format!("{method} {target} {version}").into_bytes(),
        fields,
        body,
    }
}

fn mutate_fields(rng: &mut SmallRng, request: &mut Request) {
    let field = match rng.random_range(0..6) {
        0 => format!("Transfer-Encoding: {}", CODINGS.choose(rng).unwrap_or(&"")),
        1 => format!("Content-Length: {}", LENGTHS.choose(rng).unwrap_or(&"")),
        2 => format!("Content-Length: {}", rng.random_range(0..8)),
        3 => format!("Connection: {}", CONNECTIONS.choose(rng).unwrap_or(&"")),
        4 => "Upgrade: websocket".to_string(),
        _ => {
            // Repeat one of its own fields (a length, a coding, ...).
            let own = request.fields.choose(rng).cloned().unwrap_or_default();
            request.fields.push(own);
            return;
        }
    };
    let at = rng.random_range(0..=request.fields.len());
    request.fields.insert(at, field.into_bytes());
}

/// Byte-level damage to the whole stream.
fn mutate_bytes(rng: &mut SmallRng, input: &mut Vec<u8>) {
    if input.is_empty() {
        return;
    }
    let at = rng.random_range(0..input.len());
    match rng.random_range(0..9) {
        // A CRLF becomes a bare LF, or a bare CR.
        0 | 1 => {
            if let Some(crlf) = (at..input.len()).find(|&i| input[i..].starts_with(b"\r\n")) {
                if rng.random_bool(0.7) {
                    input.remove(crlf);
                } else {
                    input.remove(crlf + 1);
                }
            }
        }
        // A chunk size (or any hex digits) grows past what a u64 holds,
        // or gains a long run of leading zeros.
        2 => {
            let grown: Vec<u8> = if rng.random_bool(0.5) {
                b"1".iter().chain(&[b'0'; 16]).copied().collect()
            } else {
                std::iter::repeat_n(b'0', rng.random_range(4090..4100))
                    .chain(*b"1")
                    .collect()
            };
            if let Some(line) = (at..input.len()).find(|&i| input[i..].starts_with(b"\r\n")) {
                let start = input[..line]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                input.splice(start..line, grown);
            }
        }
        3 => input[at] = rng.random(),
        4 => input.insert(at, rng.random()),
        5 => {
            input.remove(at);
        }
        6 => input.truncate(at),
        7 => {
            let garbage: Vec<u8> = (0..rng.random_range(1..16)).map(|_| rng.random()).collect();
            input.splice(at..at, garbage);
        }
        _ => {
            // Repeat a slice of the stream in place.
            let end = rng.random_range(at..=input.len().min(at + 64));
            let copy = input[at..end].to_vec();
            input.splice(at..at, copy);
        }
    }
}

/// One input: a few pipelined requests, maybe mutated.
pub fn input(rng: &mut SmallRng) -> Vec<u8> {
    let mut input = Vec::new();
    for _ in 0..rng.random_range(1..=4) {
        let mut request = request(rng);
        while rng.random_bool(0.25) {
            mutate_fields(rng, &mut request);
        }
        request.write(&mut input);
    }
    while rng.random_bool(0.3) {
        mutate_bytes(rng, &mut input);
    }
    input
}

/// Where the wire layer's copy of `input` is cut into arrivals.
pub fn cuts(rng: &mut SmallRng, len: usize) -> Vec<usize> {
    if len == 0 {
        return Vec::new();
    }
    let count = (rng.next_u32() % 6) as usize;
    (0..count).map(|_| rng.random_range(0..len)).collect()
}
