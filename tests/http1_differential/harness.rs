//! The differential check of dockhand's HTTP/1.1 wire layer (`dockhand::
//! http1`) against hyper's HTTP/1 server: the same bytes, as one client
//! connection's requests, go to (a) a loop over the wire layer that parses
//! each head, frames it and reads its body, as the connection loop built on
//! it will, and (b) `hyper::server::conn::http1` in process over an
//! in-memory stream, with a service that reads each body to its end. Both
//! say how many requests there were, and each one's method, target, body
//! and trailers (which says where each ended); any disagreement fails,
//! except where the wire layer is deliberately different, which `Rule`
//! lists with the RFC's reason.
//!
//! Shared by `tests/http1_differential.rs` (generated inputs and the
//! committed corpus, in `cargo test`) and the `http1_differential` fuzz
//! target.

use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use dockhand::http1::{
    parse_request_head, request_facts, request_framing, ChunkedDecoder, ChunkedError, FieldSlots,
    FramingError, HeadError, RequestFraming, MAX_HEADERS, MAX_HEAD_BYTES,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request as either side saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub method: Vec<u8>,
    /// As hyper prints it (`http::Uri`), so both sides read the same.
    pub target: Option<String>,
    pub body: Body,
    /// The wire layer's framing (hyper's side has none).
    pub framing: Option<RequestFraming>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// The whole body and its trailer fields (lower-case names, sorted).
    Complete {
        data: Vec<u8>,
        trailers: Vec<(Vec<u8>, Vec<u8>)>,
        trailer_bytes: usize,
    },
    /// Cut by the end of input (`None`) or malformed.
    Failed(Option<ChunkedError>),
}

/// Why the wire layer's loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The input ended between requests (or within a head).
    Eof,
    /// The last request did not keep the connection (RFC 9112 §9.3).
    NotPersistent,
    /// The last request was a `CONNECT`, which hyper's service answers
    /// `200`: what follows is tunnelled, not requests (RFC 9110 §9.3.6).
    Tunnel,
    Head(HeadError),
    Framing(FramingError),
    Body,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub exchanges: Vec<Exchange>,
    pub end: End,
}

/// Where the wire layer deliberately differs from hyper.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    LengthWithTransferEncoding,
    ChunkedTwice,
    TransferCodingNotToken,
    HeadOverLimit,
    ChunkLineTooLong,
    BareLfInTrailers,
    TrailersOverHyperLimit,
    RequestLineForTheCaller,
    LengthOverHyperMaximum,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::LengthWithTransferEncoding,
        Rule::ChunkedTwice,
        Rule::TransferCodingNotToken,
        Rule::HeadOverLimit,
        Rule::ChunkLineTooLong,
        Rule::BareLfInTrailers,
        Rule::TrailersOverHyperLimit,
        Rule::RequestLineForTheCaller,
        Rule::LengthOverHyperMaximum,
    ];

    /// What the wire layer does, what hyper does, and why.
    pub fn reason(self) -> &'static str {
        match self {
            Rule::LengthWithTransferEncoding => {
                "a request with Transfer-Encoding and Content-Length is refused (400); hyper \
                 drops the length, reads the body chunked and closes after it. RFC 9112 §6.1 \
                 lets a server reject it; §11.2: it is how requests are smuggled"
            }
            Rule::ChunkedTwice => {
                "`chunked` twice in a request's codings is refused; hyper only looks at the \
                 last. RFC 9112 §7: a sender MUST NOT apply chunked more than once"
            }
            Rule::TransferCodingNotToken => {
                "a Transfer-Encoding value with bytes no token holds (obs-text) is refused; \
                 hyper only reads the last Transfer-Encoding field. RFC 9112 §6.1, RFC 9110 \
                 §10.1.4: transfer-coding is a token"
            }
            Rule::HeadOverLimit => {
                "a request head over 128 KiB is refused (431) while it arrives; hyper's limit \
                 is its read buffer. RFC 9110 §5.4 / RFC 6585 §5; the hyper path answers it \
                 431 after reading it"
            }
            Rule::ChunkLineTooLong => {
                "a chunk-size line over 4 KiB (leading zeros, whitespace, extensions) is \
                 refused; hyper bounds only the extensions of the whole body. RFC 9112 \
                 §7.1.1: a server ought to limit extensions as it limits other lines"
            }
            Rule::BareLfInTrailers => {
                "a bare LF in the trailer section is refused; hyper passes some (httparse \
                 reads it as a line end). RFC 9112 §7.1: the chunked framing's lines end in \
                 CRLF, and hyper refuses bare LF in the rest of it"
            }
            Rule::TrailersOverHyperLimit => {
                "a trailer section is bounded by the head limit (64 KiB); hyper's is 16 KiB. \
                 RFC 9112 §7.1.2 leaves the limit to the recipient"
            }
            Rule::RequestLineForTheCaller => {
                "a method or target that `http` can't parse is passed to the caller, which \
                 checks the target's form (RFC 9112 §3.2) when it routes; hyper refuses it \
                 (400) while parsing"
            }
            Rule::LengthOverHyperMaximum => {
                "a Content-Length of 2^64-2 or 2^64-1 is a length (no input is that long, so \
                 the body is cut); hyper refuses it, reserving those values. RFC 9110 §8.6 \
                 sets no maximum"
            }
        }
    }
}

/// What the two sides said, and which rule explained their difference.
#[derive(Debug)]
pub struct Verdict {
    pub ours: Outcome,
    pub hyper: Vec<Exchange>,
    pub rule: Option<Rule>,
}

/// A disagreement nothing explains, with everything needed to see why.
pub struct Disagreement {
    pub input: Vec<u8>,
    pub what: String,
    pub ours: Outcome,
    pub hyper: Vec<Exchange>,
}

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "the wire layer and hyper disagree: {}", self.what)?;
        writeln!(
            f,
            "input ({} bytes): b\"{}\"",
            self.input.len(),
            self.input.escape_ascii()
        )?;
        writeln!(f, "wire layer: {:#?}", self.ours)?;
        write!(f, "hyper: {:#?}", self.hyper)
    }
}

impl fmt::Debug for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Runs `input` through both sides (the wire layer also fed in the pieces
/// `cuts` makes, which must change nothing) and compares them.
pub async fn check(input: &[u8], cuts: &[usize]) -> Result<Verdict, Disagreement> {
    let ours = wire_layer(input, &[]);
    let hyper = hyper_server(input).await;
    let disagreement = |what: String, ours: &Outcome, hyper: &[Exchange]| Disagreement {
        input: input.to_vec(),
        what,
        ours: ours.clone(),
        hyper: hyper.to_vec(),
    };
    let in_pieces = wire_layer(input, cuts);
    if in_pieces != ours {
        return Err(disagreement(
            format!("the wire layer fed in pieces cut at {cuts:?} said {in_pieces:#?}"),
            &ours,
            &hyper,
        ));
    }
    match compare(&ours, &hyper) {
        Ok(rule) => Ok(Verdict { ours, hyper, rule }),
        Err(what) => Err(disagreement(what, &ours, &hyper)),
    }
}

/// hyper refuses 2^64-2 and 2^64-1 as lengths (`DecodedLength::MAX_LEN`).
const HYPER_MAX_LENGTH: u64 = u64::MAX - 2;
/// hyper's bound on a trailer section, in bytes (`decode.rs`).
const HYPER_TRAILER_LIMIT: usize = 16 * 1024;

fn compare(ours: &Outcome, hyper: &[Exchange]) -> Result<Option<Rule>, String> {
    for (index, mine) in ours.exchanges.iter().enumerate() {
        if mine.target.is_none() || http::Method::from_bytes(&mine.method).is_err() {
            // hyper refused this request line while parsing it.
            return if hyper.len() == index {
                Ok(Some(Rule::RequestLineForTheCaller))
            } else {
                Err(format!(
                    "request {index}: hyper took a request line `http` can't parse"
                ))
            };
        }
        let Some(theirs) = hyper.get(index) else {
            return match mine.framing {
                Some(RequestFraming::Length(length)) if length > HYPER_MAX_LENGTH => {
                    Ok(Some(Rule::LengthOverHyperMaximum))
                }
                _ => Err(format!("request {index}: hyper saw no such request")),
            };
        };
        if (&mine.method, &mine.target) != (&theirs.method, &theirs.target) {
            return Err(format!("request {index}: a different request line"));
        }
        match (&mine.body, &theirs.body) {
            (Body::Complete { .. }, Body::Complete { .. })
                if mine.body.comparable() == theirs.body.comparable() => {}
            (Body::Failed(None), Body::Failed(_)) => {}
            (Body::Failed(Some(error)), _) => {
                // The wire layer stops at a malformed body; hyper closes
                // after one too, unless it took what we refuse.
                let rule = match error {
                    ChunkedError::LineTooLong => Some(Rule::ChunkLineTooLong),
                    ChunkedError::TrailerBareLf => Some(Rule::BareLfInTrailers),
                    _ => None,
                };
                return match (rule, &theirs.body) {
                    (Some(rule), _) => Ok(Some(rule)),
                    (None, Body::Failed(_)) if hyper.len() == index + 1 => Ok(None),
                    _ => Err(format!(
                        "request {index}: only the wire layer refused its body"
                    )),
                };
            }
            (Body::Complete { trailer_bytes, .. }, Body::Failed(_))
                if *trailer_bytes >= HYPER_TRAILER_LIMIT =>
            {
                return Ok(Some(Rule::TrailersOverHyperLimit));
            }
            _ => return Err(format!("request {index}: a different body")),
        }
    }
    if hyper.len() == ours.exchanges.len() {
        return Ok(None);
    }
    let rule = match ours.end {
        End::Framing(FramingError::LengthWithTransferEncoding) => {
            // hyper takes that request and closes after it.
            (hyper.len() == ours.exchanges.len() + 1).then_some(Rule::LengthWithTransferEncoding)
        }
        End::Framing(FramingError::ChunkedTwice) => Some(Rule::ChunkedTwice),
        End::Framing(FramingError::InvalidTransferEncoding) => Some(Rule::TransferCodingNotToken),
        End::Head(HeadError::TooLarge) => Some(Rule::HeadOverLimit),
        _ => None,
    };
    rule.map(Some).ok_or_else(|| {
        format!(
            "{} requests for the wire layer (which stopped: {:?}), {} for hyper",
            ours.exchanges.len(),
            ours.end,
            hyper.len()
        )
    })
}

/// Bytes as they arrive: `input` cut at `cuts` (offsets, in order).
struct Arrivals<'a> {
    input: &'a [u8],
    cuts: std::vec::IntoIter<usize>,
    fed: usize,
}

impl<'a> Arrivals<'a> {
    fn new(input: &'a [u8], cuts: &[usize]) -> Self {
        let mut cuts: Vec<usize> = cuts
            .iter()
            .copied()
            .filter(|&cut| cut < input.len())
            .collect();
        cuts.sort_unstable();
        cuts.push(input.len());
        Arrivals {
            input,
            cuts: cuts.into_iter(),
            fed: 0,
        }
    }

    /// Appends the next piece to `buffer`; false at the end of input.
    fn more(&mut self, buffer: &mut Vec<u8>) -> bool {
        for cut in self.cuts.by_ref() {
            if cut > self.fed {
                buffer.extend_from_slice(&self.input[self.fed..cut]);
                self.fed = cut;
                return true;
            }
        }
        false
    }
}

/// The wire layer's loop: head, framing, body, next request.
pub fn wire_layer(input: &[u8], cuts: &[usize]) -> Outcome {
    let mut arrivals = Arrivals::new(input, cuts);
    let mut buffer = Vec::new();
    let mut start = 0;
    let mut exchanges = Vec::new();
    loop {
        let (mut exchange, persistent, head_len) = loop {
            let mut slots = FieldSlots::new();
            let parsed = match parse_request_head(&buffer[start..], &mut slots) {
                Ok(Some(head)) => {
                    let framing = match request_framing(&head) {
                        Ok(framing) => framing,
                        Err(error) => {
                            return Outcome {
                                exchanges,
                                end: End::Framing(error),
                            }
                        }
                    };
                    let exchange = Exchange {
                        method: head.method.to_vec(),
                        target: http::Uri::try_from(head.target)
                            .ok()
                            .map(|uri| uri.to_string()),
                        body: Body::Failed(None),
                        framing: Some(framing),
                    };
                    Some((exchange, request_facts(&head).persistent, head.bytes.len()))
                }
                Ok(None) => None,
                Err(error) => {
                    return Outcome {
                        exchanges,
                        end: End::Head(error),
                    }
                }
            };
            if let Some(parsed) = parsed {
                break parsed;
            }
            if !arrivals.more(&mut buffer) {
                return Outcome {
                    exchanges,
                    end: End::Eof,
                };
            }
        };
        start += head_len;
        let framing = exchange.framing.unwrap_or(RequestFraming::None);
        exchange.body = read_body(framing, &mut buffer, &mut start, &mut arrivals);
        let failed = matches!(exchange.body, Body::Failed(_));
        let tunnel = exchange.method == b"CONNECT";
        exchanges.push(exchange);
        if failed {
            return Outcome {
                exchanges,
                end: End::Body,
            };
        }
        if !persistent {
            return Outcome {
                exchanges,
                end: End::NotPersistent,
            };
        }
        if tunnel {
            return Outcome {
                exchanges,
                end: End::Tunnel,
            };
        }
    }
}

fn read_body(
    framing: RequestFraming,
    buffer: &mut Vec<u8>,
    start: &mut usize,
    arrivals: &mut Arrivals<'_>,
) -> Body {
    let mut data = Vec::new();
    match framing {
        RequestFraming::None => {}
        RequestFraming::Length(length) => loop {
            let due = usize::try_from(length).unwrap_or(usize::MAX) - data.len();
            let take = due.min(buffer.len() - *start);
            data.extend_from_slice(&buffer[*start..*start + take]);
            *start += take;
            if data.len() as u64 == length {
                break;
            }
            if !arrivals.more(buffer) {
                return Body::Failed(None);
            }
        },
        RequestFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new();
            loop {
                match decoder.decode(&buffer[*start..]) {
                    Ok(progress) => {
                        data.extend_from_slice(&buffer[*start..][progress.data]);
                        *start += progress.consumed;
                        if progress.done {
                            let trailers = decoder.trailers();
                            return Body::Complete {
                                data,
                                trailers: fields_of(trailers),
                                trailer_bytes: trailers.len(),
                            };
                        }
                    }
                    Err(error) => return Body::Failed(Some(error)),
                }
                if *start == buffer.len() && !arrivals.more(buffer) {
                    return Body::Failed(None);
                }
            }
        }
    }
    Body::Complete {
        data,
        trailers: Vec::new(),
        trailer_bytes: 0,
    }
}

/// A trailer section's fields, as comparable with hyper's `HeaderMap`.
fn fields_of(section: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut parsed = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut fields: Vec<_> = match httparse::parse_headers(section, &mut parsed) {
        Ok(httparse::Status::Complete((_, headers))) => headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase().into_bytes(), h.value.to_vec()))
            .collect(),
        _ => Vec::new(),
    };
    fields.sort();
    fields
}

/// Longer than any case takes: a hang fails instead of waiting forever.
const HYPER_TIMEOUT: Duration = Duration::from_secs(20);

/// hyper's HTTP/1 server, configured as dockhand's (its read buffer) with
/// the wire layer's header count, over an in-memory stream: every request
/// its service was called with, each body read to its end.
pub async fn hyper_server(input: &[u8]) -> Vec<Exchange> {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service = {
        let seen = seen.clone();
        service_fn(move |request: hyper::Request<Incoming>| {
            let seen = seen.clone();
            async move {
                let method = request.method().as_str().as_bytes().to_vec();
                let target = Some(request.uri().to_string());
                let body = match request.into_body().collect().await {
                    Ok(collected) => {
                        let mut trailers: Vec<_> = collected
                            .trailers()
                            .into_iter()
                            .flatten()
                            .map(|(name, value)| {
                                (name.as_str().as_bytes().to_vec(), value.as_bytes().to_vec())
                            })
                            .collect();
                        trailers.sort();
                        Body::Complete {
                            data: collected.to_bytes().to_vec(),
                            trailers,
                            trailer_bytes: 0,
                        }
                    }
                    Err(_) => Body::Failed(None),
                };
                if let Ok(mut seen) = seen.lock() {
                    seen.push(Exchange {
                        method,
                        target,
                        body,
                        framing: None,
                    });
                }
                Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .max_buf_size(2 * MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS)
        // The client sends everything, then shuts its side: requests
        // already sent are still answered.
        .half_close(true)
        .serve_connection(TokioIo::new(server), service);
    let (mut from_server, mut to_server) = tokio::io::split(client);
    let send = async {
        // hyper may close before reading it all.
        let _ = to_server.write_all(input).await;
        let _ = to_server.shutdown().await;
    };
    let receive = async {
        let mut answers = Vec::new();
        let _ = from_server.read_to_end(&mut answers).await;
    };
    let exchange = async { tokio::join!(connection, send, receive) };
    if tokio::time::timeout(HYPER_TIMEOUT, exchange).await.is_err() {
        panic!("hyper's connection hung on b\"{}\"", input.escape_ascii());
    }
    let seen = seen.lock().map(|seen| seen.clone()).unwrap_or_default();
    seen
}

/// Trailer comparison: hyper's side never knows the section's length.
impl Body {
    fn comparable(&self) -> Body {
        match self {
            Body::Complete { data, trailers, .. } => Body::Complete {
                data: data.clone(),
                trailers: trailers.clone(),
                trailer_bytes: 0,
            },
            failed => failed.clone(),
        }
    }
}
