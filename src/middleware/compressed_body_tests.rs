//! The streamed encoding: every encoding decodes back to the body, each
//! frame's bytes come out before the next frame arrives, trailers follow
//! the end, and upstream errors pass through.

use std::io::Read;

use bytes::Bytes;
use http::HeaderMap;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};

use super::*;

type Cause = Box<dyn std::error::Error + Send + Sync>;
type Framed = Result<Frame<Bytes>, Cause>;

/// A body of these frames.
fn frames(
    frames: Vec<Framed>,
) -> StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Framed>>> {
    StreamBody::new(futures_util::stream::iter(frames))
}

fn decode(encoding: Encoding, encoded: &[u8]) -> Vec<u8> {
    let mut decoded = Vec::new();
    match encoding {
        Encoding::Gzip => flate2::read::GzDecoder::new(encoded)
            .read_to_end(&mut decoded)
            .map(drop),
        Encoding::Brotli => brotli::Decompressor::new(encoded, 4096)
            .read_to_end(&mut decoded)
            .map(drop),
        Encoding::Zstd => zstd::stream::read::Decoder::new(encoded)
            .and_then(|mut decoder| decoder.read_to_end(&mut decoded))
            .map(drop),
    }
    .expect("decodes");
    decoded
}

fn text(lines: usize) -> Bytes {
    let line = |n: usize| format!("{{\"id\": {n}, \"name\": \"item {n}\", \"ok\": true}}\n");
    Bytes::from((0..lines).map(line).collect::<String>())
}

#[tokio::test]
async fn every_encoding_decodes_to_the_body() {
    let parts = [text(10), text(1000), Bytes::new(), text(3)];
    let whole: Vec<u8> = parts.concat();
    for encoding in Encoding::PREFERRED {
        let body = frames(parts.iter().cloned().map(|p| Ok(Frame::data(p))).collect());
        let compressed = Compressed::new(body, Encoder::new(encoding).unwrap());
        let encoded = compressed.collect().await.unwrap().to_bytes();
        assert!(encoded.len() < whole.len() / 4, "{encoding:?} compresses");
        assert_eq!(decode(encoding, &encoded), whole, "{encoding:?}");
    }
}

#[tokio::test]
async fn each_frame_is_decodable_when_it_is_sent() {
    for encoding in Encoding::PREFERRED {
        let events = ["data: one\n\n", "data: two\n\n"];
        let body = frames(
            events
                .iter()
                .map(|event| Ok(Frame::data(Bytes::from_static(event.as_bytes()))))
                .collect(),
        );
        let mut compressed = Compressed::new(body, Encoder::new(encoding).unwrap());
        let mut sent = Vec::new();
        for event in events.iter() {
            let frame = compressed.frame().await.unwrap().unwrap();
            sent.extend_from_slice(frame.data_ref().unwrap());
            // What is sent so far decodes to every event so far, though
            // the encoding has not ended.
            let so_far = partial_decode(encoding, &sent);
            assert!(so_far.ends_with(event), "{encoding:?}: {so_far:?}");
        }
        assert!(compressed.frame().await.unwrap().unwrap().is_data());
        assert!(compressed.frame().await.is_none());
        assert!(compressed.is_end_stream());
    }
}

/// What an unfinished stream decodes to so far.
fn partial_decode(encoding: Encoding, encoded: &[u8]) -> String {
    let mut decoded = vec![0; 1024];
    let mut length = 0;
    let mut reader: Box<dyn Read> = match encoding {
        Encoding::Gzip => Box::new(flate2::read::GzDecoder::new(encoded)),
        Encoding::Brotli => Box::new(brotli::Decompressor::new(encoded, 4096)),
        Encoding::Zstd => Box::new(zstd::stream::read::Decoder::new(encoded).unwrap()),
    };
    while let Ok(read) = reader.read(&mut decoded[length..]) {
        if read == 0 {
            break;
        }
        length += read;
    }
    String::from_utf8_lossy(&decoded[..length]).into_owned()
}

#[tokio::test]
async fn trailers_follow_the_encoding_s_end() {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    let body = frames(vec![
        Ok(Frame::data(text(100))),
        Ok(Frame::trailers(trailers.clone())),
    ]);
    let collected = Compressed::new(body, Encoder::new(Encoding::Gzip).unwrap())
        .collect()
        .await
        .unwrap();
    assert_eq!(collected.trailers(), Some(&trailers));
    assert_eq!(decode(Encoding::Gzip, &collected.to_bytes()), text(100));
}

#[tokio::test]
async fn upstream_errors_pass_through() {
    let body = frames(vec![Ok(Frame::data(text(10))), Err("upstream cut".into())]);
    let mut compressed = Compressed::new(body, Encoder::new(Encoding::Zstd).unwrap());
    assert!(compressed.frame().await.unwrap().is_ok());
    let error = compressed.frame().await.unwrap().unwrap_err();
    assert_eq!(error.to_string(), "upstream cut");
}
