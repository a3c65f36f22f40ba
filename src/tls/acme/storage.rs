//! What ACME keeps across restarts, in `--acme-storage`: per CA directory
//! (so a staging certificate is never served by a production setup), the
//! account's credentials and each certificate issued, its key and chain in
//! one PEM file so the pair can't be half written. Every write is atomic (a
//! temporary file in the same folder, synced, then renamed over the old
//! one); files holding keys are `0600`, folders `0700`. Blocking: callers
//! run it off the runtime.
//!
//! ```text
//! <storage>/<directory URL as a file name>/account.json
//! <storage>/<directory URL as a file name>/certificates/<first name>.pem
//! ```

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::tls::Certificate;

const ACCOUNT_FILE: &str = "account.json";
const CERTIFICATES_DIR: &str = "certificates";

/// One CA directory's part of the storage.
#[derive(Debug, Clone)]
pub struct Storage {
    dir: PathBuf,
}

/// A certificate as stored: its id (the file's stem) and PEM text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCertificate {
    pub id: String,
    /// The key, then the chain (leaf first).
    pub pem: String,
}

impl Storage {
    pub fn new(storage: &Path, directory_url: &str) -> Storage {
        Storage {
            dir: storage.join(file_name_of(directory_url)),
        }
    }

    /// The stored account credentials (JSON), if any.
    pub fn account(&self) -> io::Result<Option<String>> {
        match fs::read_to_string(self.dir.join(ACCOUNT_FILE)) {
            Ok(text) => Ok(Some(text)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    pub fn save_account(&self, credentials: &str) -> io::Result<()> {
        create_private_dir(&self.dir)?;
        write_atomically(&self.dir.join(ACCOUNT_FILE), credentials.as_bytes())
    }

    /// Every stored certificate, as text; unreadable files are skipped with a warning.
    pub fn certificates(&self) -> io::Result<Vec<StoredCertificate>> {
        let entries = match fs::read_dir(self.dir.join(CERTIFICATES_DIR)) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut found = Vec::new();
        for entry in entries {
            let path = entry?.path();
            let Some(id) = path
                .extension()
                .filter(|extension| *extension == "pem")
                .and_then(|_| path.file_stem())
                .and_then(|stem| stem.to_str())
            else {
                continue;
            };
            match fs::read_to_string(&path) {
                Ok(pem) => found.push(StoredCertificate {
                    id: id.to_owned(),
                    pem,
                }),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "stored ACME certificate unreadable; it will be ordered again")
                }
            }
        }
        found.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(found)
    }

    pub fn save_certificate(&self, certificate: &StoredCertificate) -> io::Result<()> {
        let dir = self.dir.join(CERTIFICATES_DIR);
        create_private_dir(&dir)?;
        write_atomically(
            &dir.join(format!("{}.pem", certificate.id)),
            certificate.pem.as_bytes(),
        )
    }

    /// Removes a certificate another one replaced.
    pub fn remove_certificate(&self, id: &str) -> io::Result<()> {
        match fs::remove_file(self.dir.join(CERTIFICATES_DIR).join(format!("{id}.pem"))) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

impl StoredCertificate {
    /// The file for an issued chain and its key, named after the first name.
    pub fn new(names: &[String], chain: &str, key: &str) -> StoredCertificate {
        let first = names.first().map_or("certificate", String::as_str);
        StoredCertificate {
            id: file_name_of(first),
            pem: format!("{}\n{}", key.trim_end(), chain),
        }
    }

    /// The certificate as served.
    pub fn parse(&self) -> Result<Certificate, crate::tls::CertificateError> {
        Certificate::from_pem(self.pem.as_bytes(), self.pem.as_bytes())
    }
}

/// `text` with every character a file name should not hold replaced by `_`.
fn file_name_of(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' => c,
            _ => '_',
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_owned()
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `contents` to a temporary file beside `path` (mode `0600`),
/// syncs it, renames it over `path` and syncs the folder: a reader, or a
/// restart after a crash, finds the old file or the new one, never part.
fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let staging = dir.join(format!(".{file_name}.tmp"));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&staging)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&staging, path)?;
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_certificate_and_the_account_are_kept_private_and_read_back() {
        let root = tempfile::tempdir().unwrap();
        let storage_dir = root.path().join("acme");
        let storage = Storage::new(&storage_dir, "https://ca.example:14000/dir");
        assert_eq!(storage.account().unwrap(), None);
        assert_eq!(storage.certificates().unwrap(), []);
        storage.save_account(r#"{"id":"x"}"#).unwrap();
        let issued = rcgen::generate_simple_self_signed(vec!["a.example.com".to_owned()]).unwrap();
        let stored = StoredCertificate::new(
            &["a.example.com".to_owned()],
            &issued.cert.pem(),
            &issued.signing_key.serialize_pem(),
        );
        storage.save_certificate(&stored).unwrap();
        assert_eq!(storage.account().unwrap().as_deref(), Some(r#"{"id":"x"}"#));
        assert_eq!(
            storage.certificates().unwrap(),
            std::slice::from_ref(&stored)
        );
        assert_eq!(stored.parse().unwrap().names, ["a.example.com"]);
        let dir = storage_dir.join("https___ca.example_14000_dir");
        assert_eq!(mode(&storage_dir), 0o700);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("account.json")), 0o600);
        let file = dir.join("certificates/a.example.com.pem");
        assert_eq!(mode(&file), 0o600);
        assert_eq!(
            fs::read_dir(dir.join("certificates")).unwrap().count(),
            1,
            "no temporary file left"
        );
        let other_ca = Storage::new(&storage_dir, "https://other.example/dir");
        assert_eq!(other_ca.certificates().unwrap(), [], "kept per CA");
        storage.remove_certificate("a.example.com").unwrap();
        assert_eq!(storage.certificates().unwrap(), []);
    }
}
