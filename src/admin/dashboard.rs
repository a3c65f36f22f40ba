//! The dashboard: `GET /` on the admin listener answers one HTML page
//! (`dashboard.html`, its CSS and JavaScript inline, embedded in the binary so
//! it works offline). The page holds no data: it polls `/api/v1/hosts`,
//! `/api/v1/diagnostics` and `/api/v1/certificates` itself, with the bearer token it asks for when they
//! answer `401`, so it is served without the token.

use bytes::Bytes;
use http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::AdminResponse;

/// The page, as built into the binary.
const PAGE: &str = include_str!("dashboard.html");

/// The page may run only its own inline script and style and talk only to
/// this listener: no other origin is loaded, framed or sent anything, even if
/// a label's text ever reached the page as markup.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard page.
pub fn page() -> AdminResponse {
    let mut response = Response::new(Full::new(Bytes::from_static(PAGE.as_bytes())));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    // A new binary may serve a new page (and new API fields) at the same URL.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // Offline: every `src`/`href` would be another request, and the only
        // URLs the script fetches are this listener's own paths.
        for outside in ["src=", "href=", "http://", "https://", "@import", "url("] {
            assert!(
                !PAGE.contains(outside),
                "the dashboard refers to something outside itself: {outside}"
            );
        }
        assert!(PAGE.contains("<meta name=\"viewport\""));
    }

    #[test]
    fn the_page_inserts_data_as_text_only() {
        // Container names and labels are user input: the script never parses
        // data as markup.
        for markup_sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(
                !PAGE.contains(markup_sink),
                "the dashboard uses {markup_sink}"
            );
        }
    }

    #[test]
    fn the_token_never_goes_into_a_url() {
        // It travels in the Authorization header only and is kept per tab.
        assert!(PAGE.contains("\"Authorization\"] = \"Bearer \""));
        assert!(PAGE.contains("sessionStorage"));
        assert!(!PAGE.contains("localStorage"));
        assert!(!PAGE.contains("?token"));
    }
}
