//! Item 6 of HTTPS: what rides on HTTP/2 and HTTP/1.1 over TLS reaches
//! upstreams intact. An HTTP/2 client reaches an `h2c` upstream with
//! trailers both ways; a real gRPC bidirectional stream (tonic on both
//! ends) streams both ways and its status, OK or not, reaches the client;
//! a WebSocket over TLS (an HTTP/1.1 upgrade) echoes both ways.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{SinkExt, Stream, StreamExt};
use http::uri::PathAndQuery;
use http::{Request, Response, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tonic::body::BoxBody;
use tonic::codec::ProstCodec;
use tonic::{Code, Status, Streaming};

use crate::protocols::{
    echo_round_trip, echoed_trailers, request_with_trailer, trailer_echo, websocket_echo,
};
use crate::support::*;
use crate::tls_support::*;

const HOST: &str = "grpc.example.test";

/// A proxy serving `HOST` over HTTPS from `upstream` (the routes file's
/// upstream options, such as `{"protocol": "h2c"}`), and the CA it trusts.
async fn https_proxy(upstream: SocketAddr, options: serde_json::Value) -> (Proxy, TestCa) {
    let routes = serde_json::json!({"host": {HOST: {"location": {"/": {"upstream": {
        upstream.to_string(): options
    }}}}}});
    let ca = TestCa::new("dockhand grpc test CA");
    let proxy = Proxy::start_https(&routes.to_string(), &[&ca.leaf(HOST)], test_settings()).await;
    (proxy, ca)
}

/// RFC 9113 §8.1: trailers are a HEADERS frame after the DATA; over TLS
/// (ALPN `h2`) to an h2c upstream they pass both ways.
#[tokio::test]
async fn an_h2_client_over_tls_reaches_an_h2c_upstream_with_trailers_both_ways() {
    let backend = trailer_echo().await;
    let (proxy, ca) = https_proxy(backend.addr, serde_json::json!({"protocol": "h2c"})).await;
    let config = client_config(ca.roots(), &[b"h2"]);
    let HttpsSender::H2(mut sender) = https_connection(proxy.https.unwrap(), HOST, config).await
    else {
        panic!("ALPN h2 gives HTTP/2");
    };
    let request = request_with_trailer(
        &format!("https://{HOST}/pkg.Service/Method"),
        http::Version::HTTP_2,
    );
    let body = echoed_trailers(sender.send_request(request).await.unwrap()).await;
    assert_eq!(
        body,
        format!(r#"HTTP/2.0 authority=Some("{HOST}") te=Some("trailers") body=ping"#)
    );
}

#[tokio::test]
async fn a_websocket_over_tls_echoes_both_ways() {
    let (echo, _server) = websocket_echo().await;
    let (proxy, ca) = https_proxy(echo, serde_json::json!({})).await;
    // A WebSocket upgrade is HTTP/1.1's (RFC 6455 §4.1).
    let config = client_config(ca.roots(), &[b"http/1.1"]);
    let tls = tls_connect(proxy.https.unwrap(), HOST, config)
        .await
        .unwrap();
    let (mut socket, response) =
        tokio_tungstenite::client_async(format!("wss://{HOST}/socket"), tls)
            .await
            .expect("the upgrade goes through the proxy");
    assert_eq!(response.status(), 101);
    for n in 0..5 {
        echo_round_trip(&mut socket, &format!("message {n} over TLS")).await;
    }
    socket.send(Message::binary(vec![0u8, 255])).await.unwrap();
    let answer = socket.next().await.unwrap().unwrap();
    assert_eq!(answer.into_data().to_vec(), vec![0u8, 255]);
    socket.close(None).await.unwrap();
}

/// The one message of the chat service, written as `prost` would generate
/// it from `message Note { string text = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
struct Note {
    #[prost(string, tag = "1")]
    text: String,
}

fn note(text: &str) -> Note {
    Note {
        text: text.to_owned(),
    }
}

/// `rpc Talk(stream Note) returns (stream Note)`.
const TALK: &str = "/chat.Chat/Talk";

/// The server side of `Talk`: answers each note as it comes, and ends the
/// call with `FAILED_PRECONDITION` when a note says `fail`.
struct Talk;

type NoteStream = Pin<Box<dyn Stream<Item = Result<Note, Status>> + Send>>;

impl tonic::server::StreamingService<Note> for Talk {
    type Response = Note;
    type ResponseStream = NoteStream;
    type Future = std::future::Ready<Result<tonic::Response<NoteStream>, Status>>;

    // tonic's streams carry a `Status` as their error, however large.
    #[allow(clippy::result_large_err)]
    fn call(&mut self, request: tonic::Request<Streaming<Note>>) -> Self::Future {
        let answers = request.into_inner().map(|received| {
            let received = received?;
            match received.text.as_str() {
                "fail" => Err(Status::failed_precondition("told to fail")),
                text => Ok(note(&format!("echo: {text}"))),
            }
        });
        std::future::ready(Ok(tonic::Response::new(Box::pin(answers))))
    }
}

/// An h2c upstream serving `Talk` with tonic's server.
async fn grpc_upstream() -> Backend {
    Backend::start(|request: Request<Incoming>| async move {
        let mut grpc = tonic::server::Grpc::new(ProstCodec::<Note, Note>::default());
        let response = grpc.streaming(Talk, request).await;
        response.map(|body| body.map_err(Into::into).boxed_unsync())
    })
    .await
}

/// tonic's client over one HTTP/2 connection of hyper's (tonic's own
/// transport is left out of the dev-dependencies).
struct H2Channel(SendRequest<BoxBody>);

impl tower_service::Service<Request<BoxBody>> for H2Channel {
    type Response = Response<Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Incoming>, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<BoxBody>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

/// A gRPC client of `HOST` through dockhand's HTTPS listener (ALPN `h2`).
async fn grpc_client(https: SocketAddr, ca: &TestCa) -> tonic::client::Grpc<H2Channel> {
    let tls = tls_connect(https, HOST, client_config(ca.roots(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let origin = Uri::try_from(format!("https://{HOST}")).unwrap();
    tonic::client::Grpc::with_origin(H2Channel(sender), origin)
}

/// A `Talk` call whose notes are sent one at a time through the returned
/// sender, and the stream of answers.
async fn talk(
    client: &mut tonic::client::Grpc<H2Channel>,
) -> (mpsc::UnboundedSender<Note>, Streaming<Note>) {
    let (notes, outbound) = mpsc::unbounded_channel::<Note>();
    let outbound = futures_util::stream::unfold(outbound, |mut outbound| async move {
        outbound.recv().await.map(|note| (note, outbound))
    });
    client.ready().await.unwrap();
    let response = client
        .streaming(
            tonic::Request::new(outbound),
            PathAndQuery::from_static(TALK),
            ProstCodec::<Note, Note>::default(),
        )
        .await
        .expect("the call is answered");
    (notes, response.into_inner())
}

/// gRPC over HTTP/2 (the gRPC protocol's `PROTOCOL-HTTP2.md`): each answer
/// arrives before the next note is sent, so the call streams both ways at
/// once through dockhand; the client ending its stream ends the call OK
/// (`grpc-status: 0` in the trailers), and a failing call's status and
/// message reach the client.
#[tokio::test]
async fn a_grpc_bidirectional_stream_over_tls_streams_both_ways_with_its_status() {
    let upstream = grpc_upstream().await;
    let (proxy, ca) = https_proxy(upstream.addr, serde_json::json!({"protocol": "h2c"})).await;
    let mut client = grpc_client(proxy.https.unwrap(), &ca).await;

    let (notes, mut answers) = talk(&mut client).await;
    for n in 0..3 {
        notes.send(note(&format!("hello {n}"))).unwrap();
        let answer = answers.message().await.unwrap().expect("an answer");
        assert_eq!(answer.text, format!("echo: hello {n}"));
    }
    drop(notes);
    assert_eq!(answers.message().await.unwrap(), None, "ended with OK");

    let (notes, mut answers) = talk(&mut client).await;
    notes.send(note("first")).unwrap();
    assert_eq!(
        answers.message().await.unwrap().unwrap().text,
        "echo: first"
    );
    notes.send(note("fail")).unwrap();
    let status = answers.message().await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert_eq!(status.message(), "told to fail");
}
