//! Header names as `http` names, without an allocation for the custom names
//! that come on most requests. The `http` crate makes a name it does not
//! know (`X-Request-Id`, `Sec-Fetch-Mode`) by copying it into an allocation
//! of its own, and every clone of it (the request's map copied for its
//! upstream) may allocate again; the names it knows cost nothing. So the
//! worker thread keeps the names it has met that start with `x-` or `sec-`
//! (the prefixes of nearly every custom name browsers, clients and
//! upstreams send), and hands out clones of them, which share their bytes.
//! Other names are made as the `http` crate makes them.
//!
//! A thread keeps at most `MOST_KEPT` names, none longer than
//! `LONGEST_KEPT` bytes; when it has that many, it forgets them all and
//! starts again, so that a client sending new names all the time costs it
//! an allocation per name, as without the cache, and at most some tens of
//! KiB.

use std::cell::RefCell;
use std::collections::HashMap;

use http::header::{HeaderName, InvalidHeaderName};

/// The most names a thread keeps.
const MOST_KEPT: usize = 256;

/// The longest name kept (custom names in use are far shorter).
const LONGEST_KEPT: usize = 40;

thread_local! {
    /// The names met, by their bytes as they came (in their case).
    static KEPT: RefCell<HashMap<Box<[u8]>, HeaderName>> = RefCell::new(HashMap::new());
}

/// `bytes` as a header name: a kept one, or a new one (then kept, if it is
/// of the kind kept).
pub fn header_name(bytes: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    if bytes.len() > LONGEST_KEPT || !usually_custom(bytes) {
        return HeaderName::from_bytes(bytes);
    }
    let kept = KEPT.try_with(|kept| kept.borrow().get(bytes).cloned());
    if let Ok(Some(name)) = kept {
        return Ok(name);
    }
    let name = HeaderName::from_bytes(bytes)?;
    let _ = KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.len() >= MOST_KEPT {
            kept.clear();
        }
        kept.insert(bytes.into(), name.clone());
    });
    Ok(name)
}

/// Whether a name starts with `x-` or `sec-`, in any case.
fn usually_custom(bytes: &[u8]) -> bool {
    let starts_with = |prefix: &[u8]| {
        bytes
            .get(..prefix.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
    };
    starts_with(b"x-") || starts_with(b"sec-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept_count() -> usize {
        KEPT.with_borrow(HashMap::len)
    }

    #[test]
    fn a_custom_name_is_the_same_name_whatever_its_case() {
        let name = header_name(b"X-Request-Id").unwrap();
        assert_eq!(name.as_str(), "x-request-id");
        assert_eq!(header_name(b"x-request-id").unwrap(), name);
        assert_eq!(
            header_name(b"Sec-Fetch-Mode").unwrap().as_str(),
            "sec-fetch-mode"
        );
    }

    #[test]
    fn a_name_met_again_is_the_kept_one() {
        let first = header_name(b"X-Trace").unwrap();
        let again = header_name(b"X-Trace").unwrap();
        // A clone of the kept name shares its bytes.
        assert_eq!(first.as_str().as_ptr(), again.as_str().as_ptr());
        assert_eq!(kept_count(), 1);
    }

    #[test]
    fn known_and_unprefixed_names_are_not_kept() {
        assert_eq!(
            header_name(b"Content-Type").unwrap(),
            http::header::CONTENT_TYPE
        );
        assert_eq!(header_name(b"Priority").unwrap().as_str(), "priority");
        assert_eq!(kept_count(), 0);
    }

    #[test]
    fn a_long_name_is_not_kept() {
        let long = format!("x-{}", "a".repeat(LONGEST_KEPT));
        assert_eq!(header_name(long.as_bytes()).unwrap().as_str(), long);
        assert_eq!(kept_count(), 0);
    }

    #[test]
    fn invalid_names_are_refused_and_not_kept() {
        assert!(header_name(b"X-Bad Name").is_err());
        assert!(header_name(b"").is_err());
        assert!(header_name(b"x-\xff").is_err());
        assert_eq!(kept_count(), 0);
    }

    #[test]
    fn a_full_thread_forgets_its_names_and_keeps_no_more_than_the_most() {
        for n in 0..MOST_KEPT * 2 + 3 {
            header_name(format!("x-name-{n}").as_bytes()).unwrap();
            assert!(kept_count() <= MOST_KEPT);
        }
        assert_eq!(kept_count(), 3);
    }
}
