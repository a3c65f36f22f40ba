//! The path an upstream receives when its location has a rewrite: a prefix
//! stripped and/or added, or a regular expression's first match replaced.
//! Only the path changes; the query string is carried over as it was. Patterns
//! arrive compiled (`config::values::rewrite_pattern`, with its 1 MB limit), so
//! nothing here compiles or parses configuration; choosing the location, and
//! logging the path the client asked for, are the caller's.
//!
//! Decisions:
//! - Paths are compared and rewritten as sent, percent-encoding included:
//!   `/api%2Fx` does not start with the segment `/api`, and is never decoded.
//! - `strip_prefix` ignores a trailing `/` of its own (`/api/` strips like
//!   `/api`); stripping the whole path leaves `/`.
//! - `add_prefix` is joined with exactly one `/`: `/v2` or `/v2/` before
//!   `/users` gives `/v2/users`, and before `/` gives `/v2/` (the trailing
//!   slash of the path is kept, as Traefik's `AddPrefix` does).
//! - A regex result that does not start with `/` (such as the empty string)
//!   gets one. Characters a path can't carry, which only the configured
//!   `replace` or `add_prefix` text can bring, are percent-encoded, so a `?`
//!   or `#` there never starts a query or a fragment.

use std::fmt::Write as _;

use http::uri::PathAndQuery;

use crate::config::Rewrite;

/// A rewritten path that `http` can't carry.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RewriteError {
    /// The rewrite made the path and query longer than a URI may be (64 KiB).
    #[error("the rewritten path is {length} bytes, over the 64 KiB a request target may have")]
    TooLong { length: usize },
}

/// The path and query the upstream receives for a request to `original`.
/// When nothing changes (no match, a prefix that is not there) this is a
/// cheap clone of `original`; otherwise the new path is built once.
pub fn rewrite_path(
    rewrite: &Rewrite,
    original: &PathAndQuery,
) -> Result<PathAndQuery, RewriteError> {
    let path = original.path();
    let query_len = original.query().map_or(0, |query| query.len() + 1);
    let mut rewritten = String::new();
    let changed = match rewrite {
        Rewrite::Prefix { strip, add } => rewrite_prefix(
            path,
            strip.as_deref(),
            add.as_deref(),
            query_len,
            &mut rewritten,
        ),
        Rewrite::Regex { pattern, replace } => {
            rewrite_regex(path, pattern, replace, query_len, &mut rewritten)
        }
    };
    if !changed {
        return Ok(original.clone());
    }
    if !rewritten.starts_with('/') {
        rewritten.insert(0, '/');
    }
    if let Some(escaped) = escape_for_path(&rewritten) {
        rewritten = escaped;
    }
    if let Some(query) = original.query() {
        rewritten.push('?');
        rewritten.push_str(query);
    }
    // No-op for prefixes, sized exactly; see `rewrite_prefix`.
    rewritten.shrink_to_fit();
    let length = rewritten.len();
    // Every byte is a path character now, so only the length can be refused.
    PathAndQuery::try_from(rewritten).map_err(|_| RewriteError::TooLong { length })
}

/// Writes the stripped and prefixed path into `out`, with room for
/// `query_len` more bytes; false when the path stays as it is.
fn rewrite_prefix(
    path: &str,
    strip: Option<&str>,
    add: Option<&str>,
    query_len: usize,
    out: &mut String,
) -> bool {
    let rest = match strip.map(|strip| strip_segments(path, strip)) {
        Some(Some(rest)) => rest,
        // A path outside `strip_prefix` is not for this rewrite: add nothing either.
        Some(None) => return false,
        None => path,
    };
    let add = add.map_or("", |add| add.trim_end_matches('/'));
    if add.is_empty() && rest.len() == path.len() {
        return false;
    }
    let rest = if rest.is_empty() { "/" } else { rest };
    // Exactly the final length: `bytes` turns a full `String` into its
    // buffer without allocating a shared header for the spare capacity.
    out.reserve_exact(add.len() + rest.len() + query_len);
    out.push_str(add);
    out.push_str(rest);
    true
}

/// `path` without `prefix`, when `prefix` ends at a segment boundary of it:
/// empty or starting with `/`.
fn strip_segments<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    let rest = path.strip_prefix(prefix.trim_end_matches('/'))?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Writes `path` with its first match of `pattern` replaced into `out`, with
/// room for `query_len` more bytes; false when nothing matches.
fn rewrite_regex(
    path: &str,
    pattern: &regex::Regex,
    replace: &str,
    query_len: usize,
    out: &mut String,
) -> bool {
    let Some(captures) = pattern.captures(path) else {
        return false;
    };
    let matched = captures.get(0).expect("group 0 is the whole match");
    out.reserve(path.len() + replace.len() + 1 + query_len);
    out.push_str(&path[..matched.start()]);
    captures.expand(replace, out);
    out.push_str(&path[matched.end()..]);
    true
}

/// `path` with every byte a URI path can't hold percent-encoded, or `None`
/// when it holds none (the usual case, with no copy).
fn escape_for_path(path: &str) -> Option<String> {
    if path.bytes().all(is_path_byte) {
        return None;
    }
    let mut escaped = String::with_capacity(path.len() + 16);
    for (index, character) in path.char_indices() {
        let bytes = &path.as_bytes()[index..index + character.len_utf8()];
        if bytes.iter().copied().all(is_path_byte) {
            escaped.push(character);
        } else {
            for byte in bytes {
                write!(escaped, "%{byte:02X}").expect("writing to a String can't fail");
            }
        }
    }
    Some(escaped)
}

/// The bytes `http` accepts in a path as they are (`?` and `#` excluded, as
/// they would end it). Bytes above 0x7F are UTF-8, which `http` accepts.
fn is_path_byte(byte: u8) -> bool {
    matches!(
        byte,
        0x21 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7A | 0x7C | 0x7E | b'"' | b'{' | b'}' | 0x80..=0xFF
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::values::rewrite_pattern;

    fn prefix(strip: Option<&str>, add: Option<&str>) -> Rewrite {
        Rewrite::Prefix {
            strip: strip.map(str::to_owned),
            add: add.map(str::to_owned),
        }
    }

    fn regex(pattern: &str, replace: &str) -> Rewrite {
        Rewrite::Regex {
            pattern: rewrite_pattern(pattern).expect("a valid test pattern"),
            replace: replace.to_owned(),
        }
    }

    fn rewritten(rewrite: &Rewrite, original: &str) -> String {
        let original = PathAndQuery::try_from(original).expect("a valid test path");
        rewrite_path(rewrite, &original)
            .expect("rewritten")
            .as_str()
            .to_owned()
    }

    #[test]
    fn prefix_rewrites() {
        let cases: &[(Option<&str>, Option<&str>, &str, &str)] = &[
            // The examples of the documentation.
            (Some("/api"), None, "/api/users?page=2", "/users?page=2"),
            (Some("/legacy"), Some("/v2"), "/legacy/orders", "/v2/orders"),
            // Only at a segment boundary.
            (Some("/api"), None, "/api", "/"),
            (Some("/api"), None, "/api/", "/"),
            (Some("/api"), None, "/apis", "/apis"),
            (Some("/api"), None, "/apis/users", "/apis/users"),
            (Some("/api"), None, "/other/api/x", "/other/api/x"),
            (Some("/api/"), None, "/api/users", "/users"),
            (Some("/api/v1"), None, "/api/v1/users?x=1", "/users?x=1"),
            // Stripping everything leaves `/`, with the query kept.
            (Some("/api"), None, "/api?q=1", "/?q=1"),
            (Some("/"), None, "/users", "/users"),
            // A path outside strip_prefix is sent unchanged, without add_prefix.
            (Some("/legacy"), Some("/v2"), "/orders", "/orders"),
            // Joined with exactly one `/`.
            (None, Some("/v2"), "/users", "/v2/users"),
            (None, Some("/v2/"), "/users", "/v2/users"),
            (None, Some("/v2"), "/", "/v2/"),
            (None, Some("/v2"), "/users/", "/v2/users/"),
            (None, Some("/"), "/users", "/users"),
            (Some("/legacy"), Some("/v2"), "/legacy", "/v2/"),
            (Some("/legacy"), Some("/v2"), "/legacy?a=b&c", "/v2/?a=b&c"),
            // Percent-encoding is neither decoded nor re-encoded.
            (
                Some("/api"),
                None,
                "/api/a%20b%2Fc?q=%41",
                "/a%20b%2Fc?q=%41",
            ),
            (Some("/api"), None, "/api%2Fusers", "/api%2Fusers"),
            (Some("/caf%C3%A9"), None, "/caf%C3%A9/menu", "/menu"),
            // Characters a path can't hold, from the configuration, are encoded.
            (None, Some("/a b"), "/x", "/a%20b/x"),
            (None, Some("/a?b#c"), "/x?q", "/a%3Fb%23c/x?q"),
            (None, Some("/café"), "/x", "/café/x"),
        ];
        for (strip, add, original, expected) in cases {
            let rewrite = prefix(*strip, *add);
            assert_eq!(
                rewritten(&rewrite, original),
                *expected,
                "strip {strip:?}, add {add:?}, path {original}"
            );
        }
    }

    #[test]
    fn regex_rewrites() {
        let cases: &[(&str, &str, &str, &str)] = &[
            // The example of the documentation.
            (
                r"^/users/(\d+)/profile$",
                "/profiles/$1",
                "/users/42/profile?tab=posts",
                "/profiles/42?tab=posts",
            ),
            // Named groups, as `${name}` (`$${name}` in HCL is this once read).
            (
                r"^/users/(?P<id>\d+)/(?P<page>\w+)$",
                "/u/${id}/${page}",
                "/users/7/posts",
                "/u/7/posts",
            ),
            (
                r"^/items/(?P<id>\d+)$",
                "/v2/items/${id}.json",
                "/items/9",
                "/v2/items/9.json",
            ),
            // Several numbered groups, and `$$` for a literal dollar.
            (r"^/(\w+)/(\w+)$", "/$2/$1/$$", "/a/b", "/b/a/$"),
            // No match: sent unchanged, query included.
            (
                r"^/users/(\d+)/profile$",
                "/profiles/$1",
                "/users/abc/profile?x=1",
                "/users/abc/profile?x=1",
            ),
            // The query is never matched.
            (r"page=2", "page=3", "/list?page=2", "/list?page=2"),
            (r"^/list$", "/items", "/list?page=2", "/items?page=2"),
            // Only the first match is replaced; unanchored keeps the rest.
            (r"/old", "/new", "/old/old/x", "/new/old/x"),
            (r"o", "0", "/foo", "/f0o"),
            // A result without a leading `/` gets one.
            (r"^/users", "", "/users", "/"),
            (r"^/users/", "", "/users/42", "/42"),
            (r"^/(.*)$", "$1", "/a/b?q", "/a/b?q"),
            // A group that did not take part is empty.
            (r"^/a(/b)?$", "/x$1", "/a", "/x"),
            // Percent-encoded paths are matched and kept as sent.
            (
                r"^/files/(.+)$",
                "/store/$1",
                "/files/a%20b%2Fc",
                "/store/a%20b%2Fc",
            ),
            // `replace` text a path can't hold is encoded, never a query.
            (r"^/x$", "/a b?c", "/x?q=1", "/a%20b%3Fc?q=1"),
        ];
        for (pattern, replace, original, expected) in cases {
            let rewrite = regex(pattern, replace);
            assert_eq!(
                rewritten(&rewrite, original),
                *expected,
                "match {pattern}, replace {replace}, path {original}"
            );
        }
    }

    #[test]
    fn an_unchanged_path_is_the_original() {
        let original = PathAndQuery::from_static("/users/abc?x=1");
        let rewrite = regex(r"^/users/(\d+)$", "/u/$1");
        let result = rewrite_path(&rewrite, &original).expect("unchanged");
        assert_eq!(result.as_str().as_ptr(), original.as_str().as_ptr());
    }

    #[test]
    fn a_path_grown_past_the_uri_limit_is_an_error_not_a_panic() {
        let long = format!("/{}", "a".repeat(40_000));
        let original = PathAndQuery::try_from(long.as_str()).expect("a valid path");
        let rewrite = regex(r"^/(.*)$", "/$1/$1");
        assert_eq!(
            rewrite_path(&rewrite, &original),
            Err(RewriteError::TooLong { length: 80_002 })
        );
    }

    #[test]
    fn every_byte_escapes_to_a_valid_path() {
        for byte in 0u8..=0x7F {
            let text = format!("/x{}y", byte as char);
            let escaped = escape_for_path(&text).unwrap_or_else(|| text.clone());
            let parsed = PathAndQuery::try_from(escaped.as_str())
                .unwrap_or_else(|_| panic!("byte {byte:#04x} escaped to {escaped:?}"));
            assert_eq!(parsed.path(), escaped, "byte {byte:#04x}");
            assert_eq!(parsed.query(), None, "byte {byte:#04x}");
        }
    }
}
