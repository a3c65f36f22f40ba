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
//!
//! Making a name costs more than the rest of putting its field in a map
//! (its bytes lowered and matched against the known names), and the heads
//! one worker reads name the same fields in the same order, request after
//! request: an upstream's responses always, a client's requests nearly so.
//! So a thread also keeps, for each of the first `POSITIONS` fields of its
//! request heads and of its response heads, the name met there last
//! (`RecentNames`): the same bytes at the same place are the same name
//! again, for the cost of comparing them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::thread::LocalKey;

use http::header::{self, HeaderName, InvalidHeaderName};

/// The most names a thread keeps.
const MOST_KEPT: usize = 256;

/// The longest name kept (custom names in use are far shorter).
const LONGEST_KEPT: usize = 40;

thread_local! {
    /// The names met, by their bytes as they came (in their case).
    static KEPT: RefCell<HashMap<Box<[u8]>, HeaderName>> = RefCell::new(HashMap::new());
}

/// The first fields of a head whose names are kept by their place.
const POSITIONS: usize = 16;

/// The longest name kept by its place (the usual ones are far shorter).
const LONGEST_RECENT: usize = 32;

thread_local! {
    /// The names met last at each place of this thread's request heads.
    pub static REQUEST_NAMES: RefCell<RecentNames> = const { RefCell::new(RecentNames::new()) };
    /// The same for its upstreams' response heads.
    pub static RESPONSE_NAMES: RefCell<RecentNames> = const { RefCell::new(RecentNames::new()) };
}

/// The name met last at each of the first `POSITIONS` places of a kind of
/// head, with the bytes (in their case) it was made from.
pub struct RecentNames([Recent; POSITIONS]);

struct Recent {
    /// How many of `bytes` are the name's; 0 for a place not met yet (no
    /// name is empty).
    len: u8,
    bytes: [u8; LONGEST_RECENT],
    name: HeaderName,
}

impl RecentNames {
    pub const fn new() -> RecentNames {
        const NONE: Recent = Recent {
            len: 0,
            bytes: [0; LONGEST_RECENT],
            name: header::HOST,
        };
        RecentNames([NONE; POSITIONS])
    }

    /// `bytes`, met at `place` in a head, as a header name: the one met
    /// there last if it has the same bytes, else a name made (and kept for
    /// that place).
    pub fn name(&mut self, place: usize, bytes: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
        let Some(recent) = self.0.get_mut(place) else {
            return header_name(bytes);
        };
        if usize::from(recent.len) == bytes.len() && recent.bytes[..bytes.len()] == *bytes {
            return Ok(recent.name.clone());
        }
        let name = header_name(bytes)?;
        if bytes.len() <= LONGEST_RECENT {
            recent.bytes[..bytes.len()].copy_from_slice(bytes);
            recent.len = bytes.len() as u8;
            recent.name = name.clone();
        }
        Ok(name)
    }
}

impl Default for RecentNames {
    fn default() -> Self {
        RecentNames::new()
    }
}

/// Runs `name_fields` with the names `recent` keeps by their place, or, with
/// none (trailers, or while the thread ends), with names made afresh.
pub fn with_recent_names<R>(
    recent: Option<&'static LocalKey<RefCell<RecentNames>>>,
    name_fields: impl FnOnce(&mut dyn FnMut(usize, &[u8]) -> Result<HeaderName, InvalidHeaderName>) -> R,
) -> R {
    // Looked at first, so that `with_borrow_mut` below can't fail.
    let usable = recent.filter(|key| {
        key.try_with(|cell| cell.try_borrow_mut().is_ok())
            .unwrap_or(false)
    });
    match usable {
        Some(key) => {
            key.with_borrow_mut(|names| name_fields(&mut |place, bytes| names.name(place, bytes)))
        }
        None => name_fields(&mut |_, bytes| header_name(bytes)),
    }
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
    fn a_name_is_kept_by_its_place_and_made_again_for_other_bytes() {
        let mut recent = RecentNames::new();
        let first = recent.name(0, b"Content-Type").unwrap();
        assert_eq!(first, http::header::CONTENT_TYPE);
        assert_eq!(recent.name(0, b"Content-Type").unwrap(), first);
        // The same name in another case, another name, and a name at another
        // place are each made from their own bytes.
        assert_eq!(recent.name(0, b"content-type").unwrap(), first);
        assert_eq!(recent.name(0, b"Server").unwrap(), http::header::SERVER);
        assert_eq!(
            recent.name(1, b"X-Request-Id").unwrap().as_str(),
            "x-request-id"
        );
        assert_eq!(recent.name(0, b"Server").unwrap(), http::header::SERVER);
        // Names of one prefix are told apart by their length.
        assert_eq!(
            recent.name(2, b"Accept-Encoding").unwrap().as_str(),
            "accept-encoding"
        );
        assert_eq!(recent.name(2, b"Accept").unwrap().as_str(), "accept");
        // Past the kept places and lengths, names are made as they come.
        assert_eq!(
            recent.name(POSITIONS + 3, b"Host").unwrap(),
            http::header::HOST
        );
        let long = format!("x-{}", "a".repeat(LONGEST_RECENT));
        assert_eq!(recent.name(3, long.as_bytes()).unwrap().as_str(), long);
        assert_eq!(recent.name(3, long.as_bytes()).unwrap().as_str(), long);
        // A name refused is refused again, and what was kept stays.
        assert!(recent.name(0, b"Bad Name").is_err());
        assert_eq!(recent.name(0, b"Server").unwrap(), http::header::SERVER);
    }

    #[test]
    fn names_are_made_afresh_without_a_thread_s_recent_names() {
        let made = with_recent_names(None, |name| name(0, b"ETag").unwrap());
        assert_eq!(made, http::header::ETAG);
        let kept = with_recent_names(Some(&RESPONSE_NAMES), |name| {
            // Met twice at one place: the second is the kept one.
            (name(5, b"Vary").unwrap(), name(5, b"Vary").unwrap())
        });
        assert_eq!(kept, (http::header::VARY, http::header::VARY));
        assert_eq!(RESPONSE_NAMES.with_borrow(|recent| recent.0[5].len), 4);
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
