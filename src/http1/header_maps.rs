//! Header maps the worker thread keeps for its requests: a map a request is
//! done with (its head written out) is cleared and kept with its room for
//! fields, and the next head read is put into it, so that a request's maps
//! cost no allocation. Each thread keeps its own (no lock: a worker's tasks
//! never leave its thread), a bounded number of them, and none that a large
//! head grew past what usual heads need.

use std::cell::RefCell;

use http::HeaderMap;

/// The most maps a thread keeps: a request in flight holds two (its own
/// and its response's), so this many serve 512 requests in flight at once
/// (as many connections kept busy) without an allocation. A kept map is
/// an emptied one of a usual head: a few KiB.
const MOST_KEPT: usize = 1024;

/// The most fields a kept map has room for; a larger map is freed.
const MOST_ROOM: usize = 96;

thread_local! {
    static KEPT: RefCell<Vec<HeaderMap>> = const { RefCell::new(Vec::new()) };
}

/// An empty map with room for at least `room` fields: a kept one, or new.
pub fn take(room: usize) -> HeaderMap {
    let mut map = KEPT.with_borrow_mut(Vec::pop).unwrap_or_default();
    map.reserve(room);
    map
}

/// Keeps `map` for a later `take`, emptied (its values are dropped now).
pub fn give_back(mut map: HeaderMap) {
    if map.capacity() > MOST_ROOM {
        return;
    }
    map.clear();
    KEPT.with_borrow_mut(|kept| {
        if kept.len() < MOST_KEPT {
            kept.push(map);
        }
    });
}

/// A copy of `map`, in a kept map with room for `more` fields besides.
/// The fields are in the order iterating `map` gives them (each name's
/// values together), the order a head is written in.
pub fn copy_of(map: &HeaderMap, more: usize) -> HeaderMap {
    let mut copy = take(map.len() + more);
    for (name, value) in map {
        copy.append(name.clone(), value.clone());
    }
    copy
}

#[cfg(test)]
mod tests {
    use http::header::{HeaderValue, ACCEPT, HOST};

    use super::*;

    fn fields(map: &HeaderMap) -> Vec<(String, String)> {
        map.iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn a_map_given_back_is_taken_again_empty_with_its_room() {
        let mut map = take(20);
        map.insert(HOST, HeaderValue::from_static("a.test"));
        let room = map.capacity();
        give_back(map);
        let again = take(4);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), room);
    }

    #[test]
    fn a_map_grown_large_is_not_kept() {
        let mut large = HeaderMap::with_capacity(MOST_ROOM * 2);
        large.insert(HOST, HeaderValue::from_static("a.test"));
        give_back(large);
        assert!(take(0).capacity() <= MOST_ROOM);
    }

    #[test]
    fn no_more_than_the_most_are_kept() {
        for _ in 0..MOST_KEPT + 10 {
            give_back(HeaderMap::with_capacity(8));
        }
        assert_eq!(KEPT.with_borrow(Vec::len), MOST_KEPT);
    }

    #[test]
    fn a_copy_has_every_value_of_every_name() {
        let mut map = HeaderMap::new();
        map.append(ACCEPT, HeaderValue::from_static("text/html"));
        map.append(HOST, HeaderValue::from_static("a.test"));
        map.append(ACCEPT, HeaderValue::from_static("*/*"));
        let copy = copy_of(&map, 3);
        assert_eq!(fields(&copy), fields(&map));
        assert!(copy.capacity() >= map.len() + 3);
    }
}
