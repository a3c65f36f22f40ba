//! Header fields as slices of the bytes they were read from, held in field
//! slots the caller keeps (`FieldSlots`) so that a parsed head costs no
//! allocation and is small to move; the list syntax
//! (RFC 9110 §5.6.1) that `Connection` and `Transfer-Encoding` use; and
//! fields made into an `http` header map whose values share one copy of
//! their head (`SharedHead`) rather than one copy each.

use std::cell::RefCell;
use std::fmt;
use std::mem::MaybeUninit;
use std::thread::LocalKey;

use bytes::Bytes;

use super::header_names::{with_recent_names, RecentNames};
use super::{arena, header_maps, MAX_HEADERS};

/// One field line: its name and its value (without surrounding whitespace),
/// both slices of the buffer the head was parsed from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
}

impl fmt::Debug for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}",
            self.name.escape_ascii(),
            self.value.escape_ascii()
        )
    }
}

/// Room for the field lines of one head, for a parse to fill in. The caller
/// keeps it where the head is parsed, so a parsed head borrows its fields
/// rather than carrying (and moving) the 4 KiB of slots; left uninitialised,
/// it costs nothing until a parse writes the fields a head has.
pub struct FieldSlots<'a>(pub(super) [MaybeUninit<httparse::Header<'a>>; MAX_HEADERS]);

impl FieldSlots<'_> {
    pub fn new() -> Self {
        FieldSlots([const { MaybeUninit::uninit() }; MAX_HEADERS])
    }
}

impl Default for FieldSlots<'_> {
    fn default() -> Self {
        FieldSlots::new()
    }
}

/// The field lines of one head, in the order they came.
#[derive(Clone, Copy)]
pub struct Fields<'a> {
    parsed: &'a [httparse::Header<'a>],
}

impl<'a> Fields<'a> {
    /// The fields `httparse` filled in.
    pub(super) fn new(parsed: &'a [httparse::Header<'a>]) -> Self {
        Fields { parsed }
    }

    pub fn len(&self) -> usize {
        self.parsed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Field<'a>> + '_ {
        self.parsed.iter().map(|header| Field {
            name: header.name.as_bytes(),
            value: header.value,
        })
    }

    /// The values of every field named `name` (ASCII case-insensitive).
    pub fn values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a [u8]> + 's {
        self.iter()
            .filter(move |field| field.name.eq_ignore_ascii_case(name.as_bytes()))
            .map(|field| field.value)
    }

    /// What the `Connection` fields say, read in one pass.
    pub fn connection(&self) -> ConnectionOptions {
        let mut options = ConnectionOptions {
            close: false,
            keep_alive: false,
            only_options: true,
        };
        for field in self.iter() {
            if field.name.eq_ignore_ascii_case(b"close") {
                options.only_options = false;
            }
            if !field.name.eq_ignore_ascii_case(b"connection") {
                continue;
            }
            // Nearly always one option alone: read as the one item it is,
            // without parsing a list.
            if options.note(field.value) {
                continue;
            }
            for item in list_items(field.value) {
                if !options.note(item) && !item.is_empty() {
                    options.only_options = false;
                }
            }
        }
        options
    }

    /// Whether any field named `name` lists `token` (RFC 9110 §5.6.1).
    pub fn lists(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .any(|value| list_items(value).any(|item| item.eq_ignore_ascii_case(token.as_bytes())))
    }
}

impl fmt::Debug for Fields<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// What a head's `Connection` fields say (RFC 9110 §7.6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// One of them lists `close`.
    pub close: bool,
    /// One of them lists `keep-alive`.
    pub keep_alive: bool,
    /// They list nothing but `close` and `keep-alive`, and no field named
    /// `Close` is there for them to name: `Connection` and `Keep-Alive` are
    /// then all that RFC 9110 §7.6.1 removes.
    pub only_options: bool,
}

impl ConnectionOptions {
    /// Notes `item` if it is `close` or `keep-alive`; whether it was.
    fn note(&mut self, item: &[u8]) -> bool {
        if item.eq_ignore_ascii_case(b"close") {
            self.close = true;
        } else if item.eq_ignore_ascii_case(b"keep-alive") {
            self.keep_alive = true;
        } else {
            return false;
        }
        true
    }
}

/// The items of a comma-separated list (RFC 9110 §5.6.1), each without the
/// optional whitespace around it, empty items included. A value that is not
/// visible ASCII (obs-text) has no items: no token carries such bytes.
pub fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let items = is_visible_ascii(value).then(|| value.split(|&byte| byte == b','));
    items.into_iter().flatten().map(|item| item.trim_ascii())
}

/// A byte a token may hold (`tchar`, RFC 9110 §5.6.2): a letter, a digit or
/// one of 15 symbols, matched (searching a list of them for each byte cost
/// more, on the request path, than the rest of a `Forwarded` element).
pub fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric()
        || matches!(
            byte,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// Visible ASCII, spaces and tabs only (what a list of tokens can hold).
pub fn is_visible_ascii(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&byte| byte == b'\t' || (b' '..=b'~').contains(&byte))
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 9110 §5.6.1: a list's items are separated by commas with optional
    // whitespace; empty items may appear.
    #[test]
    fn list_items_are_trimmed_and_empty_ones_kept() {
        let items: Vec<&[u8]> = list_items(b" gzip ,, chunked\t").collect();
        assert_eq!(items, [&b"gzip"[..], b"", b"chunked"]);
    }

    #[test]
    fn header_values_are_slices_of_one_copy_of_their_head() {
        let source = b"Host: a.test\r\nX-Long: abcdefghijklmnopqrstuvwxyz\r\n\r\n".to_vec();
        let fields = [
            Field {
                name: b"host",
                value: &source[6..12],
            },
            Field {
                name: b"x-long",
                value: &source[22..48],
            },
        ];
        let head = SharedHead::copy(&source);
        let map = header_map(fields.into_iter(), 8, &head, None).unwrap();
        assert_eq!(map["host"], "a.test");
        assert_eq!(map["x-long"], "abcdefghijklmnopqrstuvwxyz");
        // Each value points into the one copy, not at a copy of its own.
        let copy = head.slice(&source);
        let within = |value: &http::HeaderValue| {
            let start = (value.as_bytes().as_ptr() as usize).wrapping_sub(copy.as_ptr() as usize);
            start + value.len() <= copy.len()
        };
        assert!(within(&map["host"]) && within(&map["x-long"]));
        // A part from elsewhere is copied on its own.
        assert_eq!(head.slice(b"elsewhere"), &b"elsewhere"[..]);
        assert!(map.capacity() >= 8, "room for the fields added later");
    }

    #[test]
    fn a_connection_of_options_only_is_told_from_one_naming_fields() {
        let only_options = |lines: &[(&'static str, &'static [u8])]| {
            let parsed: Vec<httparse::Header<'_>> = lines
                .iter()
                .map(|&(name, value)| httparse::Header { name, value })
                .collect();
            Fields::new(&parsed).connection().only_options
        };
        assert!(only_options(&[
            ("Connection", b"keep-alive"),
            ("Keep-Alive", b"timeout=5")
        ]));
        assert!(only_options(&[
            ("connection", b"Close"),
            ("connection", b"keep-alive, ")
        ]));
        assert!(only_options(&[("server", b"x")]));
        assert!(!only_options(&[
            ("Connection", b"keep-alive, X-Secret"),
            ("x-secret", b"1")
        ]));
        assert!(!only_options(&[("Connection", b"close"), ("Close", b"1")]));
    }

    #[test]
    fn a_connection_option_alone_is_read_as_the_list_of_it() {
        let options = |lines: &[&'static [u8]]| {
            let parsed: Vec<httparse::Header<'_>> = lines
                .iter()
                .map(|&value| httparse::Header {
                    name: "Connection",
                    value,
                })
                .collect();
            let options = Fields::new(&parsed).connection();
            (options.close, options.keep_alive, options.only_options)
        };
        assert_eq!(options(&[b"Keep-Alive"]), (false, true, true));
        assert_eq!(options(&[b"CLOSE"]), (true, false, true));
        assert_eq!(options(&[b"keep-alive", b"close"]), (true, true, true));
        assert_eq!(options(&[b" keep-alive , Close"]), (true, true, true));
        assert_eq!(options(&[b"keep-alive", b"x-trace"]), (false, true, false));
        assert_eq!(options(&[b"keep-alived"]), (false, false, false));
    }

    /// What lets `header_map` skip `HeaderValue`'s check: every byte
    /// httparse takes in a request's or a response's field value,
    /// `HeaderValue` takes too.
    #[test]
    fn a_value_httparse_takes_is_a_valid_header_value() {
        let mut taken = 0;
        for byte in 0..=u8::MAX {
            for start in [&b"GET / HTTP/1.1\r\n"[..], b"HTTP/1.1 200 OK\r\n"] {
                let head = [start, b"A: x", &[byte], b"y\r\n\r\n"].concat();
                let mut fields = [httparse::EMPTY_HEADER; 4];
                let value = if start.starts_with(b"GET") {
                    let mut request = httparse::Request::new(&mut fields);
                    matches!(request.parse(&head), Ok(httparse::Status::Complete(_)))
                        .then(|| request.headers[0].value)
                } else {
                    let mut response = httparse::Response::new(&mut fields);
                    matches!(response.parse(&head), Ok(httparse::Status::Complete(_)))
                        .then(|| response.headers[0].value)
                };
                let Some(value) = value else { continue };
                taken += 1;
                assert!(
                    http::HeaderValue::from_bytes(value).is_ok(),
                    "byte {byte:#04x}: httparse takes {value:?}, HeaderValue does not"
                );
            }
        }
        // Tab, space, visible ASCII and obs-text, in both kinds of head.
        assert_eq!(taken, 2 * (1 + 95 + 128));
    }

    #[test]
    fn a_token_holds_letters_digits_and_fifteen_symbols() {
        let symbols: Vec<u8> = (0..=u8::MAX)
            .filter(|&byte| is_tchar(byte) && !byte.is_ascii_alphanumeric())
            .collect();
        let mut expected = b"!#$%&'*+-.^_`|~".to_vec();
        expected.sort_unstable();
        assert_eq!(symbols, expected);
        assert!(is_tchar(b'a') && is_tchar(b'Z') && is_tchar(b'7'));
        assert!(!is_tchar(b' ') && !is_tchar(b',') && !is_tchar(b'"') && !is_tchar(0x80));
    }

    #[test]
    fn a_value_with_obs_text_lists_nothing() {
        assert_eq!(list_items(b"close, \xff").count(), 0);
    }
}

/// A field the `http` crate refuses as a header name or value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a header field the http crate refuses")]
pub struct InvalidField;

/// One copy of a head's bytes, which the values taken from it share: a
/// header value (or a request's target) is a slice of the copy, so a head
/// costs one copy, not one per field, and cloning a value later costs no
/// allocation either. The copy is cut from the thread's `arena`.
pub struct SharedHead<'a> {
    source: &'a [u8],
    copy: Bytes,
}

impl<'a> SharedHead<'a> {
    /// Copies `source`, the buffer the head's fields are slices of.
    pub fn copy(source: &'a [u8]) -> SharedHead<'a> {
        SharedHead {
            source,
            copy: arena::copy(source),
        }
    }

    /// The copy of `part`, a slice of the source (it only counts a
    /// reference). A part from elsewhere is copied on its own, never read
    /// out of bounds.
    pub fn slice(&self, part: &[u8]) -> Bytes {
        let start = (part.as_ptr() as usize).wrapping_sub(self.source.as_ptr() as usize);
        match start.checked_add(part.len()) {
            Some(end) if end <= self.source.len() => self.copy.slice(start..end),
            _ => arena::copy(part),
        }
    }
}

/// `fields`, slices of `head`, as an `http` header map in their order
/// (repeats appended), with room for `capacity` fields in all (those its
/// user adds too, so that the map is not grown per request): one of the
/// thread's kept maps (`header_maps`). Their names are looked up by their
/// place in `recent` (`header_names::REQUEST_NAMES` or `RESPONSE_NAMES`),
/// or made afresh without it.
///
/// The fields are ones `httparse` parsed: their values are not checked
/// again (see `a_value_httparse_takes_is_a_valid_header_value`).
pub fn header_map<'a>(
    fields: impl Iterator<Item = Field<'a>>,
    capacity: usize,
    head: &SharedHead<'_>,
    recent: Option<&'static LocalKey<RefCell<RecentNames>>>,
) -> Result<http::HeaderMap, InvalidField> {
    let mut headers = header_maps::take(capacity);
    with_recent_names(recent, |name_at| {
        for (place, field) in fields.enumerate() {
            let name = name_at(place, field.name).map_err(|_| InvalidField)?;
            // SAFETY: not a memory-safety contract but a validity one:
            // httparse takes in a value only the bytes `HeaderValue` takes
            // (visible ASCII, space, tab and obs-text, never another control
            // byte), which the test named above checks byte by byte, so the
            // check this skips would pass. hyper's server skips it likewise.
            let value =
                unsafe { http::HeaderValue::from_maybe_shared_unchecked(head.slice(field.value)) };
            headers.append(name, value);
        }
        Ok(())
    })?;
    Ok(headers)
}
