//! `dockhand check`: the routes file, the containers' labels (and a swarm
//! manager's services'), the users files they name, and the certificates
//! directory read as serving would read them, every problem printed (text lines or one JSON
//! document), nothing served. The exit status is `nginx -t`'s: 0 when no
//! problem is an error, 1 when one is, and 2 when the check itself could not
//! run (Docker unreachable, nothing to check).

use std::path::PathBuf;
use std::process::ExitCode;

use dockhand::config::{Diagnostic, SeverityCounts};
use dockhand::provider::{docker, file, swarm};
use dockhand::settings::{DockerMode, Settings};
use dockhand::tls;
use serde_json::json;

use crate::cli::{CheckFlags, CheckFormat};

/// The check could not run: not a verdict on the configuration.
const CANNOT_CHECK: u8 = 2;

pub fn run(check: &CheckFlags, settings: &Settings) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return cannot_check(&format!("can't start the runtime: {error}")),
    };
    runtime.block_on(check_all(check, settings))
}

async fn check_all(check: &CheckFlags, settings: &Settings) -> ExitCode {
    // `check --routes FILE` alone checks that file only; otherwise what
    // serving would read: the routes file if one is set, and Docker unless
    // `--no-docker`.
    let routes: Option<PathBuf> = check.routes.clone().or(settings.routes_file.clone());
    let docker = match (check.docker, &settings.docker) {
        (true, None) => {
            return cannot_check("check --docker and --no-docker contradict each other")
        }
        (true, Some(docker)) => Some(docker),
        (false, docker) if check.routes.is_none() => docker.as_ref(),
        (false, _) => None,
    };
    let certs_dir = settings.tls.certs_dir.as_ref();
    if routes.is_none() && docker.is_none() && certs_dir.is_none() {
        return cannot_check("nothing to check: give --routes FILE, --docker or --certs-dir DIR");
    }
    let mut diagnostics = Vec::new();
    let mut checked = Vec::new();
    if let Some(path) = &routes {
        diagnostics.extend(file::check(path).await);
        checked.push(format!("routes file {}", path.display()));
    }
    if let Some(docker) = docker.filter(|docker| DockerMode::follows_containers(docker.mode)) {
        match docker::check(docker).await {
            Ok(found) => diagnostics.extend(found),
            Err(error) => return cannot_check(&error.to_string()),
        }
        checked.push(format!("the labels of the containers at {}", docker.host));
    }
    if let Some(docker) = docker.filter(|docker| DockerMode::follows_services(docker.mode)) {
        match swarm::check(docker).await {
            Ok(Some(found)) => {
                diagnostics.extend(found);
                checked.push(format!(
                    "the labels of the Swarm services at {}",
                    docker.host
                ));
            }
            // Not a swarm manager: no services to check.
            Ok(None) => {}
            Err(error) => return cannot_check(&error.to_string()),
        }
    }
    if let Some(dir) = certs_dir {
        diagnostics.extend(tls::files::check(dir).await);
        checked.push(format!("certificates directory {}", dir.display()));
    }
    print(&diagnostics, &checked, check.format);
    let errors = SeverityCounts::of(&diagnostics).errors;
    ExitCode::from(u8::from(errors > 0))
}

fn print(diagnostics: &[Diagnostic], checked: &[String], format: CheckFormat) {
    let counts = SeverityCounts::of(diagnostics);
    match format {
        CheckFormat::Text => {
            for diagnostic in diagnostics {
                println!("{}: {diagnostic}", diagnostic.severity);
            }
            println!(
                "{}, {} (checked {})",
                plural(counts.errors, "error"),
                plural(counts.warnings, "warning"),
                checked.join(" and ")
            );
        }
        CheckFormat::Json => {
            let document = json!({
                "diagnostics": diagnostics.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
                "counts": counts.to_json(),
            });
            println!("{document}");
        }
    }
}

fn plural(count: usize, noun: &str) -> String {
    match count {
        1 => format!("1 {noun}"),
        _ => format!("{count} {noun}s"),
    }
}

fn cannot_check(why: &str) -> ExitCode {
    eprintln!("dockhand check: {why}");
    ExitCode::from(CANNOT_CHECK)
}
