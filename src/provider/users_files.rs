//! `basic_auth.users_file`: the htpasswd files locations name, read when a
//! provider loads its routes (the file provider at each load, the label
//! providers at each publish), so an edited file is taken at the next
//! load, and no request waits on a file. A file that can't be read, or a
//! line that is not `user:hash` with a bcrypt or argon2id hash, is an
//! error diagnostic where the file is named; the location keeps its basic
//! auth with the users it has (with none, nobody is let in: a broken file
//! never opens a location).

use crate::config::middleware::users_of_file;
use crate::config::{Desired, Diagnostic, HostConfig, LocationConfig, Origin, Severity};

/// Where a location's `users_file` is written: its origin and its key.
pub type WrittenAt<'a> = dyn Fn(&HostConfig, &LocationConfig) -> (Origin, String) + Sync + 'a;

/// Reads the users files `desired` names into its locations' users, and
/// adds a diagnostic for each that fails.
pub async fn settle(desired: &mut Desired, written_at: &WrittenAt<'_>) {
    let mut problems = Vec::new();
    for host in &mut desired.hosts.hosts {
        for index in 0..host.locations.len() {
            let location = &host.locations[index];
            let Some(path) = location
                .middlewares
                .basic_auth
                .as_ref()
                .and_then(|auth| auth.users_file.clone())
            else {
                continue;
            };
            let read = match tokio::fs::read_to_string(&path).await {
                Ok(text) => users_of_file(&text),
                Err(error) => Err(format!("can't be read: {error}")),
            };
            match read {
                Ok(users) => {
                    let location = &mut host.locations[index];
                    if let Some(auth) = &mut location.middlewares.basic_auth {
                        auth.users.extend(users);
                    }
                }
                Err(reason) => {
                    let (origin, key) = written_at(host, location);
                    problems.push(Diagnostic {
                        origin,
                        key,
                        severity: Severity::Error,
                        reason: format!(
                            "{}: {reason}; only the users written elsewhere are let in",
                            path.display()
                        ),
                        value: None,
                        suggestion: None,
                    });
                }
            }
        }
    }
    if problems.is_empty() {
        return;
    }
    desired.diagnostics.extend(problems);
    desired
        .diagnostics
        .sort_by(|a, b| (&a.origin, &a.key).cmp(&(&b.origin, &b.key)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;

    fn desired_naming(path: &std::path::Path) -> Desired {
        let routes = serde_json::json!({"host": {"a.com": {"location": {"/": {
            "basic_auth": {"users_file": path},
            "upstream": {"127.0.0.1:9000": {}}
        }}}}});
        Desired {
            hosts: parse_routes_file(&routes.to_string()).unwrap(),
            ..Desired::default()
        }
    }

    fn written_at(_: &HostConfig, _: &LocationConfig) -> (Origin, String) {
        let origin = Origin::RoutesFile {
            path: "/etc/dockhand/routes.json".into(),
        };
        (origin, "basic_auth.users_file".to_owned())
    }

    fn users(desired: &Desired) -> Vec<String> {
        let auth = desired.hosts.hosts[0].locations[0]
            .middlewares
            .basic_auth
            .as_ref()
            .unwrap();
        auth.users.iter().map(|user| user.name.clone()).collect()
    }

    #[tokio::test]
    async fn a_files_users_are_read_and_a_bad_file_is_a_diagnostic_that_opens_nothing() {
        let folder = tempfile::tempdir().unwrap();
        let path = folder.path().join("htpasswd");
        let hash = bcrypt::hash("secret", 4).unwrap();
        std::fs::write(&path, format!("# admins\nalice:{hash}\n\nbob:{hash}\n")).unwrap();
        let mut desired = desired_naming(&path);
        settle(&mut desired, &written_at).await;
        assert_eq!(users(&desired), ["alice", "bob"]);
        assert!(desired.diagnostics.is_empty());

        std::fs::write(&path, format!("alice:{hash}\nbob:plain\n")).unwrap();
        let mut bad_line = desired_naming(&path);
        settle(&mut bad_line, &written_at).await;
        assert!(users(&bad_line).is_empty(), "no user of a bad file");
        let reason = &bad_line.diagnostics[0].reason;
        assert!(reason.contains("line 2: user `bob`"), "{reason}");

        let mut missing = desired_naming(&folder.path().join("absent"));
        settle(&mut missing, &written_at).await;
        assert!(users(&missing).is_empty());
        assert_eq!(missing.diagnostics[0].key, "basic_auth.users_file");
        assert!(missing.diagnostics[0].reason.contains("can't be read"));
    }
}
