//! Protocols: HTTP/2 from clients, WebSocket upgrades both ways, and h2c
//! upstreams with trailers passed through in both directions.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::support::*;

#[tokio::test]
async fn http2_prior_knowledge_clients_are_served() {
    let backend = Backend::echo("a").await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let mut sender = h2_connection(proxy.addr).await;
    let request = http::Request::builder()
        .uri("http://example.com/h2?x=1")
        .version(http::Version::HTTP_2)
        .body(empty())
        .unwrap();
    let reply = read_reply(sender.send_request(request).await.unwrap()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("x-backend"), "a");
    let seen = reply.json();
    assert_eq!(seen["uri"], "/h2?x=1");
    // An HTTP/1.1 upstream gets HTTP/1.1, with the client's authority as Host.
    assert_eq!(seen["version"], "HTTP/1.1");
    assert_eq!(seen["headers"]["host"], "example.com");
}

/// A WebSocket server that echoes every message.
pub async fn websocket_echo() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_text() || message.is_binary() {
                        let _ = socket.send(message).await;
                    }
                }
            });
        }
    });
    (addr, task)
}

pub type WebSocket = WebSocketStream<TcpStream>;

/// A real WebSocket client connected through dockhand at `proxy` for `host`.
pub async fn websocket_through(proxy: std::net::SocketAddr, host: &str) -> WebSocket {
    let stream = TcpStream::connect(proxy).await.unwrap();
    let (socket, response) = tokio_tungstenite::client_async(format!("ws://{host}/socket"), stream)
        .await
        .expect("the upgrade goes through the proxy");
    assert_eq!(response.status(), 101);
    socket
}

pub async fn echo_round_trip<S>(socket: &mut WebSocketStream<S>, text: &str)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    socket.send(Message::text(text)).await.unwrap();
    let answer = socket.next().await.expect("an answer").unwrap();
    assert_eq!(answer.into_text().unwrap().as_str(), text);
}

#[tokio::test]
async fn websockets_are_proxied_both_ways() {
    let (echo, _server) = websocket_echo().await;
    let proxy = Proxy::start(&one_route("example.com", echo)).await;
    let mut socket = websocket_through(proxy.addr, "example.com").await;
    for n in 0..5 {
        echo_round_trip(&mut socket, &format!("message {n}")).await;
    }
    socket
        .send(Message::binary(vec![0u8, 1, 2, 255]))
        .await
        .unwrap();
    let answer = socket.next().await.unwrap().unwrap();
    assert_eq!(answer.into_data().to_vec(), vec![0u8, 1, 2, 255]);
    socket.close(None).await.unwrap();
}

/// A backend that answers with the request's version, authority, `te` and
/// body, and echoes the request's trailer back as a response trailer
/// (announced in `Trailer`, which HTTP/1.1 needs to send trailers at all).
pub async fn trailer_echo() -> Backend {
    Backend::start(|request: http::Request<Incoming>| async move {
        let version = format!("{:?}", request.version());
        let authority = request.uri().authority().map(|a| a.to_string());
        let te = request.headers().get("te").cloned();
        let collected = request.into_body().collect().await.unwrap();
        let request_trailer = collected
            .trailers()
            .and_then(|t| t.get("x-request-checksum").cloned())
            .unwrap_or_else(|| HeaderValue::from_static("none"));
        let body = collected.to_bytes();
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        trailers.insert("x-echoed-checksum", request_trailer);
        let frames = vec![
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Frame::data(Bytes::from(format!(
                "{version} authority={authority:?} te={te:?} body={}",
                String::from_utf8_lossy(&body)
            )))),
            Ok(Frame::trailers(trailers)),
        ];
        Response::builder()
            .header("trailer", "grpc-status, x-echoed-checksum")
            .body(StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync())
            .unwrap()
    })
    .await
}

/// A POST of `ping` with the trailer `x-request-checksum: abc123`.
pub fn request_with_trailer(uri: &str, version: http::Version) -> http::Request<TestBody> {
    let mut request_trailers = HeaderMap::new();
    request_trailers.insert("x-request-checksum", HeaderValue::from_static("abc123"));
    let frames = vec![
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Frame::data(Bytes::from_static(b"ping"))),
        Ok(Frame::trailers(request_trailers)),
    ];
    http::Request::builder()
        .method("POST")
        .uri(uri)
        .version(version)
        .header("te", "trailers")
        .header("trailer", "x-request-checksum")
        .body(StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync())
        .unwrap()
}

/// The response's trailers and body text, asserting the echoed trailer.
pub async fn echoed_trailers(response: Response<Incoming>) -> String {
    assert_eq!(response.status(), 200);
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected
        .trailers()
        .cloned()
        .expect("response trailers arrive");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-echoed-checksum"], "abc123");
    String::from_utf8(collected.to_bytes().to_vec()).unwrap()
}

#[tokio::test]
async fn h2c_upstreams_get_http2_and_trailers_pass_both_ways() {
    let backend = trailer_echo().await;
    let routes = serde_json::json!({"host": {"grpc.test": {"location": {"/": {"upstream": {
        backend.addr.to_string(): {"protocol": "h2c"}
    }}}}}});
    let proxy = Proxy::start(&routes.to_string()).await;
    let request =
        request_with_trailer("http://grpc.test/pkg.Service/Method", http::Version::HTTP_2);
    let mut sender = h2_connection(proxy.addr).await;
    let body = echoed_trailers(sender.send_request(request).await.unwrap()).await;
    // `:authority` is the host the client asked for, never the upstream's address.
    assert_eq!(
        body,
        r#"HTTP/2.0 authority=Some("grpc.test") te=Some("trailers") body=ping"#
    );
}

/// `Trailer` is end-to-end (RFC 9110 §6.6.2), and HTTP/1.1 sends only the
/// trailers it names: removed on the way, it took the trailers with it.
#[tokio::test]
async fn trailers_pass_both_ways_over_http1() {
    let backend = trailer_echo().await;
    let proxy = Proxy::start(&one_route("example.com", backend.addr)).await;
    let mut request = request_with_trailer("/upload", http::Version::HTTP_11);
    let host = HeaderValue::from_static("example.com");
    request.headers_mut().insert("host", host);
    let mut sender = http1_connection(proxy.addr).await;
    let body = echoed_trailers(sender.send_request(request).await.unwrap()).await;
    assert_eq!(
        body,
        r#"HTTP/1.1 authority=None te=Some("trailers") body=ping"#
    );
}
