//! The certificates directory (`--certs-dir`): PEM pairs named
//! `<name>.crt` + `<name>.key`, or `<name>/fullchain.pem` +
//! `<name>/privkey.pem` as certbot writes them. Which names a certificate
//! serves comes from the certificate itself (its subjectAltName), never
//! from the file name.
//!
//! Reading is pure of the store: `load_dir` gives each pair or why it
//! failed, and `stamp_dir` what the files look like (to tell a change).
//! `watch` follows the directory while serving, `diagnose` turns pairs into
//! diagnostics for it and for `dockhand check`.

mod diagnose;
mod watch;

pub use diagnose::{check, EXPIRY_WARNING};
pub use watch::{CertsDir, FileCertificates};

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::certificate::{Certificate, CertificateError};
use crate::file_stamp::FileStamp;

/// One pair found in the directory: where its certificate is, and what
/// loading it gave.
#[derive(Debug)]
pub struct LoadedPair {
    /// The chain's file, which names the pair in diagnostics.
    pub chain_path: PathBuf,
    pub key_path: PathBuf,
    pub certificate: Result<Arc<Certificate>, PairError>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PairError {
    #[error("{path}: {error}")]
    Read { path: String, error: String },
    #[error(transparent)]
    Certificate(#[from] CertificateError),
}

/// Every pair in `dir`, sorted by path. Reads files: call it off the
/// runtime's threads (`spawn_blocking`).
pub fn load_dir(dir: &Path) -> io::Result<Vec<LoadedPair>> {
    let mut pairs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let pair = if path.is_dir() {
            Some((path.join("fullchain.pem"), path.join("privkey.pem")))
        } else if path.extension().is_some_and(|extension| extension == "crt") {
            Some((path.clone(), path.with_extension("key")))
        } else {
            None
        };
        if let Some((chain_path, key_path)) = pair {
            if !chain_path.exists() {
                continue;
            }
            let certificate = load_pair(&chain_path, &key_path);
            pairs.push(LoadedPair {
                chain_path,
                key_path,
                certificate,
            });
        }
    }
    pairs.sort_by(|a, b| a.chain_path.cmp(&b.chain_path));
    Ok(pairs)
}

/// What the directory's files look like: each file's `FileStamp` (its
/// size, times and inode), so a file replaced by a rename is a change even
/// when its size and time match the old one. Symbolic links are followed
/// (certbot's `live/` links into `archive/`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DirStamp(BTreeMap<PathBuf, FileStamp>);

/// The stamp of every file in `dir` and in its subdirectories one level
/// down (where certbot's pairs are). Reads metadata: call it off the
/// runtime's threads.
pub fn stamp_dir(dir: &Path) -> io::Result<DirStamp> {
    let mut stamps = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            // A subdirectory that vanished since is simply not stamped.
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                stamp_file(inner.path(), &mut stamps);
            }
        } else {
            stamp_file(path, &mut stamps);
        }
    }
    Ok(DirStamp(stamps))
}

fn stamp_file(path: PathBuf, stamps: &mut BTreeMap<PathBuf, FileStamp>) {
    if let Ok(metadata) = std::fs::metadata(&path) {
        stamps.insert(path, FileStamp::from_metadata(&metadata));
    }
}

fn load_pair(chain_path: &Path, key_path: &Path) -> Result<Arc<Certificate>, PairError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| PairError::Read {
            path: path.display().to_string(),
            error: error.to_string(),
        })
    };
    let chain = read(chain_path)?;
    let key = read(key_path)?;
    Ok(Arc::new(Certificate::from_pem(&chain, &key)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_are_read_and_a_bad_pair_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["a.example.com".into()]).unwrap();
        std::fs::write(dir.path().join("a.crt"), a.cert.pem()).unwrap();
        std::fs::write(dir.path().join("a.key"), a.signing_key.serialize_pem()).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b.example.com".into()]).unwrap();
        let certbot = dir.path().join("b.example.com");
        std::fs::create_dir(&certbot).unwrap();
        std::fs::write(certbot.join("fullchain.pem"), b.cert.pem()).unwrap();
        std::fs::write(certbot.join("privkey.pem"), b.signing_key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("c.crt"), a.cert.pem()).unwrap();
        std::fs::write(dir.path().join("c.key"), b.signing_key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("README"), "not a certificate").unwrap();

        let pairs = load_dir(dir.path()).unwrap();
        let names: Vec<_> = pairs
            .iter()
            .map(|pair| match &pair.certificate {
                Ok(certificate) => certificate.names.join(","),
                Err(error) => error.to_string(),
            })
            .collect();
        assert_eq!(
            names,
            [
                "a.example.com",
                "b.example.com",
                "the private key does not belong to the certificate"
            ]
        );
    }
}
