//! Why dockhand could not start or keep serving, as one type for `run` and
//! `check`: each variant keeps the error underneath as its source.

use crate::provider::file::RoutesFileError;
use crate::settings::SettingsError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    RoutesFile(#[from] RoutesFileError),
}
