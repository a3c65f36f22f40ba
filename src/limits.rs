//! The process's open-file limit: every client and upstream connection is a
//! descriptor, and the usual soft limit (1,024) would refuse connections
//! long before memory or CPU run short. The binary raises it to the hard
//! limit at start, as nginx's `worker_rlimit_nofile` and Go's runtime do.

use std::io;

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Where the soft limit is raised to when the hard one is unlimited: the
/// kernel's default `fs.nr_open`.
const UNLIMITED_TARGET: u64 = 1 << 20;

/// The open-file limit before and after raising it; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFileLimit {
    pub before: Option<u64>,
    pub after: Option<u64>,
}

/// Raises the soft open-file limit to the hard one.
pub fn raise_open_file_limit() -> io::Result<OpenFileLimit> {
    let limit = getrlimit(Resource::Nofile);
    let target = limit.maximum.unwrap_or(UNLIMITED_TARGET);
    if limit.current.is_none_or(|current| current >= target) {
        return Ok(OpenFileLimit {
            before: limit.current,
            after: limit.current,
        });
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: limit.maximum,
        },
    )?;
    Ok(OpenFileLimit {
        before: limit.current,
        after: Some(target),
    })
}
