//! Response compression end to end (issue 16): a backend's JSON, HTML and
//! event stream through a location with `compress`, asked for with
//! Chrome's `Accept-Encoding`, curl's, and `curl --compressed` itself; each
//! body decoded and compared with the backend's. Answers that must go as
//! they are (small, images, encoded already, ranges, `no-transform`,
//! `HEAD`) are checked to be untouched.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::Response;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

use crate::support::*;

/// What Chrome sends.
const CHROME: &str = "gzip, deflate, br, zstd";

/// About 200 kB of JSON, varied enough not to compress to nothing.
fn big_json() -> String {
    let items: Vec<serde_json::Value> = (0..2000)
        .map(|n| {
            json!({"id": n, "name": format!("item {n}"), "price": n * 37 % 1000,
                        "tags": ["a", "b", format!("t{}", n % 17)], "active": n % 3 == 0})
        })
        .collect();
    serde_json::to_string(&items).unwrap()
}

fn html_part(part: usize) -> String {
    (0..200)
        .map(|row| format!("<tr><td>{part}</td><td>row {row}</td></tr>\n"))
        .collect()
}

/// The backend's paths: the compressible ones, those that must stay as
/// they are, and an event stream whose second event waits for `next_event`.
async fn backend(next_event: Arc<Notify>) -> Backend {
    Backend::start(move |request: http::Request<Incoming>| {
        let next_event = next_event.clone();
        async move {
            let answer = Response::builder().header("etag", "\"v1\"");
            let binary = vec![7u8; 4096];
            match request.uri().path() {
                "/big.json" => answer
                    .header("content-type", "application/json")
                    .header("vary", "Origin")
                    .body(full(big_json())),
                "/page.html" => {
                    let parts = (0..3).map(|part| Ok(Frame::data(Bytes::from(html_part(part)))));
                    let streamed = StreamBody::new(futures_util::stream::iter(parts));
                    answer
                        .header("content-type", "text/html; charset=utf-8")
                        .body(streamed.boxed_unsync())
                }
                "/events" => {
                    let events = futures_util::stream::unfold(0, move |sent| {
                        let next_event = next_event.clone();
                        async move {
                            match sent {
                                0 => {}
                                1 => next_event.notified().await,
                                _ => return None,
                            }
                            let event = format!("data: event {sent}\n\n");
                            Some((Ok(Frame::data(Bytes::from(event))), sent + 1))
                        }
                    });
                    answer
                        .header("content-type", "text/event-stream")
                        .body(StreamBody::new(events).boxed_unsync())
                }
                "/small.json" => answer
                    .header("content-type", "application/json")
                    .body(full("{\"small\": true}")),
                "/image.png" => answer
                    .header("content-type", "image/png")
                    .body(full(binary)),
                "/encoded.js" => answer
                    .header("content-type", "application/javascript")
                    .header("content-encoding", "gzip")
                    .body(full(binary)),
                "/no-transform.json" => answer
                    .header("content-type", "application/json")
                    .header("cache-control", "public, no-transform")
                    .body(full(big_json())),
                "/range.json" => answer
                    .status(StatusCode::PARTIAL_CONTENT)
                    .header("content-type", "application/json")
                    .header("content-range", "bytes 0-4095/999999")
                    .body(full(big_json()[..4096].to_owned())),
                _ => answer.status(404).body(empty()),
            }
            .unwrap()
        }
    })
    .await
}

/// `/` compresses with every encoding, `/gzip` with gzip only, `/plain` not at all.
fn routes(upstream: SocketAddr) -> String {
    let target = json!({upstream.to_string(): {}});
    json!({"host": {"example.com": {"location": {
        "/": {"compress": true, "upstream": target},
        "/gzip/": {"compress": ["gzip"], "rewrite": {"strip_prefix": "/gzip"}, "upstream": target},
        "/plain/": {"rewrite": {"strip_prefix": "/plain"}, "upstream": target}
    }}}})
    .to_string()
}

async fn get_accepting(addr: SocketAddr, path: &str, accept_encoding: Option<&str>) -> Reply {
    let mut asked = request("GET", "example.com", path);
    if let Some(accept_encoding) = accept_encoding {
        asked = asked.header("accept-encoding", accept_encoding);
    }
    send(addr, asked.body(empty()).unwrap()).await
}

/// The body as the client would read it, after its `Content-Encoding`.
fn decoded(reply: &Reply) -> String {
    decode(reply.header("content-encoding"), &reply.body)
}

fn decode(encoding: &str, encoded: &[u8]) -> String {
    let mut text = String::new();
    match encoding {
        "" => return String::from_utf8(encoded.to_vec()).unwrap(),
        "gzip" => flate2::read::GzDecoder::new(encoded).read_to_string(&mut text),
        "br" => brotli::Decompressor::new(encoded, 4096).read_to_string(&mut text),
        "zstd" => zstd::stream::read::Decoder::new(encoded)
            .unwrap()
            .read_to_string(&mut text),
        other => panic!("unexpected encoding {other}"),
    }
    .expect("decodes");
    text
}

#[tokio::test]
async fn browsers_and_curl_get_the_preferred_encoding_and_the_same_body() {
    let backend = backend(Arc::default()).await;
    let proxy = Proxy::start(&routes(backend.addr)).await;
    let json = big_json();
    let cases = [
        ("/big.json", Some(CHROME), "br"),
        // curl --compressed's header.
        ("/big.json", Some("deflate, gzip, br, zstd"), "br"),
        ("/big.json", Some("gzip;q=1, br;q=0.5, zstd;q=0.9"), "gzip"),
        ("/big.json", Some("zstd"), "zstd"),
        ("/gzip/big.json", Some(CHROME), "gzip"),
    ];
    for (path, accept_encoding, encoding) in cases {
        let reply = get_accepting(proxy.addr, path, accept_encoding).await;
        let case = format!("{path} {accept_encoding:?}");
        assert_eq!(reply.status, 200, "{case}");
        assert_eq!(reply.header("content-encoding"), encoding, "{case}");
        assert_eq!(reply.header("content-length"), "", "{case}: sent chunked");
        assert_eq!(reply.header("etag"), "W/\"v1\"", "{case}");
        let vary: Vec<&str> = reply
            .headers
            .get_all("vary")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(vary, ["Origin", "Accept-Encoding"], "{case}");
        assert!(
            reply.body.len() < json.len() / 5,
            "{case}: {} bytes",
            reply.body.len()
        );
        assert_eq!(decoded(&reply), json, "{case}");
    }

    // A streamed body without a length, over several frames.
    let page = get_accepting(proxy.addr, "/page.html", Some(CHROME)).await;
    assert_eq!(page.header("content-encoding"), "br");
    let whole: String = (0..3).map(html_part).collect();
    assert_eq!(decoded(&page), whole);

    // Over HTTP/2 as well.
    let mut h2 = h2_connection(proxy.addr).await;
    let mut asked = h2_get("example.com", "/big.json");
    asked
        .headers_mut()
        .insert("accept-encoding", "gzip".parse().unwrap());
    let reply = read_reply(h2.send_request(asked).await.unwrap()).await;
    assert_eq!(reply.header("content-encoding"), "gzip");
    assert_eq!(decoded(&reply), json);

    // An HTTP/1.0 client, which can't take chunked: read until the close.
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let asked = b"GET /big.json HTTP/1.0\r\nHost: example.com\r\nAccept-Encoding: gzip\r\n\r\n";
    stream.write_all(asked).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&answer[..head_end]).to_lowercase();
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(
        !head.contains("content-length") && !head.contains("chunked"),
        "{head}"
    );
    assert_eq!(decode("gzip", &answer[head_end..]), json);
}

#[tokio::test]
async fn answers_that_must_stay_as_they_are_do() {
    let backend = backend(Arc::default()).await;
    let proxy = Proxy::start(&routes(backend.addr)).await;
    let cases = [
        // Below the minimum size: not compressible, so no Vary either.
        ("/small.json", "15", false),
        ("/image.png", "4096", false),
        ("/encoded.js", "4096", false),
        ("/no-transform.json", "", false),
        ("/range.json", "4096", false),
        ("/plain/big.json", "", false),
    ];
    for (path, length, varies) in cases {
        let reply = get_accepting(proxy.addr, path, Some(CHROME)).await;
        let expected_encoding = if path == "/encoded.js" { "gzip" } else { "" };
        assert_eq!(
            reply.header("content-encoding"),
            expected_encoding,
            "{path}"
        );
        assert_eq!(reply.header("etag"), "\"v1\"", "{path}: still strong");
        if !length.is_empty() {
            assert_eq!(reply.header("content-length"), length, "{path}");
        }
        let has_vary = reply.header("vary").contains("Accept-Encoding");
        assert_eq!(has_vary, varies, "{path}");
    }

    // Compressible, but this client takes no encoding: Vary says it could.
    for accept_encoding in [None, Some("identity"), Some("br;q=0, gzip;q=0")] {
        let reply = get_accepting(proxy.addr, "/big.json", accept_encoding).await;
        assert_eq!(reply.header("content-encoding"), "", "{accept_encoding:?}");
        assert_eq!(reply.header("content-length"), big_json().len().to_string());
        assert_eq!(reply.header("etag"), "\"v1\"");
        assert!(reply.header("vary").contains("Origin"));
        assert!(reply
            .headers
            .get_all("vary")
            .iter()
            .any(|v| v == "Accept-Encoding"));
        assert_eq!(reply.text(), big_json());
    }

    // HEAD: no encoding is announced for a body that never comes.
    let head = request("HEAD", "example.com", "/big.json")
        .header("accept-encoding", CHROME)
        .body(empty())
        .unwrap();
    let head = send(proxy.addr, head).await;
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-encoding"), "");
}

#[tokio::test]
async fn an_event_stream_flows_compressed_event_by_event() {
    let next_event = Arc::new(Notify::new());
    let backend = backend(next_event.clone()).await;
    let proxy = Proxy::start(&routes(backend.addr)).await;
    for encoding in ["gzip", "br", "zstd"] {
        let asked = request("GET", "example.com", "/events")
            .header("accept-encoding", encoding)
            .body(empty())
            .unwrap();
        let mut sender = http1_connection(proxy.addr).await;
        let response = sender.send_request(asked).await.unwrap();
        assert_eq!(response.headers()["content-encoding"], encoding);
        let mut body = response.into_body();
        // The first event's bytes come while the second is still to come
        // (that each frame decodes on its own is the unit tests').
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), body.frame()).await;
        let first = first
            .expect("the first event was held back")
            .unwrap()
            .unwrap();
        let mut sent = first.into_data().unwrap().to_vec();
        assert!(!sent.is_empty());
        next_event.notify_one();
        let rest = body.collect().await.unwrap().to_bytes();
        sent.extend_from_slice(&rest);
        assert_eq!(
            decode(encoding, &sent),
            "data: event 0\n\ndata: event 1\n\n"
        );
    }
}

/// `curl --compressed`, if curl is here (under `CI=true` it must be:
/// `.ci/run` installs it): the body it decodes is the backend's.
#[tokio::test]
async fn curl_compressed_reads_the_same_body() {
    let curl = tokio::process::Command::new("curl")
        .arg("--version")
        .output()
        .await;
    let Ok(version) = curl else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "curl is not installed (.ci/run installs it)"
        );
        eprintln!("curl is not installed: skipped");
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout).to_lowercase();
    let backend = backend(Arc::default()).await;
    let proxy = Proxy::start(&routes(backend.addr)).await;
    let output = tokio::process::Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--compressed",
            "--dump-header",
            "/dev/stderr",
        ])
        .args(["--header", "Host: example.com"])
        .arg(format!("http://{}/big.json", proxy.addr))
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let headers = String::from_utf8_lossy(&output.stderr).to_lowercase();
    // curl asks for what its build decodes: brotli first among them here.
    let expected = if version.contains("brotli") {
        "br"
    } else if version.contains("zstd") {
        "zstd"
    } else {
        "gzip"
    };
    assert!(
        headers.contains(&format!("content-encoding: {expected}\r\n")),
        "{headers}"
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), big_json());
}
