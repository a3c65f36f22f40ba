//! Talking to the CA: the HTTPS client instant-acme sends through (the
//! system's roots plus `--acme-ca`'s, ring only) that also notes the
//! `Retry-After` of every refusal, which instant-acme's errors drop; and
//! the account, created once and kept in storage, or read back from it.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::Request;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{
    Account, AccountCredentials, BodyWrapper, BytesResponse, HttpClient, NewAccount,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use super::storage::Storage;
use crate::connect::tls::{client_config, system_roots};

/// The `Retry-After` of the CA's latest refusal, with when it was seen.
#[derive(Debug, Default)]
pub struct Refusals(Mutex<Option<(SystemTime, SystemTime)>>);

impl Refusals {
    /// The `Retry-After` of a refusal seen since `since`, if any. Orders
    /// running at once share the client: a refusal for one (a rate limit
    /// on the account, mostly) is then taken to hold for the other too.
    pub fn retry_after_since(&self, since: SystemTime) -> Option<SystemTime> {
        let latest = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        latest
            .filter(|(seen, _)| *seen >= since)
            .map(|(_, retry_after)| retry_after)
    }

    fn note(&self, retry_after: SystemTime) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((SystemTime::now(), retry_after));
    }
}

/// instant-acme's requests, over hyper-util's pooled client.
struct CaClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>,
    refusals: Arc<Refusals>,
}

impl HttpClient for CaClient {
    fn request(
        &self,
        request: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let response = self.client.request(request);
        let refusals = self.refusals.clone();
        Box::pin(async move {
            let response = response
                .await
                .map_err(|error| instant_acme::Error::Other(Box::new(error)))?;
            let status = response.status();
            if status.is_client_error() || status.is_server_error() {
                if let Some(retry_after) = response
                    .headers()
                    .get(RETRY_AFTER)
                    .and_then(|value| value.to_str().ok())
                    .and_then(parse_retry_after)
                {
                    refusals.note(retry_after);
                }
            }
            Ok(BytesResponse::from(response))
        })
    }
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110 §10.2.3).
fn parse_retry_after(value: &str) -> Option<SystemTime> {
    let value = value.trim();
    match value.parse::<u64>() {
        Ok(seconds) => Some(SystemTime::now() + Duration::from_secs(seconds)),
        Err(_) => httpdate::parse_http_date(value).ok(),
    }
}

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("--acme-ca {path}: {reason}")]
    Roots { path: String, reason: String },
}

/// A client trusting the system's roots and those in `extra_roots` (PEM).
fn ca_client(extra_roots: Option<&Path>, refusals: Arc<Refusals>) -> Result<CaClient, ClientError> {
    let mut roots = RootCertStore::clone(&system_roots());
    if let Some(path) = extra_roots {
        let error = |reason: String| ClientError::Roots {
            path: path.display().to_string(),
            reason,
        };
        let certificates = CertificateDer::pem_file_iter(path)
            .map_err(|e| error(e.to_string()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| error(e.to_string()))?;
        if certificates.is_empty() {
            return Err(error("no certificate in the file".to_owned()));
        }
        for certificate in certificates {
            roots.add(certificate).map_err(|e| error(e.to_string()))?;
        }
    }
    let mut tls = rustls::ClientConfig::clone(&client_config(true, Arc::new(roots)));
    // The connector sets ALPN from the HTTP versions enabled below.
    tls.alpn_protocols.clear();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    Ok(CaClient {
        client: Client::builder(TokioExecutor::new()).build(connector),
        refusals,
    })
}

/// What it takes to reach the CA as dockhand's account.
pub struct CaSettings {
    pub directory: String,
    pub email: String,
    pub extra_roots: Option<std::path::PathBuf>,
}

/// The account: read from storage, or created at the CA and stored. Each
/// call makes its own client (cheap), so a fixed `--acme-ca` file is read again.
pub async fn account(
    settings: &CaSettings,
    storage: &Storage,
    refusals: Arc<Refusals>,
) -> Result<Account, String> {
    let client = ca_client(settings.extra_roots.as_deref(), refusals).map_err(|e| e.to_string())?;
    let builder = Account::builder_with_http(Box::new(client));
    let stored = {
        let storage = storage.clone();
        tokio::task::spawn_blocking(move || storage.account())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("reading the stored account: {e}"))?
    };
    if let Some(text) = stored {
        match serde_json::from_str::<AccountCredentials>(&text) {
            Ok(credentials) => {
                return builder
                    .from_credentials(credentials)
                    .await
                    .map_err(|e| describe(&e));
            }
            Err(error) => {
                tracing::warn!(%error, "stored ACME account unreadable; creating a new one");
            }
        }
    }
    let contact = format!("mailto:{}", settings.email);
    let (account, credentials) = builder
        .create(
            &NewAccount {
                contact: &[&contact],
                terms_of_service_agreed: true,
                only_return_existing: false,
            },
            settings.directory.clone(),
            None,
        )
        .await
        .map_err(|e| describe(&e))?;
    let text = serde_json::to_string(&credentials).map_err(|e| e.to_string())?;
    let storage = storage.clone();
    tokio::task::spawn_blocking(move || storage.save_account(&text))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("storing the account: {e}"))?;
    tracing::info!(directory = %settings.directory, id = account.id(), "ACME account created");
    Ok(account)
}

/// An error as the diagnostics show it: the problem document's detail when
/// the CA sent one, else the error and its causes.
pub fn describe(error: &instant_acme::Error) -> String {
    match error {
        instant_acme::Error::Api(problem) => problem_detail(problem),
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let cause_text = cause.to_string();
                if !text.contains(&cause_text) {
                    text = format!("{text}: {cause_text}");
                }
                source = cause.source();
            }
            text
        }
    }
}

/// `detail` (with the subproblems' details), else the problem's type.
pub fn problem_detail(problem: &instant_acme::Problem) -> String {
    let mut text = problem
        .detail
        .clone()
        .or_else(|| problem.r#type.clone())
        .unwrap_or_else(|| "the CA refused without a detail".to_owned());
    for subproblem in &problem.subproblems {
        if let Some(detail) = &subproblem.detail {
            text = format!("{text}; {detail}");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_a_date() {
        let in_two_minutes = parse_retry_after("120").unwrap();
        let wait = in_two_minutes.duration_since(SystemTime::now()).unwrap();
        assert!(wait > Duration::from_secs(110) && wait <= Duration::from_secs(120));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(784111777))
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
