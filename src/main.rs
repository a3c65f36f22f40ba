//! The `dockhand` binary: flags and environment to settings, logging, the
//! runtime, the configuration checked before any port is bound, signals
//! (SIGTERM/SIGINT drain and exit; SIGHUP is the routes file's), then `run`.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

use cli::{Command, Flags, LogFormat};
use dockhand::settings::Settings;
use dockhand::Listeners;

fn main() -> ExitCode {
    let flags = Flags::parse();
    let docker_host_env = std::env::var("DOCKER_HOST").ok();
    let settings = match flags.settings(docker_host_env.as_deref()) {
        Ok(settings) => settings,
        Err(error) => error.exit(),
    };
    init_logging(&flags);
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
    // One worker runs everything on one thread: no wake-ups cross threads.
    let mut runtime = match flags.workers.map(|workers| workers.get()) {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(workers) => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            runtime.worker_threads(workers);
            runtime
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match runtime.enable_all().build() {
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
    let http = match tokio::net::TcpListener::bind(flags.http_listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, address = %flags.http_listen, "can't listen");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(address = %flags.http_listen, "listening for HTTP");
    let admin = match tokio::net::TcpListener::bind(flags.admin_listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!(%error, address = %flags.admin_listen, "can't listen for the admin API");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(address = %flags.admin_listen, "admin listener up");
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

/// `dockhand healthcheck`: asks the admin listener whether dockhand is ready.
fn healthcheck(flags: &Flags, settings: &Settings) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let answer = match runtime {
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

fn init_logging(flags: &Flags) {
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
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Pretty => builder.init(),
    }
}
