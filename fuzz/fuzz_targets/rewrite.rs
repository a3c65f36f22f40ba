//! Rewrites on arbitrary rules and request targets. Input: fields separated
//! by newlines: `prefix` or `regex`, then `strip_prefix`, `add_prefix` (an
//! empty field: not set) or `match`, `replace`, then the request target.
//! Rules go through the same validation as configuration. A rewrite never
//! panics; what it gives is a request target that reads back as itself, its
//! path starts with `/` and holds no query or fragment, the query is carried
//! over unchanged, and a prefix rewrite leaves paths outside `strip_prefix`
//! alone.

#![no_main]

use std::str::FromStr;

use dockhand::config::{values, Rewrite};
use dockhand::proxy::rewrite::{rewrite_path, RewriteError};
use http::uri::PathAndQuery;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let fields: Vec<&str> = text.splitn(4, '\n').collect();
    let [kind, first, second, target] = fields[..] else {
        return;
    };
    let optional = |field: &str| (!field.is_empty()).then(|| values::rewrite_prefix(field));
    let rewrite = match kind {
        "prefix" => match (optional(first).transpose(), optional(second).transpose()) {
            (Ok(strip), Ok(add)) => Rewrite::Prefix { strip, add },
            _ => return,
        },
        "regex" => match values::rewrite_pattern(first) {
            Ok(pattern) => Rewrite::Regex {
                pattern,
                replace: second.to_owned(),
            },
            Err(_) => return,
        },
        _ => return,
    };
    // What the proxy rewrites: an origin-form request target that parsed.
    if !target.starts_with('/') {
        return;
    }
    let Ok(original) = PathAndQuery::from_str(target) else {
        return;
    };
    let rewritten = match rewrite_path(&rewrite, &original) {
        Ok(rewritten) => rewritten,
        Err(RewriteError::TooLong { length }) => {
            assert!(length > u16::MAX as usize - 2, "refused at {length} bytes");
            return;
        }
    };
    let reread = PathAndQuery::from_str(rewritten.as_str())
        .unwrap_or_else(|error| panic!("{rewritten} does not read back: {error}"));
    assert_eq!(reread, rewritten);
    let path = rewritten.path();
    assert!(path.starts_with('/'), "{rewritten}");
    assert!(!path.contains(['?', '#']), "{rewritten}");
    assert_eq!(
        rewritten.query(),
        original.query(),
        "{original} -> {rewritten}"
    );
    if let Rewrite::Prefix {
        strip: Some(strip), ..
    } = &rewrite
    {
        let strip = strip.trim_end_matches('/');
        let inside = original
            .path()
            .strip_prefix(strip)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if !inside {
            assert_eq!(rewritten, original, "outside {strip}");
        }
    }
});
