//! The SNI index: server name → certificate, built once per change of the
//! certificates so a handshake costs one or two hash lookups, never a scan.

use std::collections::HashMap;
use std::sync::Arc;

use super::certificate::Certificate;

/// Exact names, and wildcards by the parent they cover one label below.
#[derive(Debug, Default)]
pub struct SniIndex {
    exact: HashMap<Box<str>, Arc<Certificate>>,
    /// `*.example.com` under `example.com`.
    wildcard: HashMap<Box<str>, Arc<Certificate>>,
}

impl SniIndex {
    /// Indexes `certificates` in order of preference: a name covered by
    /// several goes to the first that names it.
    pub fn build<'a>(certificates: impl IntoIterator<Item = &'a Arc<Certificate>>) -> SniIndex {
        let mut index = SniIndex::default();
        for certificate in certificates {
            for name in &certificate.names {
                let (map, key) = match name.strip_prefix("*.") {
                    Some(parent) => (&mut index.wildcard, parent),
                    None => (&mut index.exact, name.as_str()),
                };
                map.entry(key.into()).or_insert_with(|| certificate.clone());
            }
        }
        index
    }

    /// The certificate for `server_name` (any case, a trailing dot
    /// ignored): an exact name first, else a wildcard one label up.
    pub fn lookup(&self, server_name: &str) -> Option<&Arc<Certificate>> {
        let name = server_name.strip_suffix('.').unwrap_or(server_name);
        if name.bytes().any(|byte| byte.is_ascii_uppercase()) {
            return self.lookup_lower(&name.to_ascii_lowercase());
        }
        self.lookup_lower(name)
    }

    fn lookup_lower(&self, name: &str) -> Option<&Arc<Certificate>> {
        if let Some(certificate) = self.exact.get(name) {
            return Some(certificate);
        }
        let (label, parent) = name.split_once('.')?;
        if label.is_empty() {
            return None;
        }
        self.wildcard.get(parent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certificate::test_certificate as certificate;

    #[test]
    fn exact_names_win_over_wildcards_and_case_does_not_matter() {
        let wildcard = certificate(&["*.example.com"]);
        let exact = certificate(&["api.example.com"]);
        let index = SniIndex::build([&wildcard, &exact]);
        assert!(Arc::ptr_eq(
            index.lookup("API.example.com.").unwrap(),
            &exact
        ));
        assert!(Arc::ptr_eq(
            index.lookup("www.example.com").unwrap(),
            &wildcard
        ));
        assert!(index.lookup("example.com").is_none());
        assert!(index.lookup("a.b.example.com").is_none());
        assert!(index.lookup("other.org").is_none());
    }

    #[test]
    fn the_first_certificate_naming_a_name_keeps_it() {
        let preferred = certificate(&["a.example.com"]);
        let other = certificate(&["a.example.com", "b.example.com"]);
        let index = SniIndex::build([&preferred, &other]);
        assert!(Arc::ptr_eq(
            index.lookup("a.example.com").unwrap(),
            &preferred
        ));
        assert!(Arc::ptr_eq(index.lookup("b.example.com").unwrap(), &other));
    }
}
