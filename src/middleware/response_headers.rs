//! Response header rules: removals, then headers set (replacing the
//! upstream's), then the security preset where the upstream and the rules
//! set none of its headers.

use http::header::{REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::middleware::ResponseHeaders;

/// The security preset: no MIME sniffing, no full URL to other sites, no
/// framing by other sites.
const SECURITY_PRESET: [(HeaderName, &str); 3] = [
    (X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (REFERRER_POLICY, "strict-origin-when-cross-origin"),
    (X_FRAME_OPTIONS, "SAMEORIGIN"),
];

pub fn apply(rules: &ResponseHeaders, headers: &mut HeaderMap) {
    if rules.is_empty() {
        return;
    }
    for name in &rules.remove {
        headers.remove(name);
    }
    for (name, value) in &rules.set {
        headers.insert(name.clone(), value.clone());
    }
    if rules.security {
        for (name, value) in SECURITY_PRESET {
            headers
                .entry(name)
                .or_insert_with(|| HeaderValue::from_static(value));
        }
    }
}
