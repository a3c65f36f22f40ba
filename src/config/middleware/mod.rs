//! Per-location request handling as settings: an IP allow list, a rate
//! limit (`rate_limit`), basic and forward auth (`auth`), a request body
//! limit, a redirect, response header rules, CORS (`cors`) and compression.
//! Both sources write the same keys, the routes file as nested objects
//! (`"redirect": {"regex": ...}`) and labels flat (`dockhand.redirect.regex`);
//! each source reads its own syntax behind `WrittenSettings`, and every
//! value is checked here, once, with the same reasons for both. What the
//! settings do to requests is `crate::middleware`'s.

use std::ops::RangeInclusive;

use http::{HeaderName, HeaderValue};
use ipnet::IpNet;
use regex::Regex;

use super::scalars;

mod auth;
mod cors;
mod rate_limit;

pub use auth::{
    forward_auth_address, password_hash, user, users_of_file, BasicAuth, BasicAuthUser,
    ForwardAuth, PasswordHash,
};
use auth::{read_basic_auth, read_forward_auth};
use cors::read_cors;
pub use cors::{origin_pattern, Cors, OriginPattern};
use rate_limit::read_rate_limit;
pub use rate_limit::{rate_limit_key, RateLimit, RateLimitKey};

/// Every middleware key of a location, besides the maps below.
pub const MIDDLEWARE_KEYS: &[&str] = &[
    "ip_allow",
    "rate_limit.average",
    "rate_limit.burst",
    "rate_limit.period",
    "rate_limit.by",
    "basic_auth.users",
    "basic_auth.users_file",
    "basic_auth.realm",
    "basic_auth.forward",
    "forward_auth.address",
    "forward_auth.response_headers",
    "forward_auth.trust_forward_header",
    "max_body_size",
    "redirect.regex",
    "redirect.replacement",
    "redirect.permanent",
    "headers.response.remove",
    "headers.security",
    "cors.allow_origins",
    "cors.allow_methods",
    "cors.allow_headers",
    "cors.allow_credentials",
    "cors.max_age",
    "compress",
];

/// `headers.response.set.<Header-Name>`: one response header per key.
pub const RESPONSE_HEADER_SET_START: &str = "headers.response.set.";

/// Whether `key` is a middleware key (a map entry needs a name after its start).
pub fn is_middleware_key(key: &str) -> bool {
    MIDDLEWARE_KEYS.contains(&key)
        || key
            .strip_prefix(RESPONSE_HEADER_SET_START)
            .is_some_and(|name| !name.is_empty())
}

/// The most a body limit may be: 1 TiB, past any real upload.
const BODY_SIZES: RangeInclusive<u64> = 1..=(1 << 40);

/// What a location does to requests besides forwarding them; the default,
/// nothing, is what nearly every location has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Middlewares {
    /// Only clients in these networks are served (`403` otherwise).
    pub ip_allow: Option<Vec<IpNet>>,
    pub rate_limit: Option<RateLimit>,
    pub basic_auth: Option<BasicAuth>,
    pub forward_auth: Option<ForwardAuth>,
    /// Bytes; a request body past it is answered `413`.
    pub max_body_size: Option<u64>,
    pub redirect: Option<Redirect>,
    pub response_headers: ResponseHeaders,
    pub cors: Option<Cors>,
    /// The encodings responses may be compressed with, in dockhand's
    /// order of preference (`Encoding::PREFERRED`); never empty.
    pub compress: Option<Vec<Encoding>>,
}

impl Middlewares {
    pub fn is_empty(&self) -> bool {
        *self == Middlewares::default()
    }

    /// Each middleware set, as its keys are written, with its settings:
    /// what a diagnostic shows when two replicas disagree.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        let mut described = Vec::new();
        if let Some(networks) = &self.ip_allow {
            let networks: Vec<String> = networks.iter().map(IpNet::to_string).collect();
            described.push(("ip_allow", format!("ip_allow {}", networks.join(","))));
        }
        if let Some(limit) = &self.rate_limit {
            described.push(("rate_limit", format!("rate_limit {limit}")));
        }
        if let Some(auth) = &self.basic_auth {
            let names: Vec<&str> = auth.users.iter().map(|user| user.name.as_str()).collect();
            let file = auth
                .users_file
                .as_ref()
                .map(|path| path.display().to_string());
            described.push((
                "basic_auth",
                format!(
                    "basic_auth users {} users_file {} realm {} forward {}",
                    names.join(","),
                    file.as_deref().unwrap_or("(none)"),
                    auth.realm,
                    auth.forward
                ),
            ));
        }
        if let Some(auth) = &self.forward_auth {
            let copied: Vec<&str> = auth
                .response_headers
                .iter()
                .map(HeaderName::as_str)
                .collect();
            let scheme = if auth.tls { "https" } else { "http" };
            described.push((
                "forward_auth",
                format!(
                    "forward_auth {scheme}://{}{} response_headers {} trust_forward_header {}",
                    auth.authority,
                    auth.path,
                    copied.join(","),
                    auth.trust_forward_header
                ),
            ));
        }
        if let Some(size) = self.max_body_size {
            described.push(("max_body_size", format!("max_body_size {size}")));
        }
        if let Some(redirect) = &self.redirect {
            described.push((
                "redirect",
                format!(
                    "redirect {} to {}{}",
                    redirect.regex.as_str(),
                    redirect.replacement,
                    if redirect.permanent {
                        " (permanent)"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let headers = &self.response_headers;
        for (name, value) in &headers.set {
            let value = String::from_utf8_lossy(value.as_bytes());
            described.push(("headers", format!("headers.response.set.{name} {value}")));
        }
        if !headers.remove.is_empty() {
            let names: Vec<&str> = headers.remove.iter().map(HeaderName::as_str).collect();
            described.push((
                "headers",
                format!("headers.response.remove {}", names.join(",")),
            ));
        }
        if headers.security {
            described.push(("headers", "headers.security".to_owned()));
        }
        if let Some(cors) = &self.cors {
            let origins: Vec<String> = cors.allow_origins.iter().map(|o| o.to_string()).collect();
            let text = |value: &HeaderValue| String::from_utf8_lossy(value.as_bytes()).into_owned();
            described.push((
                "cors",
                format!(
                    "cors {} methods {} headers {} credentials {} max_age {}",
                    origins.join(","),
                    text(&cors.allow_methods),
                    cors.allow_headers
                        .as_ref()
                        .map_or("(as asked)".to_owned(), text),
                    cors.allow_credentials,
                    cors.max_age
                        .map_or("(unset)".to_owned(), |secs| secs.to_string()),
                ),
            ));
        }
        if let Some(encodings) = &self.compress {
            let tokens: Vec<&str> = encodings.iter().map(|e| e.token()).collect();
            described.push(("compress", format!("compress {}", tokens.join(","))));
        }
        described
    }
}

/// A redirect answered instead of forwarding, when `regex` matches the
/// request's URL (`scheme://host/path?query`).
#[derive(Debug, Clone)]
pub struct Redirect {
    pub regex: Regex,
    /// `$1` and `${name}` stand for the regex's groups.
    pub replacement: String,
    /// `301`/`308` when permanent, else `302`/`307` (the second of each for
    /// methods other than GET and HEAD, which must keep their method).
    pub permanent: bool,
}

/// Patterns compare by their source text (`Regex` has no equality).
impl PartialEq for Redirect {
    fn eq(&self, other: &Redirect) -> bool {
        self.regex.as_str() == other.regex.as_str()
            && self.replacement == other.replacement
            && self.permanent == other.permanent
    }
}

/// Response header rules: removals first, then what is set (replacing).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResponseHeaders {
    pub set: Vec<(HeaderName, HeaderValue)>,
    pub remove: Vec<HeaderName>,
    /// The security preset: `X-Content-Type-Options: nosniff`,
    /// `Referrer-Policy: strict-origin-when-cross-origin` and
    /// `X-Frame-Options: SAMEORIGIN`, unless the upstream or `set` says otherwise.
    pub security: bool,
}

impl ResponseHeaders {
    pub fn is_empty(&self) -> bool {
        *self == ResponseHeaders::default()
    }
}

/// A content coding dockhand compresses responses with (RFC 9110 §8.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Brotli,
    Zstd,
    Gzip,
}

impl Encoding {
    /// Every encoding, best first: on a tie of the client's preferences,
    /// brotli and zstd make smaller bodies than gzip at the chosen levels.
    pub const PREFERRED: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

    /// As `Accept-Encoding` and `Content-Encoding` write it.
    pub fn token(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }
}

/// A value that is either a switch or a list of items (`compress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchOrList {
    Switch(bool),
    List(Vec<String>),
}

/// A location's settings as one source writes them. Each source reads its
/// own syntax (a JSON type, or a label's text) and reports problems at the
/// key as it names it; the values are checked by `read_middlewares`.
pub trait WrittenSettings {
    fn is_written(&self, key: &str) -> bool;
    /// The key's value as text (a JSON string or number; a label).
    fn text(&mut self, key: &str) -> Option<String>;
    fn boolean(&mut self, key: &str) -> Option<bool>;
    /// A list: a JSON array of strings; a comma-separated label.
    fn list(&mut self, key: &str) -> Option<Vec<String>>;
    /// `true`, `false` or a list: a JSON boolean or array of strings; a
    /// label's `true`, `false`, or else its comma-separated items.
    fn switch_or_list(&mut self, key: &str) -> Option<SwitchOrList>;
    /// The entries of a map whose keys start with `start`: (the name after
    /// it, the value).
    fn entries(&mut self, start: &str) -> Vec<(String, String)>;
    /// Refuses the key's value for `reason`.
    fn refuse(&mut self, key: &str, reason: String);
}

/// Reads every middleware key of a location; a refused value is reported
/// and leaves its feature out.
pub fn read_middlewares(written: &mut impl WrittenSettings) -> Middlewares {
    Middlewares {
        ip_allow: read_list(written, "ip_allow", network),
        rate_limit: read_rate_limit(written),
        basic_auth: read_basic_auth(written),
        forward_auth: read_forward_auth(written),
        max_body_size: read_text(written, "max_body_size", body_size),
        redirect: read_redirect(written),
        response_headers: read_response_headers(written),
        cors: read_cors(written),
        compress: read_compress(written),
    }
}

fn read_text<T>(
    written: &mut impl WrittenSettings,
    key: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    let text = written.text(key)?;
    parse(text.trim())
        .map_err(|reason| written.refuse(key, reason))
        .ok()
}

/// A non-empty list, every item valid (else refused whole).
fn read_list<T>(
    written: &mut impl WrittenSettings,
    key: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<Vec<T>> {
    let items = written.list(key)?;
    if items.is_empty() {
        written.refuse(key, "is empty".to_owned());
        return None;
    }
    let parsed: Result<Vec<T>, String> = items.iter().map(|item| parse(item.trim())).collect();
    parsed.map_err(|reason| written.refuse(key, reason)).ok()
}

/// A CIDR (`10.0.0.0/8`) or one address (`10.0.0.1`, taken as /32 or /128).
pub fn network(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("`{text}` is not a CIDR or an IP address"))
}

/// Bytes, or a number with `k`, `m` or `g` (KiB, MiB, GiB; `kb`, `MiB` and
/// the like are read the same).
pub fn body_size(text: &str) -> Result<u64, String> {
    let lower = text.to_ascii_lowercase();
    let digits_end = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(digits_end);
    let unit_bytes: u64 = match unit.trim() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "`{text}` is not a size: bytes, or a number with k, m or g (such as 10m)"
            ))
        }
    };
    let size = digits
        .parse::<u64>()
        .ok()
        .and_then(|count| count.checked_mul(unit_bytes))
        .ok_or_else(|| format!("`{text}` is not a size: bytes, or a number with k, m or g"))?;
    match BODY_SIZES.contains(&size) {
        true => Ok(size),
        false => Err(format!("{size} bytes is outside 1 byte..1 TiB")),
    }
}

fn read_redirect(written: &mut impl WrittenSettings) -> Option<Redirect> {
    let regex = read_text(written, "redirect.regex", scalars::rewrite_pattern);
    let replacement = written.text("redirect.replacement");
    let permanent = written.boolean("redirect.permanent");
    match (regex, replacement) {
        (Some(regex), Some(replacement)) => Some(Redirect {
            regex,
            replacement,
            permanent: permanent.unwrap_or(false),
        }),
        (None, None) if permanent.is_none() => None,
        (_, None) => {
            let reason = "a redirect needs redirect.replacement, the URL to send to".to_owned();
            written.refuse("redirect.replacement", reason);
            None
        }
        // A refused regex was reported already.
        (None, Some(_)) if written.is_written("redirect.regex") => None,
        (None, Some(_)) => {
            let reason = "a redirect needs redirect.regex, the URLs it applies to".to_owned();
            written.refuse("redirect.regex", reason);
            None
        }
    }
}

fn read_response_headers(written: &mut impl WrittenSettings) -> ResponseHeaders {
    let mut set = Vec::new();
    for (name, value) in written.entries(RESPONSE_HEADER_SET_START) {
        let key = format!("{RESPONSE_HEADER_SET_START}{name}");
        match scalars::header(&name, value.trim()) {
            Ok((header, _)) if set.iter().any(|(other, _)| *other == header) => {
                let reason = format!("`{name}` is set twice (header names ignore case)");
                written.refuse(&key, reason);
            }
            Ok(header) => set.push(header),
            Err(reason) => written.refuse(&key, reason),
        }
    }
    ResponseHeaders {
        set,
        remove: read_list(written, "headers.response.remove", header_name).unwrap_or_default(),
        security: written.boolean("headers.security").unwrap_or(false),
    }
}

fn header_name(text: &str) -> Result<HeaderName, String> {
    HeaderName::from_bytes(text.as_bytes())
        .map_err(|_| format!("`{text}` is not a valid header name"))
}

/// `compress`: `true` for every encoding, or the ones named; `false` is
/// the default, off.
fn read_compress(written: &mut impl WrittenSettings) -> Option<Vec<Encoding>> {
    let named = match written.switch_or_list("compress")? {
        SwitchOrList::Switch(on) => return on.then(|| Encoding::PREFERRED.to_vec()),
        SwitchOrList::List(items) => items,
    };
    if named.is_empty() {
        written.refuse("compress", "is empty".to_owned());
        return None;
    }
    let parsed: Result<Vec<Encoding>, String> =
        named.iter().map(|item| encoding(item.trim())).collect();
    let parsed = parsed
        .map_err(|reason| written.refuse("compress", reason))
        .ok()?;
    // Kept in dockhand's order: the written order is not a preference.
    Some(
        Encoding::PREFERRED
            .into_iter()
            .filter(|encoding| parsed.contains(encoding))
            .collect(),
    )
}

/// `gzip`, `br` or `zstd`, in any case.
pub fn encoding(text: &str) -> Result<Encoding, String> {
    Encoding::PREFERRED
        .into_iter()
        .find(|encoding| encoding.token().eq_ignore_ascii_case(text))
        .ok_or_else(|| {
            format!("`{text}` is not an encoding dockhand compresses with: gzip, br or zstd")
        })
}

#[cfg(test)]
mod tests;
