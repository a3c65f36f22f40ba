//! The host a request is for. HTTP/1 names it in `Host`, which RFC 9112
//! §3.2 requires exactly once (none, or several lines: `400`), and maybe also
//! in an absolute-form request line (`GET http://a.test/ HTTP/1.1`), whose
//! authority then wins (§3.2.2) while `Host` must still be one valid line.
//! HTTP/2 names it in `:authority`, and a `Host` beside it must name the same
//! host (RFC 9113 §8.3.1). A request whose host is missing or ambiguous is
//! refused before anything is routed, so an upstream never sees a host other
//! than the one dockhand routed by.

use std::borrow::Cow;

use http::header::{self, HeaderValue};
use http::{Request, Version};

use super::error::{ErrorKind, ProxyError};
use crate::routes::normalize_host;

/// The host the client names, for the access log: the request line's (or
/// `:authority`'s) authority, else the first `Host`. `requested` may still
/// refuse it.
pub fn claimed<B>(request: &Request<B>) -> Option<HeaderValue> {
    match authority(request) {
        Some(authority) => authority.ok(),
        None => request.headers().get(header::HOST).cloned(),
    }
}

/// The host the request is routed by and sent upstream as `Host`, or why
/// it names none that may be served.
pub fn requested<B>(request: &Request<B>) -> Result<HeaderValue, ProxyError> {
    let mut host_lines = request.headers().get_all(header::HOST).iter();
    let host = host_lines.next();
    if host_lines.next().is_some() {
        let lines = 2 + host_lines.count();
        return Err(ProxyError::new(
            ErrorKind::RepeatedHost,
            format!("{lines} Host header lines (RFC 9112 §3.2 allows one)"),
        ));
    }
    let http1 = request.version() <= Version::HTTP_11;
    match (authority(request).transpose()?, host) {
        (None, None) => Err(ErrorKind::MissingHost.into()),
        (None, Some(host)) => Ok(host.clone()),
        (Some(_), None) if http1 => Err(ProxyError::new(
            ErrorKind::MissingHost,
            "an HTTP/1 request needs Host even with an absolute-form target (RFC 9112 §3.2)",
        )),
        (Some(authority), Some(host)) if http1 => {
            // Ignored for routing (RFC 9112 §3.2.2), but still a request's Host.
            match_key(host)?;
            Ok(authority)
        }
        (Some(authority), None) => Ok(authority),
        (Some(authority), Some(host)) => {
            if match_key(&authority)? != match_key(host)? {
                return Err(ProxyError::new(
                    ErrorKind::BadHost,
                    HostsDiffer {
                        authority: authority.clone(),
                        host: host.clone(),
                    },
                ));
            }
            Ok(authority)
        }
    }
}

/// The route-table key of a host (`Example.com:8080` → `example.com`),
/// lower-cased in a copy when it must be; `bad_host` when it can't be a
/// host name.
pub fn match_key(host: &HeaderValue) -> Result<Cow<'_, str>, ProxyError> {
    host.to_str()
        .ok()
        .and_then(normalize_host)
        .ok_or_else(|| ProxyError::new(ErrorKind::BadHost, NotAHostName(host.clone())))
}

/// The request target's authority (absolute-form, or HTTP/2 `:authority`), if it has one.
fn authority<B>(request: &Request<B>) -> Option<Result<HeaderValue, ProxyError>> {
    let authority = request.uri().authority()?;
    Some(
        HeaderValue::from_str(authority.as_str())
            .map_err(|error| ProxyError::new(ErrorKind::BadHost, error)),
    )
}

/// A host the router can't match, kept as the cause of `bad_host`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a host name")]
struct NotAHostName(HeaderValue);

/// An HTTP/2 request whose `Host` names another host than its `:authority`.
#[derive(Debug, thiserror::Error)]
#[error("Host {host:?} names another host than :authority {authority:?} (RFC 9113 §8.3.1)")]
struct HostsDiffer {
    authority: HeaderValue,
    host: HeaderValue,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, target: &str, hosts: &[&str]) -> Request<()> {
        let mut builder = Request::builder().version(version).uri(target);
        for host in hosts {
            builder = builder.header(header::HOST, *host);
        }
        builder.body(()).unwrap()
    }

    fn outcome(version: Version, target: &str, hosts: &[&str]) -> Result<String, &'static str> {
        requested(&request(version, target, hosts))
            .map(|host| host.to_str().unwrap().to_owned())
            .map_err(|error| error.reason())
    }

    #[test]
    fn http1_needs_exactly_one_host_and_an_absolute_target_wins() {
        let http1 = Version::HTTP_11;
        assert_eq!(outcome(http1, "/", &["a.test"]), Ok("a.test".into()));
        assert_eq!(outcome(http1, "/", &[]), Err("missing_host"));
        assert_eq!(outcome(Version::HTTP_10, "/", &[]), Err("missing_host"));
        let twice = outcome(http1, "/", &["a.test", "b.test"]);
        assert_eq!(twice, Err("repeated_host"));
        assert_eq!(
            outcome(http1, "/", &["a.test", "a.test", "a.test"]),
            Err("repeated_host")
        );
        assert_eq!(outcome(http1, "http://a.test/", &[]), Err("missing_host"));
        assert_eq!(
            outcome(http1, "http://a.test/", &["b.test"]),
            Ok("a.test".into())
        );
        assert_eq!(
            outcome(http1, "http://a.test/", &["a:b:c"]),
            Err("bad_host")
        );
    }

    #[test]
    fn http2_authority_and_host_must_agree() {
        let http2 = Version::HTTP_2;
        assert_eq!(outcome(http2, "http://a.test/", &[]), Ok("a.test".into()));
        assert_eq!(
            outcome(http2, "http://a.test/", &["A.test:80"]),
            Ok("a.test".into())
        );
        assert_eq!(
            outcome(http2, "http://a.test/", &["b.test"]),
            Err("bad_host")
        );
        assert_eq!(outcome(http2, "/", &["b.test"]), Ok("b.test".into()));
        assert_eq!(outcome(http2, "/", &[]), Err("missing_host"));
    }

    #[test]
    fn the_log_shows_the_host_claimed() {
        let both = request(Version::HTTP_11, "http://a.test/", &["b.test", "c.test"]);
        assert_eq!(claimed(&both).unwrap(), "a.test");
        let host_only = request(Version::HTTP_11, "/", &["b.test", "c.test"]);
        assert_eq!(claimed(&host_only).unwrap(), "b.test");
    }
}
