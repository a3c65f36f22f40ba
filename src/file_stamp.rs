//! What `stat` says of a file, to tell at a poll whether it may have
//! changed without reading it: the routes file (a 10,000-host file is a
//! megabyte, and reading and comparing it every second cost its time and
//! pushed the serving worker's caches out each time) and the certificates
//! directory's files.
//!
//! The stamp holds the file's device and inode (a file renamed into place,
//! or a ConfigMap's link moved, is another file), its length, and its
//! modification and status-change times. The status-change time moves at
//! every write and can't be set back (as `touch -d` sets the modification
//! time back), so an edit that keeps the length and the modification time
//! still changes the stamp. The one change a stamp can miss is a write in
//! the same tick of the file system's clock as the `stat` that recorded
//! it: a stamp of a file changed less than `SETTLED` before it was taken is
//! not trusted, and the contents are read and compared as before.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long before a stamp is taken the file must have last changed for
/// the stamp to be trusted: far more than any file system's clock tick.
const SETTLED: Duration = Duration::from_secs(1);

/// The file as `stat` sees it, when it can be trusted to tell a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    len: u64,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file at `path` now (`None` when it can't be had).
    pub async fn of(path: &Path) -> Option<FileStamp> {
        let metadata = tokio::fs::metadata(path).await.ok()?;
        Some(FileStamp::from_metadata(&metadata))
    }

    /// The stamp `stat` (or `metadata`) gave; symbolic links followed.
    pub fn from_metadata(metadata: &Metadata) -> FileStamp {
        FileStamp {
            device: metadata.dev(),
            inode: metadata.ino(),
            len: metadata.size(),
            modified: (metadata.mtime(), metadata.mtime_nsec()),
            changed: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }

    /// The stamp, if the file's last change was `SETTLED` before `taken_at`
    /// (when the stamp was taken): a later change in the same clock tick
    /// would leave it as it is.
    pub fn if_settled(self, taken_at: SystemTime) -> Option<FileStamp> {
        let (seconds, nanoseconds) = self.changed;
        // A time before 1970 is not one to trust.
        let since_epoch = Duration::new(
            u64::try_from(seconds).ok()?,
            u32::try_from(nanoseconds).ok()?,
        );
        (UNIX_EPOCH + since_epoch + SETTLED <= taken_at).then_some(self)
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Write;

    use super::*;

    fn stamp(path: &Path) -> FileStamp {
        FileStamp::from_metadata(&std::fs::metadata(path).unwrap())
    }

    #[test]
    fn an_edit_that_keeps_the_length_and_the_modification_time_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes.json");
        std::fs::write(&path, "{\"a\": 1}").unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let before = stamp(&path);
        assert_eq!(stamp(&path), before, "the same file, unchanged");
        // Long enough for the status-change time to move on any clock.
        std::thread::sleep(Duration::from_millis(20));
        let mut file = File::options().write(true).open(&path).unwrap();
        file.write_all(b"{\"a\": 2}").unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        let after = stamp(&path);
        assert_eq!(after.len, before.len);
        assert_eq!(after.modified, before.modified, "set back");
        assert_ne!(after, before);
    }

    #[test]
    fn a_file_renamed_into_place_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes.json");
        let next = dir.path().join("routes.json.next");
        std::fs::write(&path, "{}").unwrap();
        let before = stamp(&path);
        std::fs::write(&next, "{}").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_ne!(stamp(&path), before);
    }

    #[test]
    fn a_stamp_of_a_file_changed_just_before_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("routes.json");
        std::fs::write(&path, "{}").unwrap();
        let stamp = stamp(&path);
        let now = SystemTime::now();
        assert_eq!(stamp.if_settled(now), None, "changed within SETTLED");
        assert_eq!(stamp.if_settled(now + SETTLED), Some(stamp));
    }
}
