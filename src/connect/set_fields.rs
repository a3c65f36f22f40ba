//! The fields dockhand sets on a request before its upstream (who the
//! client is, its Host), held beside the client's header map rather than
//! put into it: each replaces the client's fields of its name, or, without
//! a value, removes them. The own HTTP/1.1 exchange writes them in place of
//! the client's as it writes the head, so the map is never changed for
//! them; hyper's client is given a copy they are applied to (`apply`).
//!
//! A value that lives as long as the request's handler (the connection's
//! address, the request's Host) is borrowed, not counted again. The few
//! built for the request (`Forwarded`) are kept apart from the list of
//! names, so that dropping the fields after the answer reads only those,
//! not every entry: by then the request's state has left the cache.

use std::borrow::Cow;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// The most names one request has set: the eight that say who the client
/// is, and `Host`. More would be kept on the heap.
const USUAL_MOST: usize = 9;

/// The most values one request builds: `Forwarded`, and `X-Forwarded-For`
/// from a trusted proxy.
const USUAL_MOST_BUILT: usize = 2;

/// What one set name becomes.
#[derive(Debug, Clone, Copy)]
enum SetValue<'a> {
    Borrowed(&'a HeaderValue),
    /// The value at this index of the built ones.
    Built(u8),
    Removed,
}

/// A request's set fields, in the order they were set.
#[derive(Debug, Default)]
pub struct SetFields<'a> {
    /// Without drop glue: dropping it reads only its length.
    names: SmallVec<[(&'static HeaderName, SetValue<'a>); USUAL_MOST]>,
    built: SmallVec<[HeaderValue; USUAL_MOST_BUILT]>,
}

impl<'a> SetFields<'a> {
    /// The request's fields named `name` are replaced by `value` (removed
    /// when it is `None`). Each name is set once: looking for an earlier
    /// setting cost more than all the rest of setting a request's fields.
    pub fn set(&mut self, name: &'static HeaderName, value: Option<Cow<'a, HeaderValue>>) {
        debug_assert!(
            self.names.iter().all(|(set, _)| *set != name),
            "{name} is set twice"
        );
        let value = match value {
            Some(Cow::Borrowed(value)) => SetValue::Borrowed(value),
            Some(Cow::Owned(value)) => {
                let index = u8::try_from(self.built.len()).expect("a few values are built");
                self.built.push(value);
                SetValue::Built(index)
            }
            None => SetValue::Removed,
        };
        self.names.push((name, value));
    }

    /// `set`, for a value borrowed for the request's life.
    pub fn set_borrowed(&mut self, name: &'static HeaderName, value: Option<&'a HeaderValue>) {
        self.set(name, value.map(Cow::Borrowed));
    }

    /// The fields as an exchange borrows them.
    pub fn as_ref(&self) -> SetFieldsRef<'_> {
        SetFieldsRef {
            names: &self.names,
            built: &self.built,
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Makes `headers` what they are with these fields set.
    pub fn apply(&self, headers: &mut HeaderMap) {
        for (name, value) in self.as_ref().iter() {
            match value {
                Some(value) => headers.insert(name, value.clone()),
                None => headers.remove(name),
            };
        }
    }
}

/// A request's set fields, borrowed (as slices, which a shorter borrow
/// of the request's head can be taken for).
#[derive(Debug, Clone, Copy)]
pub struct SetFieldsRef<'a> {
    names: &'a [(&'static HeaderName, SetValue<'a>)],
    built: &'a [HeaderValue],
}

impl<'a> SetFieldsRef<'a> {
    /// Each name set and its value (`None`: removed), in the order set.
    pub fn iter(self) -> impl Iterator<Item = (&'static HeaderName, Option<&'a HeaderValue>)> {
        self.names
            .iter()
            .map(move |&(name, value)| (name, self.value(value)))
    }

    /// `Some` when `name` is set, with its value (`None`: removed).
    pub fn get(self, name: &HeaderName) -> Option<Option<&'a HeaderValue>> {
        self.iter()
            .find(|(set, _)| *set == name)
            .map(|(_, value)| value)
    }

    pub fn is_set(self, name: &HeaderName) -> bool {
        self.names.iter().any(|(set, _)| *set == name)
    }

    fn value(self, value: SetValue<'a>) -> Option<&'a HeaderValue> {
        match value {
            SetValue::Borrowed(value) => Some(value),
            SetValue::Built(index) => Some(&self.built[usize::from(index)]),
            SetValue::Removed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use http::header::{ACCEPT, FORWARDED, HOST, USER_AGENT};

    use super::*;

    #[test]
    fn each_name_set_replaces_or_removes_the_client_s() {
        let host = HeaderValue::from_static("a.test");
        let mut set = SetFields::default();
        set.set(&USER_AGENT, None);
        set.set_borrowed(&HOST, Some(&host));
        set.set(
            &FORWARDED,
            Some(Cow::Owned(HeaderValue::from_static("for=192.0.2.7"))),
        );
        assert_eq!(set.len(), 3);
        let mut headers = HeaderMap::new();
        for (name, value) in [
            (HOST, "client.test"),
            (USER_AGENT, "curl"),
            (USER_AGENT, "again"),
            (ACCEPT, "*/*"),
            (FORWARDED, "for=6.6.6.6"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        set.apply(&mut headers);
        assert_eq!(headers.len(), 3, "{headers:?}");
        assert_eq!(headers["host"], "a.test");
        assert_eq!(headers["accept"], "*/*");
        assert_eq!(headers["forwarded"], "for=192.0.2.7");
    }

    #[test]
    fn built_and_borrowed_values_are_told_in_the_order_set() {
        let host = HeaderValue::from_static("a.test");
        let mut set = SetFields::default();
        set.set(
            &FORWARDED,
            Some(Cow::Owned(HeaderValue::from_static("for=192.0.2.7"))),
        );
        set.set_borrowed(&HOST, Some(&host));
        set.set(&USER_AGENT, None);
        set.set(&ACCEPT, Some(Cow::Owned(HeaderValue::from_static("*/*"))));
        let told: Vec<_> = set
            .as_ref()
            .iter()
            .map(|(name, value)| (name.as_str(), value.map(|v| v.to_str().unwrap())))
            .collect();
        assert_eq!(
            told,
            [
                ("forwarded", Some("for=192.0.2.7")),
                ("host", Some("a.test")),
                ("user-agent", None),
                ("accept", Some("*/*")),
            ]
        );
        let set = set.as_ref();
        assert_eq!(
            set.get(&ACCEPT),
            Some(Some(&HeaderValue::from_static("*/*")))
        );
        assert_eq!(set.get(&USER_AGENT), Some(None));
        assert_eq!(set.get(&HeaderName::from_static("x-unset")), None);
        assert!(set.is_set(&HOST) && !set.is_set(&HeaderName::from_static("x-unset")));
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
