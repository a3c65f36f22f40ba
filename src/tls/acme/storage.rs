//! What ACME keeps across restarts, in `--acme-storage`: per CA directory
//! (so a staging certificate is never served by a production setup), the
//! account's credentials and each certificate issued, its key and chain in
//! one PEM file so the pair can't be half written. Every write is atomic (a
//! temporary file in the same folder, synced, then renamed over the old
//! one); files holding keys are `0600`, folders `0700`. Blocking: callers
//! run it off the runtime.
//!
//! Several dockhand replicas may share one storage (a shared volume): an
//! order takes a lock file first, so the same certificate is not ordered
//! twice, and writes its HTTP-01 answers where every replica can read them
//! (the CA may ask any replica). A lock holds an expiry, so a replica that
//! died holding one keeps it only until then.
//!
//! ```text
//! <storage>/<directory URL as a file name>/account.json
//! <storage>/<directory URL as a file name>/certificates/<first name>.pem
//! <storage>/<directory URL as a file name>/locks/<first name>.lock
//! <storage>/<directory URL as a file name>/challenges/<HTTP-01 token>
//! ```

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::tls::Certificate;

const ACCOUNT_FILE: &str = "account.json";
const CERTIFICATES_DIR: &str = "certificates";
const LOCKS_DIR: &str = "locks";
pub const CHALLENGES_DIR: &str = "challenges";

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

    /// The stored certificate `id`, if there is one (another replica may
    /// have stored it since this one looked).
    pub fn certificate(&self, id: &str) -> io::Result<Option<StoredCertificate>> {
        let path = self.dir.join(CERTIFICATES_DIR).join(format!("{id}.pem"));
        match fs::read_to_string(path) {
            Ok(pem) => Ok(Some(StoredCertificate {
                id: id.to_owned(),
                pem,
            })),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Takes the lock on ordering certificate `id` for `holder` until
    /// `expires` (Unix seconds), unless another holder has it and it has
    /// not expired: then who has it, and until when.
    pub fn try_lock(&self, id: &str, holder: &str, expires: u64, now: u64) -> io::Result<Locked> {
        let dir = self.dir.join(LOCKS_DIR);
        create_private_dir(&dir)?;
        let path = dir.join(format!("{id}.lock"));
        let contents = format!("{holder}\n{expires}\n");
        // Twice at most: once more after an expired lock is taken away.
        for _ in 0..2 {
            match create_new(&path, contents.as_bytes()) {
                Ok(()) => return Ok(Locked::Taken),
                Err(error) if error.kind() != io::ErrorKind::AlreadyExists => return Err(error),
                Err(_) => {}
            }
            let found = match fs::read_to_string(&path) {
                Ok(found) => found,
                // Released meanwhile: try again.
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            let (other, until) = parse_lock(&found);
            if until > now {
                return Ok(Locked::HeldBy {
                    holder: other.to_owned(),
                    until,
                });
            }
            tracing::info!(%id, holder = other, "an expired ACME order lock is taken over");
            remove_if_unchanged(&path, &found)?;
        }
        Ok(Locked::HeldBy {
            holder: "another replica".to_owned(),
            until: now,
        })
    }

    /// Gives the lock on `id` back, if `holder` still has it.
    pub fn unlock(&self, id: &str, holder: &str) -> io::Result<()> {
        let path = self.dir.join(LOCKS_DIR).join(format!("{id}.lock"));
        match fs::read_to_string(&path) {
            Ok(found) if parse_lock(&found).0 == holder => remove_if_unchanged(&path, &found),
            Ok(_) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Where HTTP-01 answers are written for every replica to read.
    pub fn challenges_dir(&self) -> PathBuf {
        self.dir.join(CHALLENGES_DIR)
    }

    pub fn save_http01(&self, token: &str, key_authorization: &str) -> io::Result<()> {
        let dir = self.challenges_dir();
        create_private_dir(&dir)?;
        write_atomically(&dir.join(file_name_of(token)), key_authorization.as_bytes())
    }

    pub fn remove_http01(&self, token: &str) -> io::Result<()> {
        match fs::remove_file(self.challenges_dir().join(file_name_of(token))) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }

    /// Removes a certificate another one replaced.
    pub fn remove_certificate(&self, id: &str) -> io::Result<()> {
        match fs::remove_file(self.dir.join(CERTIFICATES_DIR).join(format!("{id}.pem"))) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

/// What [`Storage::try_lock`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locked {
    Taken,
    HeldBy { holder: String, until: u64 },
}

/// A lock file's holder and expiry; an unreadable one has expired.
fn parse_lock(text: &str) -> (&str, u64) {
    let mut lines = text.lines();
    let holder = lines.next().unwrap_or_default();
    let until = lines.next().and_then(|line| line.parse().ok()).unwrap_or(0);
    (holder, until)
}

/// Creates `path` with `contents`, failing if it exists. The contents are
/// written first, under a name of this write's own, then linked as `path`:
/// a link is made whole or not at all, so no replica ever reads the lock
/// before its holder and expiry are in it (an empty lock read as expired
/// let two replicas started together both order).
fn create_new(path: &Path, contents: &[u8]) -> io::Result<()> {
    let staging = staged(path, contents)?;
    let linked = fs::hard_link(&staging, path);
    let removed = fs::remove_file(&staging);
    linked?;
    removed?;
    sync_parent(path)
}

/// Removes `path` if it still holds `expected`: a lock another replica
/// took in the meantime stays (two replicas taking over the same expired
/// lock at the same instant may still both order: one certificate too many).
fn remove_if_unchanged(path: &Path, expected: &str) -> io::Result<()> {
    match fs::read_to_string(path) {
        Ok(found) if found == expected => match fs::remove_file(path) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        },
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

impl StoredCertificate {
    /// The file for an issued chain and its key, named after the first name.
    pub fn new(names: &[String], chain: &str, key: &str) -> StoredCertificate {
        StoredCertificate {
            id: StoredCertificate::id_of(names),
            pem: format!("{}\n{}", key.trim_end(), chain),
        }
    }

    /// The id a certificate for `names` (sorted) is stored under.
    pub fn id_of(names: &[String]) -> String {
        file_name_of(names.first().map_or("certificate", String::as_str))
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
    let staging = staged(path, contents)?;
    if let Err(error) = fs::rename(&staging, path) {
        let _ = fs::remove_file(&staging);
        return Err(error);
    }
    sync_parent(path)
}

/// A new temporary file beside `path` holding `contents`, synced (mode
/// `0600`). Its name is this write's own: replicas sharing the folder
/// never write into the same one.
fn staged(path: &Path, contents: &[u8]) -> io::Result<PathBuf> {
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let staging = path.with_file_name(format!(".{file_name}.{:016x}.tmp", rand::random::<u64>()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&staging)?;
    if let Err(error) = file.write_all(contents).and_then(|()| file.sync_all()) {
        let _ = fs::remove_file(&staging);
        return Err(error);
    }
    Ok(staging)
}

fn sync_parent(path: &Path) -> io::Result<()> {
    fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
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

    #[test]
    fn an_order_lock_is_held_until_released_or_expired() {
        let root = tempfile::tempdir().unwrap();
        let storage = Storage::new(root.path(), "https://ca.example/dir");
        assert_eq!(
            storage.try_lock("a.test", "one", 200, 100).unwrap(),
            Locked::Taken
        );
        let held = Locked::HeldBy {
            holder: "one".into(),
            until: 200,
        };
        assert_eq!(storage.try_lock("a.test", "two", 300, 150).unwrap(), held);
        assert_eq!(
            storage.try_lock("b.test", "two", 300, 150).unwrap(),
            Locked::Taken,
            "per certificate"
        );
        // Only its holder gives it back.
        storage.unlock("a.test", "two").unwrap();
        assert_eq!(storage.try_lock("a.test", "two", 300, 150).unwrap(), held);
        storage.unlock("a.test", "one").unwrap();
        assert_eq!(
            storage.try_lock("a.test", "two", 300, 150).unwrap(),
            Locked::Taken
        );
        // A holder that died: its lock ends at its expiry.
        assert_eq!(
            storage.try_lock("a.test", "three", 400, 301).unwrap(),
            Locked::Taken
        );
        assert_eq!(
            storage.try_lock("a.test", "one", 500, 302).unwrap(),
            Locked::HeldBy {
                holder: "three".into(),
                until: 400
            }
        );
    }

    /// Replicas started together race for the same lock: exactly one
    /// takes it. A lock file seen before its holder and expiry were in it
    /// once read as expired, and both ordered.
    #[test]
    fn of_replicas_racing_for_a_lock_exactly_one_takes_it() {
        for _ in 0..3000 {
            let root = tempfile::tempdir().unwrap();
            let start = std::sync::Barrier::new(2);
            let taken = std::thread::scope(|scope| {
                let racers = ["one", "two"].map(|holder| {
                    let (root, start) = (root.path(), &start);
                    scope.spawn(move || {
                        let storage = Storage::new(root, "https://ca.example/dir");
                        start.wait();
                        storage.try_lock("a.test", holder, 200, 100).unwrap()
                    })
                });
                racers
                    .into_iter()
                    .map(|racer| racer.join().unwrap())
                    .filter(|locked| *locked == Locked::Taken)
                    .count()
            });
            assert_eq!(taken, 1);
        }
    }

    /// Replicas writing the same file at once (the account, when both
    /// ordered) both succeed: each writes a temporary file of its own.
    #[test]
    fn replicas_writing_the_same_file_at_once_both_succeed() {
        let root = tempfile::tempdir().unwrap();
        for round in 0..300 {
            let start = std::sync::Barrier::new(2);
            std::thread::scope(|scope| {
                for replica in ["one", "two"] {
                    let (root, start) = (root.path(), &start);
                    scope.spawn(move || {
                        let storage = Storage::new(root, "https://ca.example/dir");
                        start.wait();
                        storage.save_account(&format!("{replica} {round}")).unwrap();
                    });
                }
            });
        }
        let storage = Storage::new(root.path(), "https://ca.example/dir");
        let account = storage.account().unwrap().unwrap();
        assert!(account.ends_with(" 299"), "{account}");
        let left = fs::read_dir(&storage.dir).unwrap().count();
        assert_eq!(left, 1, "no temporary file is left");
    }

    #[test]
    fn http01_answers_are_written_for_every_replica_and_removed() {
        let root = tempfile::tempdir().unwrap();
        let storage = Storage::new(root.path(), "https://ca.example/dir");
        storage.save_http01("tok-EN_1", "tok-EN_1.thumb").unwrap();
        let path = storage.challenges_dir().join("tok-EN_1");
        assert_eq!(fs::read_to_string(&path).unwrap(), "tok-EN_1.thumb");
        storage.remove_http01("tok-EN_1").unwrap();
        assert!(!path.exists());
    }
}
