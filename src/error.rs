//! Why dockhand could not start or keep serving, as one type for `run` and
//! `check`: each variant keeps the error underneath as its source.

use crate::admin::ExposedWithoutToken;
use crate::provider::file::RoutesFileError;
use crate::settings::SettingsError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    RoutesFile(#[from] RoutesFileError),
    #[error(transparent)]
    AdminExposed(#[from] ExposedWithoutToken),
    #[error("--certs-dir {}: {error}", dir.display())]
    CertsDir {
        dir: std::path::PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("the HTTPS listener's TLS configuration: {0}")]
    TlsConfig(#[source] rustls::Error),
    #[error("the admin listener's address is unknown: {0}")]
    AdminListener(#[source] std::io::Error),
    #[error("the {scheme} listener can't be given to every worker: {error}")]
    WorkerListener {
        scheme: &'static str,
        #[source]
        error: std::io::Error,
    },
    #[error("the worker threads can't start: {0}")]
    Workers(#[source] std::io::Error),
}
