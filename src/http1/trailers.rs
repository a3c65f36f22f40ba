//! Trailer fields (RFC 9110 §6.5): reading a chunked body's trailer
//! section into a header map, which fields may be sent as trailers at all,
//! and the last chunk that carries them (RFC 9112 §7.1.2).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::fields::{header_map, Field, SharedHead};
use super::MAX_HEADERS;

/// The fields of a chunked body's trailer section (`ChunkedDecoder` has
/// checked its form and size); `None` if they are not valid header fields.
pub fn trailer_fields(section: &[u8]) -> Option<HeaderMap> {
    if section.is_empty() {
        return Some(HeaderMap::new());
    }
    let mut parsed = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let Ok(httparse::Status::Complete((_, fields))) = httparse::parse_headers(section, &mut parsed)
    else {
        return None;
    };
    let count = fields.len();
    let fields = fields.iter().map(|field| Field {
        name: field.name.as_bytes(),
        value: field.value,
    });
    header_map(fields, count, &SharedHead::copy(section), None).ok()
}

/// Whether `name` may be sent as a trailer field: none that frames,
/// routes, controls, authenticates or describes the content may, as those
/// are evaluated before the content (RFC 9110 §6.5.1); hyper drops the same.
pub fn may_be_trailer(name: &HeaderName) -> bool {
    const NEVER: [HeaderName; 13] = [
        header::AUTHORIZATION,
        header::CACHE_CONTROL,
        header::CONNECTION,
        header::CONTENT_ENCODING,
        header::CONTENT_LENGTH,
        header::CONTENT_RANGE,
        header::CONTENT_TYPE,
        header::HOST,
        header::MAX_FORWARDS,
        header::SET_COOKIE,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
    ];
    !NEVER.contains(name)
}

/// A chunked body's end: the last chunk and a trailer section of `fields`.
pub fn last_chunk<'a>(fields: impl Iterator<Item = (&'a HeaderName, &'a HeaderValue)>) -> Vec<u8> {
    let mut end = b"0\r\n".to_vec();
    for (name, value) in fields {
        end.extend_from_slice(name.as_str().as_bytes());
        end.extend_from_slice(b": ");
        end.extend_from_slice(value.as_bytes());
        end.extend_from_slice(b"\r\n");
    }
    end.extend_from_slice(b"\r\n");
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_chunk_carries_the_fields_given() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-checksum", HeaderValue::from_static("abc"));
        assert_eq!(last_chunk(trailers.iter()), b"0\r\nx-checksum: abc\r\n\r\n");
        assert_eq!(last_chunk(std::iter::empty()), b"0\r\n\r\n");
        assert!(may_be_trailer(&HeaderName::from_static("x-checksum")));
        assert!(!may_be_trailer(&header::SET_COOKIE));
    }
}
