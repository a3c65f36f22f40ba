//! The fields dockhand sets on a request before its upstream (who the
//! client is, its Host), held beside the client's header map rather than
//! put into it: each replaces the client's fields of its name, or, without
//! a value, removes them. The own HTTP/1.1 exchange writes them in place of
//! the client's as it writes the head, so the map is never changed for
//! them; hyper's client is given a copy they are applied to (`apply`).
//! A value that lives as long as the request's handler (the connection's
//! address, the request's Host) is borrowed, not counted again.

use std::borrow::Cow;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

use crate::connect::SetField;

/// The most names one request has set: the eight that say who the client
/// is, and `Host`. More would be kept on the heap.
const USUAL_MOST: usize = 9;

/// A request's set fields, in the order they were set.
#[derive(Debug, Default)]
pub struct SetFields<'a>(SmallVec<[SetField<'a>; USUAL_MOST]>);

impl<'a> SetFields<'a> {
    /// The request's fields named `name` are replaced by `value` (removed
    /// when it is `None`). Each name is set once: looking for an earlier
    /// setting cost more than all the rest of setting a request's fields.
    pub fn set(&mut self, name: &'static HeaderName, value: Option<Cow<'a, HeaderValue>>) {
        debug_assert!(
            self.0.iter().all(|(set, _)| *set != name),
            "{name} is set twice"
        );
        self.0.push((name, value));
    }

    /// `set`, for a value borrowed for the request's life.
    pub fn set_borrowed(&mut self, name: &'static HeaderName, value: Option<&'a HeaderValue>) {
        self.set(name, value.map(Cow::Borrowed));
    }

    pub fn as_slice(&self) -> &[SetField<'a>] {
        &self.0
    }

    /// Makes `headers` what they are with these fields set.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in &self.0 {
            match value {
                Some(value) => headers.insert(*name, value.clone().into_owned()),
                None => headers.remove(*name),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use http::header::{HOST, USER_AGENT};

    use super::*;
    use crate::proxy::headers::header_map;

    #[test]
    fn each_name_set_replaces_or_removes_the_client_s() {
        let host = HeaderValue::from_static("a.test");
        let mut set = SetFields::default();
        set.set(&USER_AGENT, None);
        set.set_borrowed(&HOST, Some(&host));
        assert_eq!(set.as_slice().len(), 2);
        let mut headers = header_map(&[
            ("host", "client.test"),
            ("user-agent", "curl"),
            ("user-agent", "again"),
            ("accept", "*/*"),
        ]);
        set.apply(&mut headers);
        assert_eq!(headers.len(), 2, "{headers:?}");
        assert_eq!(headers["host"], "a.test");
        assert_eq!(headers["accept"], "*/*");
    }

    #[test]
    #[should_panic(expected = "host is set twice")]
    #[cfg(debug_assertions)]
    fn a_name_is_set_once() {
        let mut set = SetFields::default();
        set.set(
            &HOST,
            Some(Cow::Owned(HeaderValue::from_static("first.test"))),
        );
        set.set(&HOST, Some(Cow::Owned(HeaderValue::from_static("a.test"))));
    }
}
