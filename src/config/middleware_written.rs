//! A location's middlewares written back in the routes file's shape: what
//! the admin API shows of each location (with no password hash), and what
//! the routes-file fuzz target writes to read again (with them). One writer,
//! so the view and the file cannot drift apart.

use http::HeaderValue;
use serde_json::{json, Map, Value};

use super::middleware::{Middlewares, PasswordHash, RateLimitKey};

/// Whether `basic_auth.users` is written with its hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hashes {
    /// `user:hash`, as the routes file takes them.
    Written,
    /// User names only: for views, where a hash must never be shown.
    Hidden,
}

/// `middlewares` as routes-file keys, only those set.
pub fn middlewares_json(middlewares: &Middlewares, hashes: Hashes) -> Value {
    let mut written = Map::new();
    if let Some(networks) = &middlewares.ip_allow {
        let networks: Vec<String> = networks.iter().map(ToString::to_string).collect();
        written.insert("ip_allow".into(), networks.into());
    }
    if let Some(limit) = &middlewares.rate_limit {
        let by = match &limit.by {
            RateLimitKey::Client => "client".to_owned(),
            RateLimitKey::Header(name) => format!("header:{name}"),
        };
        written.insert(
            "rate_limit".into(),
            json!({"average": limit.average, "burst": limit.burst,
                   "period": format!("{}ms", limit.period.as_millis()), "by": by}),
        );
    }
    if let Some(auth) = &middlewares.basic_auth {
        let users: Vec<String> = (auth.users.iter())
            .map(|user| match (hashes, &user.hash) {
                (Hashes::Hidden, _) => user.name.clone(),
                (Hashes::Written, PasswordHash::Bcrypt(hash) | PasswordHash::Argon2id(hash)) => {
                    format!("{}:{hash}", user.name)
                }
            })
            .collect();
        let mut basic_auth = json!({"users": users, "realm": auth.realm, "forward": auth.forward});
        if let Some(file) = &auth.users_file {
            basic_auth["users_file"] = json!(file);
        }
        written.insert("basic_auth".into(), basic_auth);
    }
    if let Some(auth) = &middlewares.forward_auth {
        let scheme = if auth.tls { "https" } else { "http" };
        let copied: Vec<&str> = auth
            .response_headers
            .iter()
            .map(|name| name.as_str())
            .collect();
        written.insert(
            "forward_auth".into(),
            json!({"address": format!("{scheme}://{}{}", auth.authority, auth.path),
                   "response_headers": copied,
                   "trust_forward_header": auth.trust_forward_header}),
        );
    }
    if let Some(size) = middlewares.max_body_size {
        written.insert("max_body_size".into(), size.into());
    }
    if let Some(redirect) = &middlewares.redirect {
        written.insert(
            "redirect".into(),
            json!({"regex": redirect.regex.as_str(), "replacement": redirect.replacement,
                   "permanent": redirect.permanent}),
        );
    }
    let headers = &middlewares.response_headers;
    if !headers.is_empty() {
        let set: Map<String, Value> = (headers.set.iter())
            .map(|(name, value)| (name.to_string(), text(value).into()))
            .collect();
        let remove: Vec<&str> = headers.remove.iter().map(|name| name.as_str()).collect();
        written.insert(
            "headers".into(),
            json!({"response": {"set": set, "remove": remove}, "security": headers.security}),
        );
    }
    if let Some(cors) = &middlewares.cors {
        let origins: Vec<String> = cors.allow_origins.iter().map(ToString::to_string).collect();
        let mut written_cors = json!({"allow_origins": origins,
            "allow_methods": list(&cors.allow_methods),
            "allow_credentials": cors.allow_credentials});
        if let Some(allowed) = &cors.allow_headers {
            written_cors["allow_headers"] = list(allowed).into();
        }
        if let Some(max_age) = cors.max_age {
            written_cors["max_age"] = max_age.into();
        }
        written.insert("cors".into(), written_cors);
    }
    if let Some(encodings) = &middlewares.compress {
        let tokens: Vec<&str> = encodings.iter().map(|encoding| encoding.token()).collect();
        written.insert("compress".into(), tokens.into());
    }
    Value::Object(written)
}

fn text(value: &HeaderValue) -> String {
    String::from_utf8_lossy(value.as_bytes()).into_owned()
}

/// A header value that joins a list with `, ` (as dockhand writes one),
/// split back into the list's items.
fn list(value: &HeaderValue) -> Vec<String> {
    text(value).split(", ").map(str::to_owned).collect()
}
