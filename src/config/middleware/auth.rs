//! `basic_auth` (users as htpasswd lines, bcrypt or argon2id, and a users
//! file) and `forward_auth` (an auth service's URL) as settings.

use std::fmt;

use http::HeaderName;

use super::{header_name, read_list, read_text, scalars, WrittenSettings};
use crate::config::names::UpstreamTarget;

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

pub(super) fn read_basic_auth(written: &mut impl WrittenSettings) -> Option<BasicAuth> {
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
pub(super) fn rejoin_hashes(items: Vec<String>) -> Vec<String> {
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

pub(super) fn read_forward_auth(written: &mut impl WrittenSettings) -> Option<ForwardAuth> {
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
        Err(_) => scalars::upstream_target(&format!("{host}:{port}"))?,
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
