//! CORS (the Fetch standard's CORS protocol): a preflight (`OPTIONS` with
//! `Origin` and `Access-Control-Request-Method`) is answered by dockhand
//! and never reaches the upstream; an allowed origin's other requests get
//! `Access-Control-Allow-Origin` on the upstream's answer. An origin that is
//! not allowed gets no CORS header at all, so the browser keeps the
//! response from the page.

use bytes::Bytes;
use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_MAX_AGE, ACCESS_CONTROL_REQUEST_HEADERS,
    ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode};

use super::{empty_answer, RequestFacts};
use crate::config::middleware::{Cors, OriginPattern};

/// The answer to a preflight; `None` for any other request.
pub fn preflight(cors: &Cors, request: &RequestFacts<'_>) -> Option<Response<Bytes>> {
    let headers = request.headers;
    if *request.method != Method::OPTIONS || !headers.contains_key(ACCESS_CONTROL_REQUEST_METHOD) {
        return None;
    }
    let origin = headers.get(ORIGIN)?;
    let mut response = empty_answer(StatusCode::NO_CONTENT);
    let answer = response.headers_mut();
    // The answer depends on these, whatever it is: caches must know.
    answer.insert(
        VARY,
        HeaderValue::from_static(
            "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
        ),
    );
    if !allow(cors, origin, answer) {
        return Some(response);
    }
    answer.insert(ACCESS_CONTROL_ALLOW_METHODS, cors.allow_methods.clone());
    let allowed_headers = match &cors.allow_headers {
        Some(allowed) => Some(allowed.clone()),
        None => headers.get(ACCESS_CONTROL_REQUEST_HEADERS).cloned(),
    };
    if let Some(allowed) = allowed_headers {
        answer.insert(ACCESS_CONTROL_ALLOW_HEADERS, allowed);
    }
    if let Some(max_age) = cors.max_age {
        answer.insert(ACCESS_CONTROL_MAX_AGE, HeaderValue::from(max_age));
    }
    Some(response)
}

/// Allows `origin` on a response, if it is allowed; says whether it was.
pub fn allow(cors: &Cors, origin: &HeaderValue, headers: &mut HeaderMap) -> bool {
    let Ok(origin_text) = origin.to_str() else {
        return false;
    };
    let Some(pattern) = cors
        .allow_origins
        .iter()
        .find(|pattern| pattern.allows(origin_text))
    else {
        return false;
    };
    // `*` only where no credentials go: browsers refuse it with them. Any
    // other answer names the origin, so it varies with it.
    if *pattern == OriginPattern::Any && !cors.allow_credentials {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    } else {
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        add_vary_origin(headers);
    }
    if cors.allow_credentials {
        headers.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
    }
    true
}

/// Adds `Origin` to the response's `Vary`, keeping what the upstream said.
fn add_vary_origin(headers: &mut HeaderMap) {
    let varies_already = headers
        .get_all(VARY)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| {
            let item = item.trim();
            item == "*" || item.eq_ignore_ascii_case("origin")
        });
    if !varies_already {
        headers.append(VARY, HeaderValue::from_static("Origin"));
    }
}
