//! Finding dockhand's own container, to learn which networks it can reach
//! containers through. Inside a container, Docker bind-mounts files from
//! `/var/lib/docker/containers/<id>/` (hostname, hosts, resolv.conf), which
//! `/proc/self/mountinfo` shows; the hostname (the short id by default) is
//! the fallback.

/// Candidate ids or names of the container this process runs in, best first.
/// The files are read off the runtime's worker thread.
pub async fn own_container_candidates() -> Vec<String> {
    let mut candidates = Vec::new();
    if let Ok(mountinfo) = tokio::fs::read_to_string("/proc/self/mountinfo").await {
        candidates.extend(container_id_from_mountinfo(&mountinfo));
    }
    if let Ok(hostname) = tokio::fs::read_to_string("/etc/hostname").await {
        let hostname = hostname.trim();
        if !hostname.is_empty() {
            candidates.push(hostname.to_owned());
        }
    }
    candidates
}

/// Files Docker mounts into every container from its own folder.
const DOCKER_MOUNTED_FILES: [&str; 3] = ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

/// The 64-hex id in the source of the `/etc/hostname` (or hosts, resolv.conf)
/// mount. Only those mount points count: on the host itself, mountinfo lists
/// every container's `/var/lib/docker/containers/<id>/mounts/shm`.
pub fn container_id_from_mountinfo(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let source = fields.nth(3)?;
        let mount_point = fields.next()?;
        if !DOCKER_MOUNTED_FILES.contains(&mount_point) {
            return None;
        }
        let (_, after) = source.split_once("/containers/")?;
        let id = after.split('/').next()?;
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_id_in_mountinfo() {
        let id = "4f1b2c3d4e5f60718293a4b5c6d7e8f90123456789abcdef0123456789abcdef";
        let mountinfo = format!(
            "612 590 0:52 / / rw,relatime - overlay overlay rw\n\
             631 612 254:1 /var/lib/docker/containers/{id}/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n"
        );
        assert_eq!(container_id_from_mountinfo(&mountinfo).as_deref(), Some(id));
        assert_eq!(
            container_id_from_mountinfo("612 590 0:52 / / rw - overlay overlay rw\n"),
            None
        );
        let host_view =
            format!("700 29 0:60 / /var/lib/docker/containers/{id}/mounts/shm rw - tmpfs shm rw\n");
        assert_eq!(
            container_id_from_mountinfo(&host_view),
            None,
            "the host is not in that container"
        );
    }
}
