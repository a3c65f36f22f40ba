//! Negotiation (`Accept-Encoding` weights, `*`, refusals, ties) and the
//! conditions under which an answer is compressed, and its headers then.

use http::header::{HeaderName, ACCEPT_ENCODING};
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::*;
use crate::config::middleware::Encoding::{self, Brotli, Gzip, Zstd};

const ALL: [Encoding; 3] = Encoding::PREFERRED;
/// What Chrome sends.
const CHROME: &str = "gzip, deflate, br, zstd";
/// What `curl --compressed` sends (built with all three).
const CURL: &str = "deflate, gzip, br, zstd";

fn headers(pairs: &[(HeaderName, &str)]) -> HeaderMap {
    pairs
        .iter()
        .map(|(name, value)| (name.clone(), HeaderValue::from_str(value).unwrap()))
        .collect()
}

fn accepted_of(accept_encoding: &str, offered: &[Encoding]) -> Accepted {
    let request = headers(&[(ACCEPT_ENCODING, accept_encoding)]);
    accepted(&Method::GET, &request, offered)
}

#[test]
fn equal_weights_go_to_dockhand_s_preference() {
    assert_eq!(accepted_of(CHROME, &ALL), Accepted::With(Brotli));
    assert_eq!(accepted_of(CURL, &ALL), Accepted::With(Brotli));
    assert_eq!(accepted_of(CHROME, &[Zstd, Gzip]), Accepted::With(Zstd));
    assert_eq!(accepted_of(CHROME, &[Gzip]), Accepted::With(Gzip));
    assert_eq!(
        accepted_of("gzip, zstd", &[Brotli, Gzip]),
        Accepted::With(Gzip)
    );
}

#[test]
fn the_client_s_highest_weight_wins() {
    assert_eq!(
        accepted_of("br;q=0.5, gzip;q=0.9, zstd;q=0.8", &ALL),
        Accepted::With(Gzip)
    );
    assert_eq!(
        accepted_of("br ; q=0.2 , GZIP ; Q=1.0", &ALL),
        Accepted::With(Gzip)
    );
    assert_eq!(accepted_of("x-gzip", &ALL), Accepted::With(Gzip));
}

#[test]
fn q_zero_refuses_and_star_stands_for_the_unlisted() {
    assert_eq!(accepted_of("br;q=0, gzip", &ALL), Accepted::With(Gzip));
    assert_eq!(accepted_of("*", &ALL), Accepted::With(Brotli));
    assert_eq!(accepted_of("*;q=0.5, br;q=0", &ALL), Accepted::With(Zstd));
    assert_eq!(
        accepted_of("gzip;q=0.1, *;q=0.5", &ALL),
        Accepted::With(Brotli)
    );
    assert_eq!(accepted_of("*;q=0", &ALL), Accepted::Identity);
    assert_eq!(
        accepted_of("br;q=0, gzip;q=0", &[Brotli, Gzip]),
        Accepted::Identity
    );
}

#[test]
fn nothing_asked_or_nothing_offered_means_as_it_is() {
    let none = accepted(&Method::GET, &HeaderMap::new(), &ALL);
    assert_eq!(none, Accepted::Identity);
    assert_eq!(accepted_of("", &ALL), Accepted::Identity);
    assert_eq!(accepted_of("identity", &ALL), Accepted::Identity);
    assert_eq!(accepted_of("deflate, compress", &ALL), Accepted::Identity);
    assert_eq!(accepted_of("br", &[Gzip, Zstd]), Accepted::Identity);
}

#[test]
fn identity_weighted_above_every_encoding_wins() {
    assert_eq!(
        accepted_of("gzip;q=0.5, identity", &ALL),
        Accepted::Identity
    );
    assert_eq!(
        accepted_of("gzip, identity;q=0.5", &ALL),
        Accepted::With(Gzip)
    );
}

#[test]
fn malformed_weights_leave_their_item_out() {
    for item in ["br;q=2", "br;q=0.1234", "br;q=x", "br;q=1.5", "br;q"] {
        let header = format!("{item}, gzip;q=0.1");
        assert_eq!(accepted_of(&header, &ALL), Accepted::With(Gzip), "{header}");
    }
    assert_eq!(accepted_of("br;q=1.000", &ALL), Accepted::With(Brotli));
    assert_eq!(accepted_of("br;q=0.", &ALL), Accepted::Identity);
}

#[test]
fn head_requests_get_no_encoding() {
    let request = headers(&[(ACCEPT_ENCODING, CHROME)]);
    assert_eq!(accepted(&Method::HEAD, &request, &ALL), Accepted::Identity);
}

/// An answer the middleware compresses: 2 kB of JSON with a strong ETag.
fn json_answer() -> HeaderMap {
    headers(&[
        (CONTENT_TYPE, "application/json; charset=utf-8"),
        (CONTENT_LENGTH, "2048"),
        (ETAG, "\"v1\""),
        (ACCEPT_RANGES, "bytes"),
    ])
}

fn applied(status: StatusCode, answer: &mut HeaderMap) -> Option<Encoding> {
    apply(Accepted::With(Gzip), status, answer).map(|encoder| encoder.encoding())
}

#[test]
fn a_compressed_answer_s_headers_describe_its_new_body() {
    let mut answer = json_answer();
    answer.insert(VARY, HeaderValue::from_static("Origin"));
    assert_eq!(applied(StatusCode::OK, &mut answer), Some(Gzip));
    assert_eq!(answer[CONTENT_ENCODING], "gzip");
    assert!(!answer.contains_key(CONTENT_LENGTH));
    assert!(!answer.contains_key(ACCEPT_RANGES));
    assert_eq!(answer[ETAG], "W/\"v1\"");
    let vary: Vec<&HeaderValue> = answer.get_all(VARY).iter().collect();
    assert_eq!(vary, ["Origin", "Accept-Encoding"]);
}

#[test]
fn weak_etags_and_an_existing_vary_are_kept() {
    let mut answer = json_answer();
    answer.insert(ETAG, HeaderValue::from_static("W/\"v1\""));
    answer.insert(VARY, HeaderValue::from_static("origin, accept-encoding"));
    assert_eq!(applied(StatusCode::NOT_FOUND, &mut answer), Some(Gzip));
    assert_eq!(answer[ETAG], "W/\"v1\"");
    assert_eq!(answer.get_all(VARY).iter().count(), 1);
}

#[test]
fn unknown_lengths_and_the_minimum_size_are_compressed() {
    let mut answer = json_answer();
    answer.remove(CONTENT_LENGTH);
    assert_eq!(applied(StatusCode::OK, &mut answer), Some(Gzip));
    let mut answer = json_answer();
    answer.insert(CONTENT_LENGTH, MIN_SIZE.into());
    assert_eq!(applied(StatusCode::OK, &mut answer), Some(Gzip));
}

#[test]
fn answers_that_must_stay_as_they_are() {
    // (status, a header the JSON answer gets: none when empty)
    let cases = [
        (StatusCode::NO_CONTENT, "", ""),
        (StatusCode::NOT_MODIFIED, "", ""),
        (StatusCode::SWITCHING_PROTOCOLS, "", ""),
        (StatusCode::PARTIAL_CONTENT, "", ""),
        (StatusCode::OK, "content-encoding", "br"),
        (StatusCode::OK, "content-range", "bytes 0-9/100"),
        (StatusCode::OK, "cache-control", "public, No-Transform"),
        (StatusCode::OK, "content-length", "1023"),
        (StatusCode::OK, "content-type", "image/png"),
        (StatusCode::OK, "content-type", "application/zip"),
    ];
    for (status, name, value) in cases {
        let mut answer = json_answer();
        if !name.is_empty() {
            answer.insert(name, HeaderValue::from_static(value));
        }
        let before = answer.clone();
        let case = format!("{status} {name}: {value}");
        assert_eq!(applied(status, &mut answer), None, "{case}");
        assert_eq!(answer, before, "{case}: headers untouched");
    }
    let mut untyped = json_answer();
    untyped.remove(CONTENT_TYPE);
    assert_eq!(applied(StatusCode::OK, &mut untyped), None);
}

#[test]
fn vary_is_added_when_this_client_gets_it_as_it_is() {
    let mut answer = json_answer();
    assert!(apply(Accepted::Identity, StatusCode::OK, &mut answer).is_none());
    assert_eq!(answer[VARY], "Accept-Encoding");
    assert_eq!(answer[CONTENT_LENGTH], "2048");
    assert!(!answer.contains_key(CONTENT_ENCODING));
    let mut star = json_answer();
    star.insert(VARY, HeaderValue::from_static("*"));
    apply(Accepted::Identity, StatusCode::OK, &mut star);
    assert_eq!(star.get_all(VARY).iter().count(), 1);
    let mut elsewhere = json_answer();
    assert!(apply(Accepted::NotOffered, StatusCode::OK, &mut elsewhere).is_none());
    assert_eq!(elsewhere, json_answer());
}

#[test]
fn compressible_types() {
    for media_type in [
        "text/html; charset=utf-8",
        "TEXT/CSS",
        "text/event-stream",
        "application/json",
        "application/javascript",
        "application/xml",
        "application/problem+json",
        "application/atom+xml",
        "image/svg+xml",
    ] {
        assert!(compressible_type(media_type), "{media_type}");
    }
    for media_type in [
        "image/png",
        "image/jpeg",
        "video/mp4",
        "application/octet-stream",
        "application/gzip",
        "application/zip",
        "font/woff2",
        "",
    ] {
        assert!(!compressible_type(media_type), "{media_type}");
    }
}
