//! `redirect`: a request whose URL (`scheme://host/path?query`) the regex
//! matches is sent elsewhere, the first match replaced by the replacement
//! (`$1`, `${name}`), as Traefik's `redirectRegex` does. GET and HEAD get
//! `301`/`302`; other methods `308`/`307`, which keep the method and body.

use bytes::Bytes;
use http::header::LOCATION;
use http::{HeaderValue, Method, Response, StatusCode};

use super::{empty_answer, RequestFacts};
use crate::config::middleware::Redirect;

/// The redirect, when the regex matches the request's URL.
pub fn answer(redirect: &Redirect, request: &RequestFacts<'_>) -> Option<Response<Bytes>> {
    let path = request
        .uri
        .path_and_query()
        .map_or("/", |path| path.as_str());
    let host = request.host.to_str().ok()?;
    let url = format!("{}://{host}{path}", request.scheme);
    if !redirect.regex.is_match(&url) {
        return None;
    }
    let target = redirect.regex.replace(&url, redirect.replacement.as_str());
    // A URL's characters are all a header value may hold; anything else
    // came from the replacement, and is not sent.
    let location = HeaderValue::from_str(&target).ok()?;
    let keeps_method = !matches!(*request.method, Method::GET | Method::HEAD);
    let status = match (redirect.permanent, keeps_method) {
        (true, false) => StatusCode::MOVED_PERMANENTLY,
        (true, true) => StatusCode::PERMANENT_REDIRECT,
        (false, false) => StatusCode::FOUND,
        (false, true) => StatusCode::TEMPORARY_REDIRECT,
    };
    let mut response = empty_answer(status);
    response.headers_mut().insert(LOCATION, location);
    Some(response)
}
