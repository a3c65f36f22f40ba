//! Per-location request handling as settings: an IP allow list, a request
//! body limit, a redirect, response header rules, CORS and compression. Both sources
//! write the same keys, the routes file as nested objects
//! (`"redirect": {"regex": ...}`) and labels flat (`dockhand.redirect.regex`);
//! each source reads its own syntax behind `WrittenSettings`, and every
//! value is checked here, once, with the same reasons for both. What the
//! settings do to requests is `crate::middleware`'s.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use regex::Regex;

use super::durations::parse_duration;
use super::model::UpstreamTarget;
use super::values;

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
/// Requests a rate limit may allow per period, and the most it may let
/// through at once.
const RATE_LIMIT_COUNTS: RangeInclusive<u64> = 1..=1_000_000;
const RATE_LIMIT_PERIODS: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(86_400);
/// CORS preflight answers may be cached for up to a day (browsers cap lower).
const CORS_MAX_AGE_SECS: RangeInclusive<u64> = 0..=86_400;

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
    pub fn describe(&self) -> Vec<String> {
        let mut described = Vec::new();
        if let Some(networks) = &self.ip_allow {
            let networks: Vec<String> = networks.iter().map(IpNet::to_string).collect();
            described.push(format!("ip_allow {}", networks.join(",")));
        }
        if let Some(limit) = &self.rate_limit {
            described.push(format!("rate_limit {limit}"));
        }
        if let Some(auth) = &self.basic_auth {
            let names: Vec<&str> = auth.users.iter().map(|user| user.name.as_str()).collect();
            let file = auth
                .users_file
                .as_ref()
                .map(|path| path.display().to_string());
            described.push(format!(
                "basic_auth users {} users_file {} realm {} forward {}",
                names.join(","),
                file.as_deref().unwrap_or("(none)"),
                auth.realm,
                auth.forward
            ));
        }
        if let Some(auth) = &self.forward_auth {
            let copied: Vec<&str> = auth
                .response_headers
                .iter()
                .map(HeaderName::as_str)
                .collect();
            let scheme = if auth.tls { "https" } else { "http" };
            described.push(format!(
                "forward_auth {scheme}://{}{} response_headers {} trust_forward_header {}",
                auth.authority,
                auth.path,
                copied.join(","),
                auth.trust_forward_header
            ));
        }
        if let Some(size) = self.max_body_size {
            described.push(format!("max_body_size {size}"));
        }
        if let Some(redirect) = &self.redirect {
            described.push(format!(
                "redirect {} to {}{}",
                redirect.regex.as_str(),
                redirect.replacement,
                if redirect.permanent {
                    " (permanent)"
                } else {
                    ""
                }
            ));
        }
        let headers = &self.response_headers;
        for (name, value) in &headers.set {
            let value = String::from_utf8_lossy(value.as_bytes());
            described.push(format!("headers.response.set.{name} {value}"));
        }
        if !headers.remove.is_empty() {
            let names: Vec<&str> = headers.remove.iter().map(HeaderName::as_str).collect();
            described.push(format!("headers.response.remove {}", names.join(",")));
        }
        if headers.security {
            described.push("headers.security".to_owned());
        }
        if let Some(cors) = &self.cors {
            let origins: Vec<String> = cors.allow_origins.iter().map(|o| o.to_string()).collect();
            let text = |value: &HeaderValue| String::from_utf8_lossy(value.as_bytes()).into_owned();
            described.push(format!(
                "cors {} methods {} headers {} credentials {} max_age {}",
                origins.join(","),
                text(&cors.allow_methods),
                cors.allow_headers
                    .as_ref()
                    .map_or("(as asked)".to_owned(), text),
                cors.allow_credentials,
                cors.max_age
                    .map_or("(unset)".to_owned(), |secs| secs.to_string()),
            ));
        }
        if let Some(encodings) = &self.compress {
            let tokens: Vec<&str> = encodings.iter().map(|e| e.token()).collect();
            described.push(format!("compress {}", tokens.join(",")));
        }
        described
    }
}

/// A token bucket per client (or per value of a header): `average`
/// requests per `period` on the whole, up to `burst` at once; past it, `429`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RateLimit {
    pub average: u32,
    pub burst: u32,
    pub period: Duration,
    pub by: RateLimitKey,
}

/// Whose requests share a bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateLimitKey {
    /// The client's address (as `--trusted-proxies` establish it).
    Client,
    /// The value of this request header; requests without it count by
    /// their client's address.
    Header(HeaderName),
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?}, burst {}, by ",
            self.average, self.period, self.burst
        )?;
        match &self.by {
            RateLimitKey::Client => f.write_str("client"),
            RateLimitKey::Header(name) => write!(f, "header:{name}"),
        }
    }
}

/// HTTP Basic authentication (RFC 7617) against htpasswd-style users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BasicAuth {
    /// Those written, then (once its provider has read it) those of
    /// `users_file`.
    pub users: Vec<BasicAuthUser>,
    /// An htpasswd file, read by the provider each time it loads its routes.
    pub users_file: Option<std::path::PathBuf>,
    /// Named in the `WWW-Authenticate` challenge.
    pub realm: String,
    /// The `Authorization` header goes on to the upstream; by default it
    /// is removed, so the password goes no further than dockhand.
    pub forward: bool,
}

#[derive(Clone, PartialEq, Eq)]
pub struct BasicAuthUser {
    pub name: String,
    pub hash: PasswordHash,
}

/// Never shows the hash, even in a debug print.
impl fmt::Debug for BasicAuthUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BasicAuthUser({})", self.name)
    }
}

/// A password hash as htpasswd writes it, checked to be well formed.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$2y$`, `$2b$` or `$2a$` (bcrypt).
    Bcrypt(String),
    /// `$argon2id$v=19$m=...,t=...,p=...$salt$hash` (a PHC string).
    Argon2id(String),
}

/// Forward auth: each request is first asked about at an auth service
/// (Authelia, Authentik, oauth2-proxy); a `2xx` lets it through, anything
/// else is the client's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// The auth service's address, or a name followed through DNS like
    /// any upstream's.
    pub target: UpstreamTarget,
    /// Over TLS (`https://`).
    pub tls: bool,
    /// The `Host` it is asked with: the URL's authority as written.
    pub authority: String,
    /// The URL's path and query.
    pub path: String,
    /// Headers of its `2xx` answer set on the request to the upstream
    /// (`Remote-User`); the client's own are always removed.
    pub response_headers: Vec<HeaderName>,
    /// The client's `X-Forwarded-*` are passed on as it sent them (only
    /// for clients that are trusted proxies themselves).
    pub trust_forward_header: bool,
}

/// The default realm of a `basic_auth` challenge.
const DEFAULT_REALM: &str = "restricted";

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

fn read_rate_limit(written: &mut impl WrittenSettings) -> Option<RateLimit> {
    let count = |text: &str| values::whole_number(text, RATE_LIMIT_COUNTS).map(|n| n as u32);
    let average = read_text(written, "rate_limit.average", count);
    let burst = read_text(written, "rate_limit.burst", count);
    let period = read_text(written, "rate_limit.period", |text| {
        let period = parse_duration(text)?;
        match RATE_LIMIT_PERIODS.contains(&period) {
            true => Ok(period),
            false => Err(format!("`{text}` is outside 1ms..24h")),
        }
    });
    let by = read_text(written, "rate_limit.by", rate_limit_key);
    let others_written = ["rate_limit.burst", "rate_limit.period", "rate_limit.by"]
        .iter()
        .any(|key| written.is_written(key));
    let Some(average) = average else {
        if others_written && !written.is_written("rate_limit.average") {
            let reason =
                "a rate limit needs rate_limit.average, the requests allowed per period".to_owned();
            written.refuse("rate_limit.average", reason);
        }
        return None;
    };
    Some(RateLimit {
        average,
        // As many at once as in a period, unless told otherwise.
        burst: burst.unwrap_or(average),
        period: period.unwrap_or(Duration::from_secs(1)),
        by: by.unwrap_or(RateLimitKey::Client),
    })
}

/// `client`, or `header:<Header-Name>`.
pub fn rate_limit_key(text: &str) -> Result<RateLimitKey, String> {
    if text == "client" {
        return Ok(RateLimitKey::Client);
    }
    let name = text
        .strip_prefix("header:")
        .ok_or_else(|| format!("`{text}`: expected `client` or `header:<Header-Name>`"))?;
    header_name(name.trim()).map(RateLimitKey::Header)
}

fn read_basic_auth(written: &mut impl WrittenSettings) -> Option<BasicAuth> {
    let realm = read_text(written, "basic_auth.realm", realm);
    let forward = written.boolean("basic_auth.forward");
    let users_file = read_text(written, "basic_auth.users_file", users_file);
    let items = written.list("basic_auth.users");
    if items.is_none() && !written.is_written("basic_auth.users_file") {
        if realm.is_some() || forward.is_some() {
            let reason =
                "basic auth needs basic_auth.users (user:hash pairs) or basic_auth.users_file"
                    .to_owned();
            written.refuse("basic_auth.users", reason);
        }
        return None;
    }
    let users: Result<Vec<BasicAuthUser>, String> = rejoin_hashes(items.unwrap_or_default())
        .iter()
        .map(|item| user(item))
        .collect();
    let users = users
        .map_err(|reason| written.refuse("basic_auth.users", reason))
        .ok()?;
    if users.is_empty() && users_file.is_none() {
        // Empty as written, or a users file refused (reported already).
        if !written.is_written("basic_auth.users_file") {
            written.refuse("basic_auth.users", "is empty".to_owned());
        }
        return None;
    }
    Some(BasicAuth {
        users,
        users_file,
        realm: realm.unwrap_or_else(|| DEFAULT_REALM.to_owned()),
        forward: forward.unwrap_or(false),
    })
}

/// Puts back together what a comma-separated list split inside a hash:
/// an argon2 hash has commas in its parameters (`m=19456,t=2,p=1`), and
/// every user entry has a `:`, which its pieces do not.
fn rejoin_hashes(items: Vec<String>) -> Vec<String> {
    let mut users: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        match users.last_mut() {
            Some(previous) if !item.contains(':') => {
                previous.push(',');
                previous.push_str(item.trim());
            }
            _ => users.push(item.trim().to_owned()),
        }
    }
    users
}

/// `user:hash`, the hash bcrypt or argon2id.
pub fn user(text: &str) -> Result<BasicAuthUser, String> {
    let (name, hash) = text
        .split_once(':')
        .filter(|(name, _)| !name.is_empty())
        .ok_or_else(|| "expected user:hash pairs (htpasswd lines)".to_owned())?;
    Ok(BasicAuthUser {
        name: name.to_owned(),
        hash: password_hash(hash).map_err(|reason| format!("user `{name}`: {reason}"))?,
    })
}

/// A bcrypt or argon2id hash, checked to be one (never shown in a reason).
pub fn password_hash(text: &str) -> Result<PasswordHash, String> {
    if text.starts_with("$argon2") {
        let parsed = argon2::PasswordHash::new(text)
            .map_err(|_| "the argon2 hash is malformed".to_owned())?;
        return match parsed.algorithm == argon2::ARGON2ID_IDENT {
            true => Ok(PasswordHash::Argon2id(text.to_owned())),
            false => Err("only argon2id is taken of the argon2 hashes".to_owned()),
        };
    }
    match ["$2y$", "$2b$", "$2a$"].iter().any(|start| text.starts_with(start)) {
        true => text
            .parse::<bcrypt::HashParts>()
            .map(|_| PasswordHash::Bcrypt(text.to_owned()))
            .map_err(|_| "the bcrypt hash is malformed".to_owned()),
        false => Err(
            "the hash is neither bcrypt ($2y$) nor argon2id ($argon2id$): htpasswd -B makes bcrypt ones"
                .to_owned(),
        ),
    }
}

/// An absolute path: the file is read where dockhand runs (in its
/// container, a mounted file).
fn users_file(text: &str) -> Result<std::path::PathBuf, String> {
    let path = std::path::PathBuf::from(text);
    match path.is_absolute() {
        true => Ok(path),
        false => Err(format!("`{text}` is not an absolute path")),
    }
}

/// The users of an htpasswd file's text: one `user:hash` per line; empty
/// lines and `#` comments skipped. A bad line is refused with its number.
pub fn users_of_file(text: &str) -> Result<Vec<BasicAuthUser>, String> {
    text.lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.trim()))
        .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
        .map(|(number, line)| user(line).map_err(|reason| format!("line {number}: {reason}")))
        .collect()
}

/// A realm goes into a quoted string: no quotes, backslashes or controls.
fn realm(text: &str) -> Result<String, String> {
    let fits = !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() && c != '"' && c != '\\');
    match fits {
        true => Ok(text.to_owned()),
        false => Err(format!(
            "`{text}` can't be a realm: write it without quotes, backslashes or control characters"
        )),
    }
}

fn read_forward_auth(written: &mut impl WrittenSettings) -> Option<ForwardAuth> {
    let address = read_text(written, "forward_auth.address", forward_auth_address);
    let response_headers = read_list(written, "forward_auth.response_headers", header_name);
    let trust = written.boolean("forward_auth.trust_forward_header");
    let Some(mut auth) = address else {
        let others = response_headers.is_some() || trust.is_some();
        if others && !written.is_written("forward_auth.address") {
            let reason =
                "forward auth needs forward_auth.address, the auth service's URL".to_owned();
            written.refuse("forward_auth.address", reason);
        }
        return None;
    };
    auth.response_headers = response_headers.unwrap_or_default();
    auth.trust_forward_header = trust.unwrap_or(false);
    Some(auth)
}

/// `http://host[:port][/path]` or `https://...`: the host an address or a
/// name, the port the scheme's unless written.
pub fn forward_auth_address(text: &str) -> Result<ForwardAuth, String> {
    let not_a_url = || format!("`{text}` is not an http:// or https:// URL");
    let uri: http::Uri = text.parse().map_err(|_| not_a_url())?;
    let tls = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(not_a_url()),
    };
    let authority = uri.authority().ok_or_else(not_a_url)?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "`{text}`: credentials in the URL are not sent; leave them out"
        ));
    }
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let target = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => UpstreamTarget::Address(std::net::SocketAddr::new(ip, port)),
        Err(_) => values::upstream_target(&format!("{host}:{port}"))?,
    };
    Ok(ForwardAuth {
        target,
        tls,
        authority: authority.as_str().to_owned(),
        path: uri
            .path_and_query()
            .map_or("/".to_owned(), |path| path.as_str().to_owned()),
        response_headers: Vec::new(),
        trust_forward_header: false,
    })
}

fn read_redirect(written: &mut impl WrittenSettings) -> Option<Redirect> {
    let regex = read_text(written, "redirect.regex", values::rewrite_pattern);
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
        match values::header(&name, value.trim()) {
            Ok(header) => set.push(header),
            Err(reason) => written.refuse(&format!("{RESPONSE_HEADER_SET_START}{name}"), reason),
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

/// Methods a preflight allows when `cors.allow_methods` is not written:
/// the CORS-safelisted ones.
const DEFAULT_CORS_METHODS: &str = "GET, HEAD, POST";

fn read_cors(written: &mut impl WrittenSettings) -> Option<Cors> {
    let origins = read_list(written, "cors.allow_origins", origin_pattern);
    let methods = read_list(written, "cors.allow_methods", |text| {
        Method::from_bytes(text.as_bytes()).map_err(|_| format!("`{text}` is not an HTTP method"))
    });
    let headers = read_list(written, "cors.allow_headers", header_name);
    let credentials = written.boolean("cors.allow_credentials");
    let max_age = read_text(written, "cors.max_age", |text| {
        values::whole_number(text, CORS_MAX_AGE_SECS)
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

/// `*`, `*.example.com`, or an origin: `scheme://host[:port]`.
pub fn origin_pattern(text: &str) -> Result<OriginPattern, String> {
    if text == "*" {
        return Ok(OriginPattern::Any);
    }
    if let Some(suffix) = text.strip_prefix("*.") {
        values::host_pattern(suffix).map_err(|reason| format!("`{text}`: {reason}"))?;
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

#[cfg(test)]
#[path = "middleware_tests.rs"]
mod tests;
