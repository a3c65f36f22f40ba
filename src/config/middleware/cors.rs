//! `cors`: the origins allowed, and what a preflight is answered, as settings.

use std::fmt;
use std::ops::RangeInclusive;

use http::{HeaderValue, Method};

use super::{header_name, read_list, read_text, scalars, WrittenSettings};

/// CORS preflight answers may be cached for up to a day (browsers cap lower).
const CORS_MAX_AGE_SECS: RangeInclusive<u64> = 0..=86_400;

/// Cross-origin resource sharing (the Fetch standard's CORS protocol):
/// which origins may read responses, and the preflight answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Cors {
    pub allow_origins: Vec<OriginPattern>,
    /// Preflight's `Access-Control-Allow-Methods`, as written (joined).
    pub allow_methods: HeaderValue,
    /// Preflight's `Access-Control-Allow-Headers`; `None`: the headers the
    /// preflight asks for are allowed.
    pub allow_headers: Option<HeaderValue>,
    pub allow_credentials: bool,
    /// Preflight's `Access-Control-Max-Age`, seconds.
    pub max_age: Option<u32>,
}

/// An origin allowed by CORS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `*`: every origin.
    Any,
    /// `https://app.example.com`, lower-cased, no trailing slash.
    Exact(String),
    /// `*.example.com`: any origin whose host is below it, either scheme;
    /// stored as `.example.com`.
    Subdomains(String),
}

impl OriginPattern {
    /// Whether the request's `Origin` (as sent) is allowed.
    pub fn allows(&self, origin: &str) -> bool {
        match self {
            OriginPattern::Any => true,
            OriginPattern::Exact(allowed) => allowed.eq_ignore_ascii_case(origin),
            OriginPattern::Subdomains(suffix) => {
                let host = origin
                    .strip_prefix("https://")
                    .or_else(|| origin.strip_prefix("http://"))
                    .unwrap_or_default();
                // A port belongs to the origin, not to its host name.
                let host = host.split(':').next().unwrap_or_default();
                host.len() > suffix.len()
                    && host
                        .get(host.len() - suffix.len()..)
                        .is_some_and(|end| end.eq_ignore_ascii_case(suffix))
            }
        }
    }
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OriginPattern::Any => f.write_str("*"),
            OriginPattern::Exact(origin) => f.write_str(origin),
            OriginPattern::Subdomains(suffix) => write!(f, "*{suffix}"),
        }
    }
}

/// Methods a preflight allows when `cors.allow_methods` is not written:
/// the CORS-safelisted ones.
const DEFAULT_CORS_METHODS: &str = "GET, HEAD, POST";

pub(super) fn read_cors(written: &mut impl WrittenSettings) -> Option<Cors> {
    let origins = read_list(written, "cors.allow_origins", origin_pattern);
    let methods = read_list(written, "cors.allow_methods", |text| {
        Method::from_bytes(text.as_bytes()).map_err(|_| format!("`{text}` is not an HTTP method"))
    });
    let headers = read_list(written, "cors.allow_headers", header_name);
    let credentials = written.boolean("cors.allow_credentials");
    let max_age = read_text(written, "cors.max_age", |text| {
        scalars::whole_number(text, CORS_MAX_AGE_SECS)
    });
    let Some(allow_origins) = origins else {
        let others = methods.is_some() || headers.is_some() || credentials.is_some();
        if others || max_age.is_some() {
            let reason = "CORS needs cors.allow_origins, the origins allowed".to_owned();
            written.refuse("cors.allow_origins", reason);
        }
        return None;
    };
    let allow_credentials = credentials.unwrap_or(false);
    if allow_credentials && allow_origins.contains(&OriginPattern::Any) {
        let reason =
            "`*` can't go with credentials (browsers refuse it): name the origins".to_owned();
        written.refuse("cors.allow_credentials", reason);
        return None;
    }
    let joined = |items: Vec<String>| {
        HeaderValue::from_str(&items.join(", ")).expect("validated names and methods")
    };
    Some(Cors {
        allow_origins,
        allow_methods: methods.map_or(HeaderValue::from_static(DEFAULT_CORS_METHODS), |methods| {
            joined(methods.iter().map(Method::to_string).collect())
        }),
        allow_headers: headers.map(|headers| {
            joined(
                headers
                    .iter()
                    .map(|name| name.as_str().to_owned())
                    .collect(),
            )
        }),
        allow_credentials,
        max_age: max_age.map(|secs| secs as u32),
    })
}

/// `*`, `*.example.com`, or an origin: `scheme://host[:port]`.
pub fn origin_pattern(text: &str) -> Result<OriginPattern, String> {
    if text == "*" {
        return Ok(OriginPattern::Any);
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        scalars::host_pattern(suffix).map_err(|reason| format!("`{text}`: {reason}"))?;
        return Ok(OriginPattern::Subdomains(format!(
            ".{}",
            suffix.to_ascii_lowercase()
        )));
    }
    let origin = text.trim_end_matches('/').to_ascii_lowercase();
    let well_formed = origin.split_once("://").is_some_and(|(scheme, host)| {
        matches!(scheme, "http" | "https") && !host.is_empty() && !host.contains('/')
    });
    match well_formed {
        true => Ok(OriginPattern::Exact(origin)),
        false => Err(format!(
            "`{text}` is not an origin: write scheme://host[:port], *.domain or *"
        )),
    }
}
