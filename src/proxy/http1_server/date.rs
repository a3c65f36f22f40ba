//! The `Date` field every response carries (RFC 9110 §6.6.1), formatted once
//! a second per worker thread rather than once per response.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

/// An IMF-fixdate is always this long: `Sun, 06 Nov 1994 08:49:37 GMT`.
const DATE_LEN: usize = 29;

struct Cached {
    second: u64,
    text: [u8; DATE_LEN],
}

thread_local! {
    static CACHED: RefCell<Cached> = const { RefCell::new(Cached { second: u64::MAX, text: [b' '; DATE_LEN] }) };
}

/// Now, as a `Date` field's value.
pub fn now() -> [u8; DATE_LEN] {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.second != second {
            let text = httpdate::fmt_http_date(now);
            if let Ok(text) = <[u8; DATE_LEN]>::try_from(text.as_bytes()) {
                cached.text = text;
                cached.second = second;
            }
        }
        cached.text
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_date_is_an_imf_fixdate_of_now() {
        let text = now();
        let parsed = httpdate::parse_http_date(std::str::from_utf8(&text).unwrap()).unwrap();
        let off = SystemTime::now().duration_since(parsed).unwrap();
        assert!(off.as_secs() < 5, "{off:?}");
        assert!(text.ends_with(b" GMT"));
    }
}
