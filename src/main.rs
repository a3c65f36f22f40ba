//! The `dockhand` binary: flags and environment to settings, logging (the
//! access log to its own place), the runtime, the configuration checked
//! before any port is bound, signals (SIGTERM/SIGINT drain and exit; SIGHUP
//! is the routes file's), then `run`. `dockhand check` checks without serving.

mod check_command;
mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::filter::{filter_fn, FilterExt, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use cli::{AccessLog, Command, Flags, LogFormat};
use dockhand::proxy::ACCESS_LOG_TARGET;
use dockhand::settings::Settings;
use dockhand::Listeners;

fn main() -> ExitCode {
    let flags = Flags::parse();
    let docker_host_env = std::env::var("DOCKER_HOST").ok();
    let settings = match flags.settings(docker_host_env.as_deref()) {
        Ok(settings) => settings,
        Err(error) => error.exit(),
    };
    // Its output is the report: nothing else on stdout.
    if let Some(Command::Check(check)) = &flags.command {
        return check_command::run(check, &settings);
    }
    if let Err(error) = init_logging(&flags) {
        eprintln!("{error}");
        return ExitCode::FAILURE;
    }
    if flags.command == Some(Command::Healthcheck) {
        return healthcheck(&flags, &settings);
    }
    match dockhand::limits::raise_open_file_limit() {
        Ok(limit) if limit.before != limit.after => {
            tracing::info!(from = ?limit.before, to = ?limit.after, "open-file limit raised");
        }
        Ok(_) => {}
        Err(error) => tracing::warn!(%error, "the open-file limit could not be raised"),
    }
    // This thread runs the control side (providers, checks, ACME, the admin
    // listener); `run` starts the worker threads that serve clients, or
    // serves here too with one worker.
    let runtime = match dockhand::workers::current_thread_runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "can't start the runtime");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(flags, settings))
}

async fn serve(flags: Flags, settings: Settings) -> ExitCode {
    if let Err(error) = dockhand::check(&settings).await {
        tracing::error!("{error}");
        return ExitCode::FAILURE;
    }
    let Some(http) = bind_for_workers(flags.http_listen, "HTTP") else {
        return ExitCode::FAILURE;
    };
    let https = match settings.tls.https_wanted() {
        true => match bind_for_workers(flags.https_listen, "HTTPS") {
            Some(listener) => Some(listener),
            None => return ExitCode::FAILURE,
        },
        false => None,
    };
    let admin = tokio::net::TcpListener::bind(flags.admin_listen).await;
    let Some(admin) = listening(admin, flags.admin_listen, "the admin API") else {
        return ExitCode::FAILURE;
    };
    let (Ok(mut terminate), Ok(mut interrupt)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("can't install signal handlers");
        return ExitCode::FAILURE;
    };
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
        }
    };
    match dockhand::run(
        Listeners {
            http,
            https,
            admin: Some(admin),
        },
        settings,
        shutdown,
    )
    .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// A listener on `address` for `what` that every worker can bind a
/// listener of its own beside (`SO_REUSEPORT`), so the kernel spreads
/// connections over the workers.
fn bind_for_workers(address: std::net::SocketAddr, what: &str) -> Option<tokio::net::TcpListener> {
    let bound =
        dockhand::workers::bind_shared_port(address).and_then(tokio::net::TcpListener::from_std);
    listening(bound, address, what)
}

/// The listener bound on `address` for `what`; `None` (logged) when it
/// can't be.
fn listening(
    bound: std::io::Result<tokio::net::TcpListener>,
    address: std::net::SocketAddr,
    what: &str,
) -> Option<tokio::net::TcpListener> {
    match bound {
        Ok(listener) => {
            tracing::info!(%address, "listening for {what}");
            Some(listener)
        }
        Err(error) => {
            tracing::error!(%error, %address, "can't listen for {what}");
            None
        }
    }
}

/// `dockhand healthcheck`: asks the admin listener whether dockhand is ready.
fn healthcheck(flags: &Flags, settings: &Settings) -> ExitCode {
    let answer = match dockhand::workers::current_thread_runtime() {
        Ok(runtime) => runtime.block_on(dockhand::admin::healthcheck(
            flags.admin_listen,
            settings.admin_token.as_ref(),
        )),
        Err(error) => Err(format!("can't start the runtime: {error}")),
    };
    match answer {
        Ok(()) => ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("not ready: {reason}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stdout; access events go where `--access-log` says (a file
/// gets every one of them, whatever `--log-level` says). Fails only when
/// the access-log file can't be opened.
fn init_logging(flags: &Flags) -> Result<(), String> {
    logging(flags)?.init();
    Ok(())
}

/// The subscriber `init_logging` installs. The access file's layer is
/// added only when there is a file: an absent layer (`Option::None`) counts
/// as one that wants every event, and would have every event on the request
/// path built, whatever the level, only for the other layer to drop it.
fn logging(flags: &Flags) -> Result<tracing::Dispatch, String> {
    let filter = EnvFilter::try_new(&flags.log_level).unwrap_or_else(|error| {
        eprintln!(
            "invalid --log-level {:?} ({error}); using info",
            flags.log_level
        );
        EnvFilter::new("info")
    });
    let format = flags
        .log_format
        .unwrap_or(if std::io::stdout().is_terminal() {
            LogFormat::Pretty
        } else {
            LogFormat::Json
        });
    let access_file = match &flags.access_log {
        AccessLog::File(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| format!("can't open --access-log {}: {error}", path.display()))?,
        ),
        AccessLog::Off | AccessLog::Stdout => None,
    };
    let access_on_stdout = flags.access_log == AccessLog::Stdout;
    let not_access =
        filter_fn(move |event| access_on_stdout || !event.target().starts_with(ACCESS_LOG_TARGET));
    // One filter, both conditions in it: a filtered layer inside another
    // counts as wanting every event, so each one would be built.
    let stdout = formatted(fmt::layer(), format).with_filter(filter.and(not_access));
    // A file gets JSON lines unless text was asked for by name.
    let file_format = match flags.log_format {
        Some(LogFormat::Pretty) => LogFormat::Pretty,
        _ => LogFormat::Json,
    };
    let access = access_file.map(|file| {
        let layer = fmt::layer().with_writer(Arc::new(file)).with_ansi(false);
        formatted(layer, file_format)
            .with_filter(Targets::new().with_target(ACCESS_LOG_TARGET, tracing::Level::INFO))
    });
    let stdout_only = tracing_subscriber::registry().with(stdout);
    Ok(match access {
        Some(access) => stdout_only.with(access).into(),
        None => stdout_only.into(),
    })
}

/// `layer` in the chosen format.
fn formatted<S, W>(
    layer: fmt::Layer<S, fmt::format::DefaultFields, fmt::format::Format, W>,
    format: LogFormat,
) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    W: for<'writer> fmt::MakeWriter<'writer> + Send + Sync + 'static,
{
    // Which worker (`dockhand-worker-N`) or the control thread (`main`) logged.
    let layer = layer.with_thread_names(true);
    match format {
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
        LogFormat::Pretty => layer.boxed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    /// Runs `check` under the subscriber made from these flags.
    fn under<T>(args: &[&str], check: fn() -> T) -> T {
        let flags = Flags::try_parse_from([&["dockhand"], args].concat()).unwrap();
        tracing::dispatcher::with_default(&logging(&flags).unwrap(), check)
    }

    // Whether an event of each kind would be built.
    fn warning() -> bool {
        tracing::enabled!(target: "dockhand::proxy", Level::WARN)
    }
    fn debug() -> bool {
        tracing::enabled!(target: "dockhand::proxy", Level::DEBUG)
    }
    fn access() -> bool {
        tracing::enabled!(target: ACCESS_LOG_TARGET, Level::INFO)
    }

    #[test]
    fn events_below_the_log_level_are_not_built() {
        for access_log in ["off", "stdout"] {
            let flags = ["--log-level", "warn", "--access-log", access_log];
            assert!(under(&flags, warning), "--access-log {access_log}");
            assert!(!under(&flags, debug), "--access-log {access_log}");
            assert!(!under(&flags, access), "--access-log {access_log}");
        }
    }

    #[test]
    fn access_events_follow_the_access_log_flag() {
        assert!(under(&["--log-level", "info"], access));
        assert!(!under(
            &["--log-level", "info", "--access-log", "off"],
            access
        ));
        let file = std::env::temp_dir().join(format!("dockhand-access-{}.log", std::process::id()));
        let to_file = [
            "--log-level",
            "warn",
            "--access-log",
            file.to_str().unwrap(),
        ];
        assert!(under(&to_file, access));
        assert!(!under(&to_file, debug));
        let _ = std::fs::remove_file(file);
    }
}
