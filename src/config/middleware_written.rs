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
        // Only what is set: the file refuses an empty list.
        let mut response = Map::new();
        if !headers.set.is_empty() {
            let set: Map<String, Value> = (headers.set.iter())
                .map(|(name, value)| (name.to_string(), text(value).into()))
                .collect();
            response.insert("set".into(), set.into());
        }
        if !headers.remove.is_empty() {
            let remove: Vec<&str> = headers.remove.iter().map(|name| name.as_str()).collect();
            response.insert("remove".into(), remove.into());
        }
        let mut written_headers = json!({"security": headers.security});
        if !response.is_empty() {
            written_headers["response"] = response.into();
        }
        written.insert("headers".into(), written_headers);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;

    /// The middlewares of the routes file whose one location has `written`.
    fn parsed(written: &Value) -> Middlewares {
        let mut location = written.clone();
        location["upstream"] = json!({"127.0.0.1:9000": {}});
        let file = json!({"host": {"a.test": {"location": {"/": location}}}});
        let hosts = parse_routes_file(&file.to_string()).unwrap_or_else(|e| panic!("{e:?}"));
        hosts.hosts[0].locations[0].middlewares.clone()
    }

    #[test]
    fn what_is_written_reads_back_the_same() {
        let hash = "alice:$2y$05$abcdefghijklmnopqrstuOabcdefghijklmnopqrstuvwxyz12345";
        let every_key = json!({
            "ip_allow": ["10.0.0.0/8", "192.0.2.7"],
            "rate_limit": {"average": 5, "burst": 10, "period": "1m", "by": "header:X-Api-Key"},
            "basic_auth": {"users": [hash], "users_file": "/etc/htpasswd", "realm": "Staff"},
            "forward_auth": {"address": "http://auth.test:9091/verify?rd=x",
                             "response_headers": ["Remote-User"], "trust_forward_header": true},
            "max_body_size": "10m",
            "redirect": {"regex": "^http://www\\.(.*)", "replacement": "http://$1"},
            "headers": {"response": {"set": {"X-Frame-Options": "DENY"}, "remove": ["Server"]},
                        "security": true},
            "cors": {"allow_origins": ["https://app.test", "*.example.org"],
                     "allow_methods": ["GET", "PUT"], "allow_headers": ["X-Token"],
                     "allow_credentials": true, "max_age": 600},
            "compress": ["gzip", "br"]
        });
        let cases = [
            every_key,
            // Header rules with one of their lists only: no empty list is
            // written, which the file would refuse.
            json!({"headers": {"response": {"set": {"X-A": "1"}}}}),
            json!({"headers": {"response": {"remove": ["Server"]}}}),
            json!({"headers": {"security": true}}),
            json!({}),
        ];
        for written in cases {
            let middlewares = parsed(&written);
            let again = parsed(&middlewares_json(&middlewares, Hashes::Written));
            assert_eq!(again, middlewares, "{written}");
        }
    }

    #[test]
    fn a_view_names_users_and_never_shows_a_hash() {
        let hash = "$2y$05$abcdefghijklmnopqrstuOabcdefghijklmnopqrstuvwxyz12345";
        let users = json!({"basic_auth": {"users": [format!("alice:{hash}")]}});
        let view = middlewares_json(&parsed(&users), Hashes::Hidden);
        assert_eq!(view["basic_auth"]["users"], json!(["alice"]));
        assert!(!view.to_string().contains(hash), "{view}");
    }
}
