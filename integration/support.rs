//! Harness for the integration suite: a real Docker engine, driven through the
//! `docker` CLI (which honours `DOCKER_HOST`), and the locally built images
//! `dockhand:test` and `dockhand-testbackend:test` (see `integration/images.sh`).
//! A second engine, a swarm manager, serves the swarm scenarios: each
//! [`Engine`] names where its commands go, and a [`TestRun`] creates
//! everything on its own one (`swarm_support` adds the swarm's objects).
//!
//! Every test makes a [`TestRun`]. Whatever it creates (containers, networks, services)
//! carries the label `dockhand-test.run=<run id>` (outside the `dockhand.` prefix, so no dockhand under test reads it) and a name starting with that id,
//! and is removed when its guard drops, or at the latest when the run drops, so a
//! failing test leaves nothing behind. Tests run in parallel against one engine:
//! give every host name a run-unique suffix with [`TestRun::host`], since any
//! dockhand watching the engine sees the other tests' containers too.
//!
//! Waiting is always bounded: [`wait_until`] polls for at most [`WAIT_LIMIT`]
//! and panics with what it was waiting for and the last thing it saw.
//!
//! Traffic goes only to loopback and to the suite's own containers.

#![allow(dead_code)] // helpers for scenarios that not every build uses

use std::ffi::OsStr;
use std::fmt::Display;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Once, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use tokio_tungstenite::tungstenite;

/// The longest any wait in this suite may take.
pub const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// How long one `docker` command may take before the test fails.
const DOCKER_TIMEOUT: Duration = Duration::from_secs(60);
/// The label every object a test creates carries: `dockhand-test.run=<run id>` (outside the `dockhand.` prefix, so no dockhand under test reads it).
pub const RUN_LABEL: &str = "dockhand-test.run";
/// The pid of the test process, so a later run can sweep what a killed one left.
const PID_LABEL: &str = "dockhand-test.pid";
/// The port `testbackend` listens on in its image.
pub const BACKEND_PORT: u16 = 8080;

/// `dockhand:test`, or `DOCKHAND_IMAGE`.
pub fn dockhand_image() -> String {
    std::env::var("DOCKHAND_IMAGE").unwrap_or_else(|_| "dockhand:test".to_string())
}

/// `dockhand-testbackend:test`, or `DOCKHAND_BACKEND_IMAGE`.
pub fn backend_image() -> String {
    std::env::var("DOCKHAND_BACKEND_IMAGE")
        .unwrap_or_else(|_| "dockhand-testbackend:test".to_string())
}

// ---------------------------------------------------------------------------
// The docker CLI

/// Runs a command with a time limit; stdout and stderr are collected.
pub fn output_within(mut command: Command, limit: Duration) -> io::Result<Output> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{command:?} did not finish within {limit:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// `command`, which must succeed within `limit`: its trimmed stdout, or an
/// error naming it (`shown`) with its stderr.
pub fn stdout_within(command: Command, shown: &str, limit: Duration) -> Result<String, String> {
    let output = output_within(command, limit).map_err(|e| format!("{shown}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(format!(
            "{shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

// ---------------------------------------------------------------------------
// The engines

/// A Docker engine the suite drives through the `docker` CLI. There are two:
/// [`MAIN`], the one at `DOCKER_HOST` that most scenarios use, and [`SWARM`],
/// the one-node swarm manager that `integration/engine.sh start-swarm` starts
/// beside it (at `DOCKHAND_SWARM_HOST`) for the swarm scenarios. Each has its
/// own share lock, so swarm scenarios go on while a run restarts the main
/// engine, and its own sweep of what killed test processes left.
pub struct Engine {
    /// The variable naming its `DOCKER_HOST`; `None`: the environment's own.
    host_variable: Option<&'static str>,
    /// Held shared by every run on it, exclusively by a run that restarts it.
    share: RwLock<()>,
    swept: Once,
}

/// The engine at `DOCKER_HOST` (or the default socket).
pub static MAIN: Engine = Engine::new(None);
/// The swarm manager at `DOCKHAND_SWARM_HOST`.
pub static SWARM: Engine = Engine::new(Some("DOCKHAND_SWARM_HOST"));

impl Engine {
    const fn new(host_variable: Option<&'static str>) -> Engine {
        Engine {
            host_variable,
            share: RwLock::new(()),
            swept: Once::new(),
        }
    }

    /// Its `DOCKER_HOST` when it is not the environment's; `Err` says what is
    /// missing when its variable is unset.
    fn own_host(&self) -> Result<Option<String>, String> {
        let Some(variable) = self.host_variable else {
            return Ok(None);
        };
        match std::env::var(variable) {
            Ok(host) if !host.is_empty() => Ok(Some(host)),
            _ => Err(format!(
                "{variable} is not set: run the suite with integration/run.sh, \
                 which starts that engine"
            )),
        }
    }

    /// Whether its address is known (always, for the main engine).
    pub fn is_configured(&self) -> bool {
        self.own_host().is_ok()
    }

    /// `docker` aimed at this engine.
    #[track_caller]
    pub fn command(&self) -> Command {
        let mut command = Command::new("docker");
        if let Some(host) = self.own_host().unwrap_or_else(|error| panic!("{error}")) {
            command.env("DOCKER_HOST", host);
        }
        command
    }

    /// `docker ARGS...`: its trimmed stdout, or its stderr as the error.
    pub fn try_docker<I, S>(&self, args: I) -> Result<String, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = self.command();
        command.args(args);
        let shown = format!("{command:?}");
        stdout_within(command, &shown, DOCKER_TIMEOUT)
    }

    /// `docker ARGS...`, which must succeed: its trimmed stdout.
    #[track_caller]
    pub fn docker<I, S>(&self, args: I) -> String
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.try_docker(args)
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// The engine's socket on this machine: the path in a `unix://` host,
    /// else `/var/run/docker.sock`. `None` for a `tcp://` engine.
    pub fn socket_path(&self) -> Option<PathBuf> {
        let host = match self.own_host() {
            Ok(Some(host)) => host,
            Ok(None) => std::env::var("DOCKER_HOST").unwrap_or_default(),
            Err(error) => panic!("{error}"),
        };
        if host.is_empty() {
            return Some(PathBuf::from("/var/run/docker.sock"));
        }
        host.strip_prefix("unix://").map(PathBuf::from)
    }

    /// The address of container `name` on `network`.
    #[track_caller]
    pub fn container_ip(&self, name: &str, network: &str) -> IpAddr {
        let networks = self.docker([
            "inspect",
            "--format",
            "{{json .NetworkSettings.Networks}}",
            name,
        ]);
        let networks: serde_json::Value = serde_json::from_str(&networks)
            .unwrap_or_else(|e| panic!("inspect {name}: {e}: {networks}"));
        let ip = networks[network]["IPAddress"].as_str().unwrap_or("");
        ip.parse().unwrap_or_else(|_| {
            panic!("{name} has no address on {network}; its networks: {networks}")
        })
    }

    /// The stdout and stderr of container `name` so far (a service's task
    /// too), or why `docker logs` failed.
    pub fn logs(&self, name: &str) -> String {
        let mut command = self.command();
        command.args(["logs", name]);
        match output_within(command, DOCKER_TIMEOUT) {
            Ok(output) => format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(error) => format!("(docker logs failed: {error})"),
        }
    }

    /// Once per process: the engine answers, and what killed test processes
    /// left behind (their pid no longer runs) is removed.
    fn ready(&self) {
        self.swept.call_once(|| {
            if let Err(error) = self.try_docker(["version", "--format", "{{.Server.Version}}"]) {
                panic!(
                    "no Docker engine answers ({error}).\n\
                     Run the suite with integration/run.sh, which starts one and builds the images."
                );
            }
            // Services first: their tasks hold networks.
            let service_ls = ["service", "ls"];
            for id in self.left_by_dead_tests(&service_ls, "service", ".Spec.Labels") {
                let _ = self.try_docker(["service", "rm", &id]);
            }
            for id in self.left_by_dead_tests(&["ps", "-a"], "container", ".Config.Labels") {
                let _ = self.try_docker(["rm", "-f", "-v", &id]);
            }
            for id in self.left_by_dead_tests(&["network", "ls"], "network", ".Labels") {
                self.remove_network(&id);
            }
        });
    }

    /// `docker network rm`, tried for up to 10 s: a swarm still holds a
    /// network for a moment after the services on it were removed (and may
    /// list one a moment after it was removed: then it is "not found").
    fn remove_network(&self, network: &str) {
        let _ = poll_within(Duration::from_secs(10), || {
            match self.try_docker(["network", "rm", network]) {
                Err(error) if !error.contains("not found") => Err(error),
                _ => Ok(()),
            }
        });
    }

    /// The ids `list` (`ps -a`, `network ls`, `service ls`) shows with a pid
    /// label whose process is gone; the labels are read with `inspect` (at
    /// `labels` in an object of `kind`), since not every listing formats them.
    fn left_by_dead_tests(&self, list: &[&str], kind: &str, labels: &str) -> Vec<String> {
        let filter = format!("label={PID_LABEL}");
        let listed = self.try_docker(list.iter().copied().chain(["-q", "--filter", &filter]));
        // `service ls` fails on an engine that is no swarm manager: nothing to sweep.
        let ids = listed.unwrap_or_default();
        if ids.is_empty() {
            return Vec::new();
        }
        let format = format!("{{{{.ID}}}} {{{{index {labels} \"{PID_LABEL}\"}}}}");
        let inspect = ["inspect", "--type", kind, "--format", &format];
        let inspected = self.try_docker(inspect.into_iter().chain(ids.lines()));
        inspected
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, pid)| !Path::new(&format!("/proc/{pid}")).exists())
            .map(|(id, _)| id.to_string())
            .collect()
    }
}

/// `docker ARGS...` on the main engine: its trimmed stdout, or its stderr as the error.
pub fn try_docker<I, S>(args: I) -> Result<String, String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    MAIN.try_docker(args)
}

/// `docker ARGS...` on the main engine, which must succeed: its trimmed stdout.
#[track_caller]
pub fn docker<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    MAIN.docker(args)
}

/// The main engine's socket on this machine (see [`Engine::socket_path`]).
pub fn docker_socket_path() -> Option<PathBuf> {
    MAIN.socket_path()
}

// ---------------------------------------------------------------------------
// Waiting

/// Polls `check` every 50 ms until it gives `Some`, for at most [`WAIT_LIMIT`].
#[track_caller]
pub fn wait_until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    wait_until_ok(what, || check().ok_or("not yet"))
}

/// Polls `check` every 50 ms until it gives `Ok`, for at most [`WAIT_LIMIT`];
/// the panic names `what` and the last error.
#[track_caller]
pub fn wait_until_ok<T, E: Display>(what: &str, check: impl FnMut() -> Result<T, E>) -> T {
    wait_until_within(WAIT_LIMIT, what, check)
}

/// As [`wait_until_ok`] with a shorter limit (longer ones are cut to [`WAIT_LIMIT`]).
#[track_caller]
pub fn wait_until_within<T, E: Display>(
    limit: Duration,
    what: &str,
    check: impl FnMut() -> Result<T, E>,
) -> T {
    let limit = limit.min(WAIT_LIMIT);
    match poll_within(limit, check) {
        Ok(value) => value,
        Err(error) => panic!("timed out after {limit:?} waiting for {what}; last: {error}"),
    }
}

/// Polls `check` every 50 ms until it gives `Ok`, for at most `limit`; its
/// last answer. For where a panic won't do (a `drop`).
pub fn poll_within<T, E>(limit: Duration, check: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    poll_every(Duration::from_millis(50), limit, check)
}

/// As [`poll_within`], every `interval`: for a state that lasts only
/// moments, which a test must see while it holds.
pub fn poll_every<T, E>(
    interval: Duration,
    limit: Duration,
    mut check: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let started = Instant::now();
    loop {
        match check() {
            Ok(value) => return Ok(value),
            Err(error) if started.elapsed() >= limit => return Err(error),
            Err(_) => std::thread::sleep(interval),
        }
    }
}

// ---------------------------------------------------------------------------
// A test's run: ids, names, cleanup

enum EngineShare {
    Shared(#[allow(dead_code)] RwLockReadGuard<'static, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'static, ()>),
}

/// One test's share of an engine. Dropping it removes every service,
/// container and network labelled with its id, whatever guards are still alive.
pub struct TestRun {
    id: String,
    /// Where everything of the run is created.
    pub engine: &'static Engine,
    // Released after the sweep in `drop`.
    share: EngineShare,
}

impl TestRun {
    /// A run on the main engine; `test` names the test (letters, digits and
    /// `-` are kept) in the run id.
    pub fn new(test: &str) -> TestRun {
        TestRun::on(&MAIN, test)
    }

    /// A run on `engine` (see [`TestRun::new`]).
    pub fn on(engine: &'static Engine, test: &str) -> TestRun {
        let share = engine
            .share
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        TestRun::with_share(engine, test, EngineShare::Shared(share))
    }

    /// A run that has the main engine to itself: no other test runs there
    /// meanwhile, so it may [`TestRun::restart_engine`].
    pub fn exclusive(test: &str) -> TestRun {
        let share = MAIN
            .share
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        TestRun::with_share(&MAIN, test, EngineShare::Exclusive(share))
    }

    fn with_share(engine: &'static Engine, test: &str, share: EngineShare) -> TestRun {
        engine.ready();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let short: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(24)
            .collect();
        let id = format!(
            "dht-{}-{}-{}",
            short.trim_matches('-'),
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        TestRun { id, engine, share }
    }

    /// Restarts the suite's throwaway engine (`integration/engine.sh restart`);
    /// its containers keep running throughout (`--live-restore`). `Err` when the
    /// engine is not one the suite started (a developer's own Docker).
    pub fn restart_engine(&self) -> Result<(), String> {
        assert!(
            matches!(self.share, EngineShare::Exclusive(_)),
            "restart_engine needs a TestRun::exclusive run"
        );
        let mut command = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/integration/engine.sh"
        ));
        command.arg("restart");
        let output = output_within(command, Duration::from_secs(90)).map_err(|e| e.to_string())?;
        let log = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("engine.sh restart: {}: {log}", output.status))
        }
    }

    /// The run id: the value of the `dockhand-test.run` label.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `<run id>-<what>`: a container or network name no other test uses.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.id)
    }

    /// `<what>.<run id>.test`: a host name no other test routes.
    pub fn host(&self, what: &str) -> String {
        format!("{what}.{}.test", self.id)
    }

    /// The labels everything of the run carries: its id, and the test
    /// process's pid (which the sweep of a later run looks at).
    pub fn label_pairs(&self) -> [(&'static str, String); 2] {
        [
            (RUN_LABEL, self.id.clone()),
            (PID_LABEL, std::process::id().to_string()),
        ]
    }

    fn labels(&self) -> Vec<String> {
        self.label_pairs()
            .into_iter()
            .flat_map(|(key, value)| ["--label".to_string(), format!("{key}={value}")])
            .collect()
    }

    /// A bridge network named `<run id>-<name>`, removed when dropped.
    pub fn network(&self, name: &str) -> Network {
        create_network(self, name, &[])
    }

    /// As [`TestRun::network`] with `docker network create` options
    /// (`--subnet`, `--ip-range`).
    pub fn network_with(&self, name: &str, options: &[&str]) -> Network {
        create_network(self, name, options)
    }

    /// A container to configure, then [`ContainerSpec::run`].
    pub fn container(&self, name: &str, image: &str) -> ContainerSpec<'_> {
        ContainerSpec {
            run: self,
            name: self.name(name),
            image: image.to_string(),
            options: Vec::new(),
            command: Vec::new(),
            networks: Vec::new(),
        }
    }

    /// A `testbackend` container whose hostname is its name (what it answers
    /// with), with the image's HEALTHCHECK off, so it is routable as soon as it
    /// runs. [`ContainerSpec::healthcheck`] puts a check back.
    pub fn backend(&self, name: &str) -> ContainerSpec<'_> {
        let spec = self.container(name, &backend_image());
        let hostname = spec.name.clone();
        spec.hostname(&hostname).option("--no-healthcheck")
    }

    /// `docker run` with these options before the image (`args`), labels and
    /// networks (the first at create, the others connected before start).
    pub fn run_container(
        &self,
        name: &str,
        image: &str,
        args: &[&str],
        labels: &[(&str, &str)],
        networks: &[&Network],
    ) -> Container {
        let mut spec = self.container(name, image).options(args).labels(labels);
        for network in networks {
            spec = spec.network(network);
        }
        spec.run()
    }

    /// The real deployment: `dockhand:test` on `network` with the engine's socket
    /// mounted read-only and port 80 published on 127.0.0.1; `args` follow the
    /// image's entrypoint. Ready when it answers HTTP.
    pub fn dockhand_in_container(
        &self,
        name: &str,
        network: &Network,
        args: &[&str],
    ) -> DockhandInContainer {
        self.dockhand_in_container_with(name, network, args, |spec| spec)
    }

    /// As [`TestRun::dockhand_in_container`], with `configure` adding to the
    /// container (environment, more networks, volumes, labels) before it starts.
    pub fn dockhand_in_container_with(
        &self,
        name: &str,
        network: &Network,
        args: &[&str],
        configure: impl FnOnce(ContainerSpec<'_>) -> ContainerSpec<'_>,
    ) -> DockhandInContainer {
        let socket = self.engine.socket_path().expect(
            "dockhand in a container needs the engine on a unix socket (DOCKER_HOST=unix://...)",
        );
        let spec = self
            .container(name, &dockhand_image())
            .network(network)
            .volume(&format!("{}:/var/run/docker.sock:ro", socket.display()))
            .publish(80)
            .args(args);
        let container = configure(spec).run();
        let addr = wait_until_ok("dockhand's published port", || container.published(80));
        let dockhand = DockhandInContainer { container, addr };
        wait_until_ok(
            &format!("dockhand in {} to answer HTTP", dockhand.container.name),
            || {
                if dockhand.container.state() == "exited" {
                    panic!(
                        "dockhand's container exited; its log:\n{}",
                        dockhand.container.logs()
                    );
                }
                http_get(dockhand.addr, "ready.invalid", "/")
            },
        );
        dockhand
    }
}

impl Drop for TestRun {
    fn drop(&mut self) {
        let filter = format!("label={RUN_LABEL}={}", self.id);
        let engine = self.engine;
        // Services first: their tasks (which carry the label too) hold networks.
        if let Ok(ids) = engine.try_docker(["service", "ls", "-q", "--filter", &filter]) {
            for id in ids.lines() {
                let _ = engine.try_docker(["service", "rm", id]);
            }
        }
        if let Ok(ids) = engine.try_docker(["ps", "-aq", "--filter", &filter]) {
            for id in ids.lines() {
                let _ = engine.try_docker(["rm", "-f", "-v", id]);
            }
        }
        if let Ok(ids) = engine.try_docker(["network", "ls", "-q", "--filter", &filter]) {
            for id in ids.lines() {
                engine.remove_network(id);
            }
        }
    }
}

impl TestRun {
    /// `docker-compose -p <run id> -f FILE up -d` with extra environment (image
    /// names, ports); `down` on drop. Compose names what it creates after the
    /// project: `<run id>_<service>_1`, network `<run id>_<network>`.
    pub fn compose_up(&self, file: &Path, env: &[(&str, &str)]) -> ComposeProject {
        // Compose v1 keeps only [a-z0-9_-] of a project name.
        let project = self.id.replace('.', "-");
        let compose = ComposeProject {
            project,
            file: file.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        if let Err(error) = compose.run(&["up", "-d", "--no-build"]) {
            panic!("{error}");
        }
        compose
    }
}

/// A compose project of a test's; `down -v --remove-orphans` on drop.
pub struct ComposeProject {
    pub project: String,
    file: PathBuf,
    env: Vec<(String, String)>,
}

impl ComposeProject {
    /// `docker-compose -p PROJECT -f FILE ARGS...`: stdout, or the error output.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut command = Command::new("docker-compose");
        command
            .arg("--project-name")
            .arg(&self.project)
            .arg("--file")
            .arg(&self.file)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let shown = format!("docker-compose {args:?} ({})", self.file.display());
        stdout_within(command, &shown, Duration::from_secs(120))
    }

    /// `up -d` again with `env` changed (a new image: a deploy).
    pub fn up_with(&mut self, env: &[(&str, &str)]) -> Result<String, String> {
        for (key, value) in env {
            self.env.retain(|(k, _)| k != key);
            self.env.push((key.to_string(), value.to_string()));
        }
        self.run(&["up", "-d", "--no-build"])
    }

    /// The ids of `service`'s containers.
    pub fn container_ids(&self, service: &str) -> Vec<String> {
        match self.run(&["ps", "-q", service]) {
            Ok(ids) => ids.lines().map(str::to_owned).collect(),
            Err(error) => panic!("{error}"),
        }
    }

    /// The name compose v1 gave replica `index` (from 1) of `service`.
    pub fn container_name(&self, service: &str, index: u32) -> String {
        format!("{}_{service}_{index}", self.project)
    }

    /// A network's full name (`<project>_<network>`).
    pub fn network_name(&self, network: &str) -> String {
        format!("{}_{network}", self.project)
    }
}

impl Drop for ComposeProject {
    fn drop(&mut self) {
        let _ = self.run(&["down", "--volumes", "--remove-orphans", "--timeout", "1"]);
    }
}

// ---------------------------------------------------------------------------
// Networks

/// A user-defined network (a bridge unless created with another driver);
/// `docker network rm` on drop.
pub struct Network {
    pub name: String,
    engine: &'static Engine,
}

/// `docker network create OPTIONS <run id>-<name>` with the run's labels.
pub fn create_network(run: &TestRun, name: &str, options: &[&str]) -> Network {
    let name = run.name(name);
    let mut args = vec!["network".to_string(), "create".to_string()];
    args.extend(run.labels());
    args.extend(options.iter().map(|option| option.to_string()));
    args.push(name.clone());
    run.engine.docker(&args);
    Network {
        name,
        engine: run.engine,
    }
}

impl AsRef<str> for Network {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Containers still attached (a guard that outlives this one) would make
        // `rm` fail; the run's sweep catches the network after them.
        let _ = self.engine.try_docker(["network", "rm", &self.name]);
    }
}

// ---------------------------------------------------------------------------
// Containers

/// A container being described; [`ContainerSpec::run`] creates and starts it.
/// It always carries the run's labels and a `<run id>-` name.
#[must_use]
pub struct ContainerSpec<'r> {
    run: &'r TestRun,
    name: String,
    image: String,
    options: Vec<String>,
    command: Vec<String>,
    networks: Vec<String>,
}

impl<'r> ContainerSpec<'r> {
    /// The container's full name (`<run id>-<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A raw `docker create` option, e.g. `--health-interval=200ms`.
    pub fn option(mut self, option: &str) -> Self {
        self.options.push(option.to_string());
        self
    }

    pub fn options(mut self, options: &[&str]) -> Self {
        self.options.extend(options.iter().map(|o| o.to_string()));
        self
    }

    pub fn label(self, key: &str, value: &str) -> Self {
        self.option("--label").option(&format!("{key}={value}"))
    }

    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        for (key, value) in labels {
            self = self.label(key, value);
        }
        self
    }

    pub fn env(self, key: &str, value: &str) -> Self {
        self.option("--env").option(&format!("{key}={value}"))
    }

    pub fn hostname(self, hostname: &str) -> Self {
        self.option("--hostname").option(hostname)
    }

    /// `-v SPEC`, e.g. `/host/file:/routes.json:ro`.
    pub fn volume(self, spec: &str) -> Self {
        self.option("--volume").option(spec)
    }

    /// Publishes a container port on a free port of 127.0.0.1; see [`Container::published`].
    pub fn publish(self, container_port: u16) -> Self {
        self.option("--publish")
            .option(&format!("127.0.0.1::{container_port}"))
    }

    /// Attaches to a network (the first at create time, the others before start).
    pub fn network(mut self, network: impl AsRef<str>) -> Self {
        self.networks.push(network.as_ref().to_string());
        self
    }

    /// Keeps the image's HEALTHCHECK command, checked every `interval`
    /// (e.g. `"200ms"`), unhealthy after 2 failures, no start period.
    pub fn healthcheck(mut self, interval: &str) -> Self {
        self.options.retain(|o| o != "--no-healthcheck");
        self.option(&format!("--health-interval={interval}"))
            .option("--health-retries=2")
            .option("--health-timeout=3s")
    }

    /// An argument after the image (the entrypoint's arguments).
    pub fn arg(mut self, arg: &str) -> Self {
        self.command.push(arg.to_string());
        self
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.command.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// `docker create` and the network connections; not started.
    pub fn create(self) -> Container {
        let mut args = vec![
            "create".to_string(),
            "--name".to_string(),
            self.name.clone(),
        ];
        args.extend(self.run.labels());
        if let Some(first) = self.networks.first() {
            args.push("--network".to_string());
            args.push(first.clone());
        }
        args.extend(self.options);
        args.push(self.image);
        args.extend(self.command);
        let engine = self.run.engine;
        let id = engine.docker(&args);
        // From here the guard owns it, also if connecting fails.
        let container = Container {
            name: self.name,
            id,
            engine,
            removed: false,
        };
        for network in self.networks.iter().skip(1) {
            engine.docker([
                "network",
                "connect",
                network.as_str(),
                container.name.as_str(),
            ]);
        }
        container
    }

    /// Created, connected and started.
    pub fn run(self) -> Container {
        let container = self.create();
        container.start();
        container
    }
}

/// A container of this test's; `docker rm -f` on drop.
pub struct Container {
    pub name: String,
    pub id: String,
    engine: &'static Engine,
    removed: bool,
}

impl Container {
    pub fn start(&self) {
        self.engine.docker(["start", &self.name]);
    }

    /// `docker stop -t SECS`.
    pub fn stop(&self, grace_secs: u32) {
        self.engine
            .docker(["stop", "-t", &grace_secs.to_string(), &self.name]);
    }

    pub fn kill(&self) {
        self.engine.docker(["kill", &self.name]);
    }

    pub fn pause(&self) {
        self.engine.docker(["pause", &self.name]);
    }

    pub fn unpause(&self) {
        self.engine.docker(["unpause", &self.name]);
    }

    /// `docker rm -f` now (a recreate, a scale-down).
    pub fn remove(mut self) {
        self.engine.docker(["rm", "-f", "-v", &self.name]);
        self.removed = true;
    }

    pub fn connect(&self, network: impl AsRef<str>) {
        self.engine
            .docker(["network", "connect", network.as_ref(), &self.name]);
    }

    pub fn disconnect(&self, network: impl AsRef<str>) {
        self.engine
            .docker(["network", "disconnect", network.as_ref(), &self.name]);
    }

    /// `docker inspect --format FORMAT`.
    pub fn inspect(&self, format: &str) -> String {
        self.engine
            .docker(["inspect", "--format", format, &self.name])
    }

    /// `created`, `running`, `paused`, `exited`...
    pub fn state(&self) -> String {
        self.inspect("{{.State.Status}}")
    }

    /// `starting`, `healthy`, `unhealthy`, or empty without a HEALTHCHECK.
    pub fn health(&self) -> String {
        self.inspect("{{if .State.Health}}{{.State.Health.Status}}{{end}}")
    }

    /// Its address on `network` (full name).
    pub fn ip(&self, network: impl AsRef<str>) -> IpAddr {
        self.engine.container_ip(&self.name, network.as_ref())
    }

    /// Its address on `network` with `port`.
    pub fn addr(&self, network: impl AsRef<str>, port: u16) -> SocketAddr {
        SocketAddr::new(self.ip(network), port)
    }

    /// Where a port published with [`ContainerSpec::publish`] is reached on loopback.
    pub fn published(&self, container_port: u16) -> Result<SocketAddr, String> {
        let mappings =
            self.engine
                .try_docker(["port", &self.name, &format!("{container_port}/tcp")])?;
        mappings
            .lines()
            .filter_map(|line| line.trim().parse::<SocketAddr>().ok())
            .find(|addr| addr.ip().is_loopback())
            .ok_or_else(|| format!("no loopback mapping for {container_port}: {mappings:?}"))
    }

    /// Its stdout and stderr so far.
    pub fn logs(&self) -> String {
        self.engine.logs(&self.name)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.engine.try_docker(["rm", "-f", "-v", &self.name]);
        }
    }
}

/// The address of container `name` on `network`, on the main engine.
#[track_caller]
pub fn container_ip(name: &str, network: &str) -> IpAddr {
    MAIN.container_ip(name, network)
}

// ---------------------------------------------------------------------------
// HTTP and WebSocket clients (one connection per request, `Connection: close`)

/// An answer, read to the end.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// `GET path` with `Host: host`, 10 s limit.
pub fn http_get(addr: SocketAddr, host: &str, path: &str) -> io::Result<HttpResponse> {
    http_request(addr, "GET", host, path, &[], b"")
}

/// `GET path` on dockhand's admin listener at `admin`, with its bearer
/// `token`: the JSON answer, or what came instead.
pub fn admin_json(admin: SocketAddr, token: &str, path: &str) -> Result<serde_json::Value, String> {
    let authorization = format!("Bearer {token}");
    let headers = [("authorization", authorization.as_str())];
    let response =
        http_request(admin, "GET", "localhost", path, &headers, b"").map_err(|e| e.to_string())?;
    if response.status != 200 {
        return Err(format!("{path}: {} {}", response.status, response.text()));
    }
    Ok(response.json())
}

/// One HTTP/1.1 request on a new connection, read until the server closes it;
/// 10 s limit on the connect and on every read.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<HttpResponse> {
    let limit = Duration::from_secs(10);
    let mut stream = TcpStream::connect_timeout(&addr, limit)?;
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))?;
    stream.set_nodelay(true)?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw, method == "HEAD")
}

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

fn parse_response(raw: &[u8], head_only: bool) -> io::Result<HttpResponse> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad(format!("no complete response head in {} bytes", raw.len())))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut response = HttpResponse {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[end + 4..];
    if head_only {
        return Ok(response);
    }
    let chunked = response
        .header("transfer-encoding")
        .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
    response.body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(response)
}

fn dechunk(mut rest: &[u8]) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("truncated chunk size"))?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| bad(format!("bad chunk size {size_text:?}")))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(bad("truncated chunk"));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// A WebSocket on `addr` with `Host: host`, 10 s read limit.
pub fn websocket(
    addr: SocketAddr,
    host: &str,
    path: &str,
) -> Result<tungstenite::WebSocket<TcpStream>, String> {
    use tungstenite::client::IntoClientRequest;
    let request = format!("ws://{host}{path}")
        .into_client_request()
        .map_err(|e| format!("request: {e}"))?;
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let (socket, _) =
        tungstenite::client(request, stream).map_err(|e| format!("handshake: {e}"))?;
    Ok(socket)
}

// ---------------------------------------------------------------------------
// dockhand on the host and in a container

/// A free TCP port on 127.0.0.1 (free when asked; bind it soon).
///
/// Never the same port twice in one run: the kernel may hand back the port
/// it handed back just before, once its listener is gone, and one dockhand
/// given it for both its listeners (`--http-listen` and the admin API)
/// exits at once.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The `dockhand` binary of this build, run on the host with
/// `--http-listen 127.0.0.1:<free port>`, `DOCKHAND_ADMIN_LISTEN` set to another
/// free loopback port (so instances in parallel tests never share one), and the
/// environment of the test (so `DOCKER_HOST` reaches the suite's engine). Its
/// stdout and stderr go to a file; it is stopped (SIGTERM, then SIGKILL) on drop.
pub struct DockhandOnHost {
    pub addr: SocketAddr,
    /// Where its admin API listens (when this version has one).
    pub admin_addr: SocketAddr,
    child: Child,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl DockhandOnHost {
    /// Started with `args` (after the listen flag); ready when it answers HTTP.
    pub fn start(args: &[&str]) -> DockhandOnHost {
        DockhandOnHost::start_with_env(args, &[])
    }

    /// As [`DockhandOnHost::start`] with extra environment variables.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> DockhandOnHost {
        let dir = tempfile::tempdir().expect("a temporary folder");
        DockhandOnHost::start_in(dir, args, env)
    }

    /// As [`DockhandOnHost::start_with_env`] in a folder the caller already
    /// filled (a routes file, certificates); see [`DockhandOnHost::dir`].
    pub fn start_in(dir: tempfile::TempDir, args: &[&str], env: &[(&str, &str)]) -> DockhandOnHost {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let admin_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = dir.path().join("dockhand.log");
        let file = std::fs::File::create(&log).expect("the log file");
        let child = Command::new(env!("CARGO_BIN_EXE_dockhand"))
            .arg("--http-listen")
            .arg(addr.to_string())
            .args(args)
            .env("DOCKHAND_ADMIN_LISTEN", admin_addr.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .expect("dockhand starts");
        let mut dockhand = DockhandOnHost {
            addr,
            admin_addr,
            child,
            log,
            dir,
        };
        wait_until_ok("dockhand on the host to answer HTTP", || {
            if let Ok(Some(status)) = dockhand.child.try_wait() {
                panic!("dockhand exited ({status}); its log:\n{}", dockhand.log());
            }
            http_get(dockhand.addr, "ready.invalid", "/")
        });
        dockhand
    }

    /// A folder of this instance's, removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything it printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`; returns the log.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str) -> String {
        wait_until(&format!("{needle:?} in dockhand's log"), || {
            let log = self.log();
            log.contains(needle).then_some(log)
        })
    }

    pub fn get(&self, host: &str, path: &str) -> io::Result<HttpResponse> {
        http_get(self.addr, host, path)
    }

    /// SIGTERM, then its exit status (SIGKILL after [`WAIT_LIMIT`]).
    pub fn stop(&mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            if started.elapsed() > WAIT_LIMIT {
                let _ = self.child.kill();
                return self.child.wait().expect("dockhand is reaped");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for DockhandOnHost {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// `dockhand:test` in a container of the run (see
/// [`TestRun::dockhand_in_container`]); removed with its guard.
pub struct DockhandInContainer {
    pub container: Container,
    /// Its port 80, published on loopback.
    pub addr: SocketAddr,
}

impl DockhandInContainer {
    pub fn get(&self, host: &str, path: &str) -> io::Result<HttpResponse> {
        http_get(self.addr, host, path)
    }

    pub fn log(&self) -> String {
        self.container.logs()
    }

    /// Waits until its log contains `needle`; returns the log.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str) -> String {
        wait_until(&format!("{needle:?} in dockhand's container log"), || {
            let log = self.log();
            log.contains(needle).then_some(log)
        })
    }
}

// ---------------------------------------------------------------------------
// Routed backends, load and figures

/// A test backend routed for `host`, on `network`.
pub fn routed_backend<'r>(
    run: &'r TestRun,
    name: &str,
    host: &str,
    network: &Network,
) -> ContainerSpec<'r> {
    run.backend(name)
        .label("dockhand.host", host)
        .network(network)
}

/// The container that answered (the backend answers with its hostname).
pub fn answered_by(response: &HttpResponse) -> String {
    response.json()["hostname"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Waits until `container` answers `host` through dockhand at `addr`.
#[track_caller]
pub fn assert_answered_by(addr: SocketAddr, host: &str, container: &Container) {
    assert_eq!(answered_by(&wait_for_200(addr, host, "/")), container.name);
}

/// GETs until one answers 200; the answer.
#[track_caller]
pub fn wait_for_200(addr: SocketAddr, host: &str, path: &str) -> HttpResponse {
    wait_until_ok(&format!("200 from {host}{path}"), || {
        let response = http_get(addr, host, path).map_err(|e| e.to_string())?;
        if response.status == 200 {
            Ok(response)
        } else {
            Err(format!("{} {}", response.status, response.text()))
        }
    })
}

/// Prints a measured figure and keeps it in `target/tmp/integration-figures.txt`,
/// which `integration/run.sh` shows at the end (figures are reported, never asserted).
pub fn record_figure(line: &str) {
    eprintln!("figure: {line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("integration-figures.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

/// One request of a [`RequestLoop`]: its status (`None` when it got no
/// answer), who answered, and how long it took.
#[derive(Debug)]
pub struct Outcome {
    pub status: Option<u16>,
    /// The answering backend's hostname, or the error, or the body of a non-200.
    pub detail: String,
    pub took: Duration,
}

impl Outcome {
    pub fn failed(&self) -> bool {
        self.status != Some(200)
    }
}

/// GETs of `path` sent by `workers` threads, each one after another, until
/// stopped: at most 20,000 requests in all, and 60 s.
pub struct RequestLoop {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    workers: Vec<std::thread::JoinHandle<Vec<Outcome>>>,
}

impl RequestLoop {
    /// One thread sending `GET /`.
    pub fn start(addr: SocketAddr, host: &str) -> RequestLoop {
        RequestLoop::with_workers(addr, host, "/", 1)
    }

    pub fn with_workers(addr: SocketAddr, host: &str, path: &str, workers: usize) -> RequestLoop {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let workers = (0..workers)
            .map(|_| {
                let (stop, sent, answered) = (stop.clone(), sent.clone(), answered.clone());
                let (host, path) = (host.to_owned(), path.to_owned());
                std::thread::spawn(move || {
                    let mut outcomes = Vec::new();
                    while !stop.load(Ordering::SeqCst)
                        && sent.fetch_add(1, Ordering::SeqCst) < 20_000
                        && started.elapsed() < Duration::from_secs(60)
                    {
                        let sent_at = Instant::now();
                        let answer = http_get(addr, &host, &path);
                        let took = sent_at.elapsed();
                        outcomes.push(match answer {
                            Ok(response) if response.status == 200 => Outcome {
                                status: Some(200),
                                detail: answered_by(&response),
                                took,
                            },
                            Ok(response) => Outcome {
                                status: Some(response.status),
                                detail: response.text(),
                                took,
                            },
                            Err(error) => Outcome {
                                status: None,
                                detail: error.to_string(),
                                took,
                            },
                        });
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    outcomes
                })
            })
            .collect();
        RequestLoop {
            stop,
            answered,
            workers,
        }
    }

    /// Waits until `count` more requests have been answered (or failed).
    pub fn wait_for_more(&self, count: usize) {
        let before = self.answered.load(Ordering::SeqCst);
        wait_until("more requests", || {
            (self.answered.load(Ordering::SeqCst) >= before + count).then_some(())
        });
    }

    /// How many were answered (or failed) so far.
    pub fn sent(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Stops; every request's outcome.
    pub fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::SeqCst);
        self.workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect()
    }

    /// Stops; how many were sent and the failures.
    pub fn stop(self) -> (usize, Vec<String>) {
        let outcomes = self.finish();
        let failures = outcomes
            .iter()
            .filter(|outcome| outcome.failed())
            .map(|outcome| format!("{:?} {}", outcome.status, outcome.detail))
            .collect();
        (outcomes.len(), failures)
    }
}
