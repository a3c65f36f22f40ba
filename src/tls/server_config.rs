//! The rustls configuration of the HTTPS listener: TLS 1.2 and 1.3 with the
//! ring provider, ALPN `h2` then `http/1.1` (and `acme-tls/1` for ACME's
//! validation, which no ordinary client offers), certificates by SNI, and
//! session resumption both ways: stateless tickets and a server-side cache.

use std::sync::Arc;

use rustls::crypto::ring::{default_provider, Ticketer};
use rustls::server::ServerSessionMemoryCache;
use rustls::ServerConfig;

use super::challenges::ACME_TLS_ALPN_PROTOCOL;
use super::resolver::SniResolver;
use crate::connect::tls::{ALPN_H2, ALPN_HTTP1};

/// Sessions remembered for resumption by ID (TLS 1.2 clients without
/// tickets); tickets need no memory here.
const SESSION_CACHE_ENTRIES: usize = 4096;

pub fn server_config(resolver: SniResolver) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![
        ALPN_H2.to_vec(),
        ALPN_HTTP1.to_vec(),
        ACME_TLS_ALPN_PROTOCOL.to_vec(),
    ];
    config.ticketer = Ticketer::new()?;
    config.session_storage = ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES);
    Ok(Arc::new(config))
}
