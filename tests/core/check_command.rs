//! `dockhand check`, the real binary: a routes file's problems, and the
//! certificates directory's, printed as text lines or one JSON document,
//! without serving; exit 0 when none is an error, 1 when one is, 2 when the
//! check can't run (Docker unreachable).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::tls_support::TestCa;

const BAD: &str = r#"{"host": {
    "a.com": {"location": {"/": {"upstraem": {}, "retry": {"attempts": 11}}}}
}}"#;
const GOOD: &str = r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#;

fn routes_file(dir: &Path, contents: &str) -> PathBuf {
    let path = dir.join("routes.json");
    std::fs::write(&path, contents).unwrap();
    path
}

fn check(arguments: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .arg("check")
        .args(arguments)
        .env_remove("DOCKHAND_ROUTES")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_bad_routes_file_prints_every_problem_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = routes_file(dir.path(), BAD);
    let output = check(&["--routes", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let printed = stdout(&output);
    let lines: Vec<&str> = printed.lines().collect();
    let file = path.display();
    assert_eq!(
        lines,
        [
            format!(
                r#"error: routes file {file}: host."a.com".location."/": unknown key `upstraem` (did you mean `upstream`?)"#
            ),
            format!(
                r#"error: routes file {file}: host."a.com".location."/".retry.attempts: must be a whole number from 0 to 10, found 11"#
            ),
            format!(
                r#"error: routes file {file}: host."a.com".location."/": a location needs at least one upstream"#
            ),
            format!("3 errors, 0 warnings (checked routes file {file})"),
        ]
    );
}

#[test]
fn the_json_form_has_each_diagnostic_with_its_suggestion_and_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = routes_file(dir.path(), BAD);
    let output = check(&["--routes", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let document: Value = serde_json::from_str(&stdout(&output)).expect("one JSON document");
    assert_eq!(
        document["counts"],
        serde_json::json!({"error": 3, "warning": 0})
    );
    let typo = &document["diagnostics"][0];
    assert_eq!(typo["severity"], "error");
    assert_eq!(typo["source"], "routes_file");
    assert_eq!(typo["path"], path.to_str().unwrap());
    assert_eq!(typo["key"], r#"host."a.com".location."/""#);
    assert_eq!(typo["value"], Value::Null);
    assert_eq!(typo["reason"], "unknown key `upstraem`");
    assert_eq!(typo["suggestion"], "upstream");
    assert!(
        typo["message"]
            .as_str()
            .unwrap()
            .ends_with("unknown key `upstraem` (did you mean `upstream`?)"),
        "{typo}"
    );
    assert_eq!(document["diagnostics"].as_array().unwrap().len(), 3);
}

#[test]
fn a_good_routes_file_exits_0_in_both_forms() {
    let dir = tempfile::tempdir().unwrap();
    let path = routes_file(dir.path(), GOOD);
    let output = check(&["--routes", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!(
            "0 errors, 0 warnings (checked routes file {})\n",
            path.display()
        )
    );
    let output = check(&["--routes", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(output.status.code(), Some(0));
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(
        document,
        serde_json::json!({"diagnostics": [], "counts": {"error": 0, "warning": 0}})
    );
}

#[test]
fn without_check_flags_it_checks_the_routes_file_dockhand_would_serve() {
    let dir = tempfile::tempdir().unwrap();
    let path = routes_file(dir.path(), BAD);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
        .args(["--no-docker", "check"])
        .env("DOCKHAND_ROUTES", &path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).contains("3 errors, 0 warnings"),
        "{output:?}"
    );
}

#[test]
fn a_file_that_cannot_be_read_is_an_error() {
    let output = check(&["--routes", "/nonexistent/routes.json"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stdout(&output).starts_with("error: routes file /nonexistent/routes.json: can't be read: "),
        "{output:?}"
    );
}

#[test]
fn docker_out_of_reach_exits_2_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("no-docker.sock");
    let host = format!("unix://{}", socket.display());
    let output = check(&["--docker", "--docker-host", &host]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stdout(&output), "", "no verdict is printed");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("dockhand check: can't reach Docker at {host}")),
        "{stderr}"
    );
}

#[test]
fn a_mismatched_certificate_pair_exits_1_naming_its_file_and_a_good_one_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("dockhand check test CA");
    ca.leaf("good.example.com").write_pair(dir.path(), "good");
    let certs = dir.path().to_str().unwrap();
    let output = check(&["--no-docker", "--certs-dir", certs]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!("0 errors, 0 warnings (checked certificates directory {certs})\n")
    );

    ca.leaf("bad.example.com").write_pair(dir.path(), "bad");
    let other = ca.leaf("bad.example.com");
    std::fs::write(dir.path().join("bad.key"), &other.key_pem).unwrap();
    let bad = dir.path().join("bad.crt");
    let output = check(&["--no-docker", "--certs-dir", certs]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(
        stdout(&output),
        format!(
            "error: certificate {}: the private key does not belong to the certificate\n\
             1 error, 0 warnings (checked certificates directory {certs})\n",
            bad.display()
        )
    );
    let output = check(&["--no-docker", "--certs-dir", certs, "--format", "json"]);
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let diagnostic = &document["diagnostics"][0];
    assert_eq!(diagnostic["source"], "certificate_file");
    assert_eq!(diagnostic["path"], bad.to_str().unwrap());
}

#[test]
fn a_users_file_that_cannot_be_read_is_an_error_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.htpasswd");
    let routes = serde_json::json!({"host": {"a.com": {"location": {"/": {
        "basic_auth": {"users_file": users},
        "upstream": {"10.0.0.1:80": {}}
    }}}}});
    let path = routes_file(dir.path(), &routes.to_string());
    let output = check(&["--routes", path.to_str().unwrap(), "--format", "json"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let document: Value = serde_json::from_str(&stdout(&output)).unwrap();
    let problem = &document["diagnostics"][0];
    assert_eq!(
        problem["key"],
        r#"host."a.com".location."/".basic_auth.users_file"#
    );
    assert!(
        problem["reason"]
            .as_str()
            .unwrap()
            .contains("can't be read"),
        "{problem}"
    );

    // Once written with a good line, the same file checks clean.
    let hash = "$2y$04$rLA2eb2HArGuhTT5i9Z3b.26D84MJAC6RoeQtL7ZuJydDLQq9yeuK";
    std::fs::write(&users, format!("alice:{hash}\n")).unwrap();
    let output = check(&["--routes", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}
