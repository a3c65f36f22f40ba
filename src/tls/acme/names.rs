//! Which host names a public CA can issue a certificate for. A name that
//! can't have one is never ordered: asking would fail and spend the
//! account's rate limit. Pure: no I/O, no state.

use std::net::IpAddr;

use crate::config::HostPattern;

/// What ACME can do for one host as it is configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligibility {
    /// A DNS name a public CA can validate over HTTP-01 or TLS-ALPN-01.
    Orderable(String),
    /// `*.example.com`: only DNS-01 can validate a wildcard, and dockhand
    /// does not answer DNS-01 (yet). Worth a diagnostic.
    Wildcard(String),
    /// Never public: `localhost`, `*.localhost`, an address, a single
    /// label, the catch-all `*`. Nothing to say about it.
    Private,
}

/// Sorts a host pattern (names in the model are lower case already).
pub fn eligibility(pattern: &HostPattern) -> Eligibility {
    match pattern {
        HostPattern::Any => Eligibility::Private,
        HostPattern::Wildcard(suffix) if is_public_name(suffix) => {
            Eligibility::Wildcard(format!("*.{suffix}"))
        }
        HostPattern::Wildcard(_) => Eligibility::Private,
        HostPattern::Exact(name) if is_public_name(name) => Eligibility::Orderable(name.clone()),
        HostPattern::Exact(_) => Eligibility::Private,
    }
}

/// Whether `name` could be in DNS publicly: not an address, not under
/// `localhost` (RFC 6761 §6.3), and with at least two labels.
fn is_public_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    let bracketed = name.trim_start_matches('[').trim_end_matches(']');
    if bracketed.parse::<IpAddr>().is_ok() {
        return false;
    }
    let last_label = name.rsplit('.').next().unwrap_or(name);
    last_label != "localhost" && name.contains('.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(name: &str) -> Eligibility {
        eligibility(&HostPattern::Exact(name.to_owned()))
    }

    #[test]
    fn only_public_dns_names_are_ordered() {
        assert_eq!(
            exact("app.example.com"),
            Eligibility::Orderable("app.example.com".to_owned())
        );
        for private in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "10.0.0.7",
            "[::1]",
            "::1",
            "intranet",
        ] {
            assert_eq!(exact(private), Eligibility::Private, "{private}");
        }
        assert_eq!(eligibility(&HostPattern::Any), Eligibility::Private);
    }

    #[test]
    fn a_wildcard_is_named_unless_it_is_under_localhost() {
        assert_eq!(
            eligibility(&HostPattern::Wildcard("example.com".to_owned())),
            Eligibility::Wildcard("*.example.com".to_owned())
        );
        assert_eq!(
            eligibility(&HostPattern::Wildcard("localhost".to_owned())),
            Eligibility::Private
        );
    }
}
