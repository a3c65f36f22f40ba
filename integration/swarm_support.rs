//! The swarm scenarios' harness, on top of `support`: runs on the swarm engine
//! ([`SWARM`], started by `integration/engine.sh start-swarm`), attachable
//! overlay networks, services of the test backend and stacks, all removed with
//! their guard. Everything else the swarm scenarios need (containers, dockhand
//! in a container, waiting, HTTP) is `support`'s, used through a run on the
//! swarm engine, so it is written once for both engines.
//!
//! A service's tasks carry the run's labels too (`--container-label`), so the
//! run's sweep removes them with its containers; the `dockhand.*` labels go on
//! the service (`--label`, a stack file's `deploy.labels`), where dockhand's
//! swarm mode reads them.
//!
//! No ingress mesh here (this kernel has no IPVS, and the swarm engine sets no
//! iptables rules), and two tasks on one node can't share a host-mode port:
//! this machine reaches a task directly at its address on the engine's
//! `docker_gwbridge` ([`gateway_bridge_address`]), a bridge it has a route to,
//! and a task reaches this machine at the bridge's gateway
//! ([`swarm_host_address`]).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;

use crate::support::*;

/// A run on the swarm engine. `None`, with a note, when the suite runs
/// without one and `DOCKHAND_SKIP_SWARM=1` allows that (never under CI).
pub fn swarm_run(test: &str) -> Option<TestRun> {
    if !SWARM.is_configured() && skipping_swarm() {
        eprintln!("not run: no swarm engine (DOCKHAND_SKIP_SWARM=1)");
        return None;
    }
    Some(TestRun::on(&SWARM, test))
}

fn skipping_swarm() -> bool {
    let set = |variable: &str, value: &str| std::env::var(variable).is_ok_and(|v| v == value);
    set("DOCKHAND_SKIP_SWARM", "1") && !set("CI", "true")
}

impl TestRun {
    /// An attachable overlay network `<run id>-<name>`: a service's tasks and
    /// plain containers (dockhand's) can both join it.
    pub fn overlay_network(&self, name: &str) -> Network {
        self.network_with(name, &["--driver", "overlay", "--attachable"])
    }

    /// `docker stack deploy` of `file` as stack `<run id>` with `env` (image
    /// names, ports); `docker stack rm` on drop. A stack's objects carry no
    /// run label (the file says what they carry), so its guard removes them.
    pub fn stack_deploy(&self, file: &Path, env: &[(&str, &str)]) -> Stack {
        let stack = Stack {
            name: self.id().to_owned(),
            engine: self.engine,
        };
        let mut command = self.engine.command();
        command.args(["stack", "deploy", "--compose-file"]);
        command.arg(file).arg(&stack.name).envs(env.iter().copied());
        let shown = format!("docker stack deploy ({})", file.display());
        if let Err(error) = stdout_within(command, &shown, std::time::Duration::from_secs(60)) {
            panic!("{error}");
        }
        stack
    }

    /// A service `<run id>-<name>` of the test backend, one replica, to
    /// configure, then [`ServiceSpec::create`].
    pub fn service(&self, name: &str) -> ServiceSpec<'_> {
        ServiceSpec {
            run: self,
            name: self.name(name),
            image: backend_image(),
            replicas: 1,
            options: Vec::new(),
            args: Vec::new(),
        }
    }

    /// dockhand deployed as a service `<run id>-<name>` (one replica unless
    /// told), as the README's stack runs it: `dockhand:test` with the
    /// engine's socket mounted read-only, on `network`; `args` follow the
    /// image's entrypoint.
    pub fn dockhand_service(
        &self,
        name: &str,
        network: &Network,
        args: &[&str],
    ) -> ServiceSpec<'_> {
        let socket = self
            .engine
            .socket_path()
            .expect("dockhand as a service needs the engine on a unix socket");
        self.service(name)
            .image(&dockhand_image())
            .bind_mount(&socket, "/var/run/docker.sock", Access::ReadOnly)
            .network(network)
            .args(args)
    }
}

/// How a bind mount may be used from the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// A service of the test backend routed for `host` on `network`, its port
/// named (as `support::routed_backend` is for a container).
pub fn routed_service<'r>(
    run: &'r TestRun,
    name: &str,
    host: &str,
    network: &Network,
) -> ServiceSpec<'r> {
    run.service(name)
        .label("dockhand.host", host)
        .label("dockhand.port", &BACKEND_PORT.to_string())
        .network(network)
}

/// A service being described; [`ServiceSpec::create`] creates it.
#[must_use]
pub struct ServiceSpec<'r> {
    run: &'r TestRun,
    name: String,
    image: String,
    replicas: u32,
    options: Vec<String>,
    /// After the image: its entrypoint's arguments.
    args: Vec<String>,
}

impl ServiceSpec<'_> {
    /// A label of the service (what dockhand's swarm mode reads), not of its tasks.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.options.push("--label".to_string());
        self.options.push(format!("{key}={value}"));
        self
    }

    pub fn replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas;
        self
    }

    /// Attaches its tasks to `network`.
    pub fn network(mut self, network: &Network) -> Self {
        self.options.push("--network".to_string());
        self.options.push(network.name.clone());
        self
    }

    /// The image its tasks run (the test backend's unless set).
    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_owned();
        self
    }

    /// `source` on the node, at `target` in every task: with several
    /// tasks on one node, a folder they all share.
    pub fn bind_mount(mut self, source: &Path, target: &str, access: Access) -> Self {
        let mut mount = format!("type=bind,source={},target={target}", source.display());
        if access == Access::ReadOnly {
            mount.push_str(",readonly");
        }
        self.options.push("--mount".to_string());
        self.options.push(mount);
        self
    }

    /// Arguments after the image (its entrypoint's).
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
        self
    }

    /// `docker service create --detach`: it returns before the tasks run
    /// (see [`Service::wait_for_tasks`]). The image's HEALTHCHECK is off, so a
    /// task is running as soon as its process is, and a stopped task gets 1 s
    /// to exit, as the suite's containers do.
    pub fn create(self) -> Service {
        let engine = self.run.engine;
        let mut args: Vec<String> = ["service", "create", "--detach", "--name", &self.name]
            .map(str::to_owned)
            .to_vec();
        for (key, value) in self.run.label_pairs() {
            args.extend(["--label".to_string(), format!("{key}={value}")]);
            args.extend(["--container-label".to_string(), format!("{key}={value}")]);
        }
        args.extend([
            format!("--replicas={}", self.replicas),
            "--no-healthcheck".to_string(),
            "--stop-grace-period=1s".to_string(),
        ]);
        args.extend(self.options);
        args.push(self.image);
        args.extend(self.args);
        engine.docker(&args);
        Service {
            name: self.name,
            engine,
            removed: false,
        }
    }
}

/// A service of this test's; `docker service rm` on drop.
pub struct Service {
    pub name: String,
    engine: &'static Engine,
    removed: bool,
}

impl Service {
    /// `docker service scale --detach`: returns before the tasks follow.
    pub fn scale(&self, replicas: u32) {
        self.engine.docker([
            "service",
            "scale",
            "--detach",
            &format!("{}={replicas}", self.name),
        ]);
    }

    /// `docker service update --force` with `order` (`stop-first` or
    /// `start-first`), one task at a time: every task replaced. Returns
    /// once Docker says the update is over.
    pub fn update_force(&self, order: &str) {
        self.engine.docker([
            "service",
            "update",
            "--force",
            "--update-order",
            order,
            "--update-parallelism",
            "1",
            "--detach=false",
            "--quiet",
            &self.name,
        ]);
    }

    /// `docker service rm` now.
    pub fn remove(mut self) {
        self.engine.docker(["service", "rm", &self.name]);
        self.removed = true;
    }

    /// Waits until exactly `count` tasks run; their hostnames.
    #[track_caller]
    pub fn wait_for_tasks(&self, count: usize) -> BTreeSet<String> {
        wait_for_tasks(self.engine, &self.name, count)
    }

    /// The service's virtual IP on `network`.
    #[track_caller]
    pub fn virtual_ip(&self, network: &Network) -> IpAddr {
        let network_id =
            self.engine
                .docker(["network", "inspect", "--format", "{{.Id}}", &network.name]);
        let format = format!(
            "{{{{range .Endpoint.VirtualIPs}}}}{{{{if eq .NetworkID \"{network_id}\"}}}}\
             {{{{.Addr}}}}{{{{end}}}}{{{{end}}}}"
        );
        let cidr = self
            .engine
            .docker(["service", "inspect", "--format", &format, &self.name]);
        address_of(&cidr).unwrap_or_else(|| {
            panic!(
                "{} has no virtual IP on {}: {cidr:?}",
                self.name, network.name
            )
        })
    }
}

/// The address of this machine where the swarm engine's tasks reach it: the
/// gateway of its `docker_gwbridge`, which `integration/engine.sh` makes the
/// address the swarm advertises.
#[track_caller]
pub fn swarm_host_address() -> IpAddr {
    let address = SWARM.docker(["info", "--format", "{{.Swarm.NodeAddr}}"]);
    address
        .parse()
        .unwrap_or_else(|_| panic!("the swarm's advertised address: {address:?}"))
}

/// The address of the task container `task` (its id, or the short id
/// [`running_tasks`] gives) on `engine`'s `docker_gwbridge`. Every task on an
/// overlay has one, though `docker inspect` of the task does not show it.
#[track_caller]
pub fn gateway_bridge_address(engine: &Engine, task: &str) -> IpAddr {
    let endpoints = engine.docker([
        "network",
        "inspect",
        "--format",
        "{{json .Containers}}",
        "docker_gwbridge",
    ]);
    let endpoints: serde_json::Value = serde_json::from_str(&endpoints)
        .unwrap_or_else(|e| panic!("docker_gwbridge's endpoints: {e}: {endpoints}"));
    let cidr = endpoints
        .as_object()
        .and_then(|endpoints| {
            endpoints
                .iter()
                .find(|(container, _)| container.starts_with(task))
        })
        .and_then(|(_, endpoint)| endpoint["IPv4Address"].as_str())
        .unwrap_or_else(|| panic!("{task} is not on docker_gwbridge: {endpoints}"));
    address_of(cidr).unwrap_or_else(|| panic!("{task}'s address on docker_gwbridge: {cidr:?}"))
}

/// The address in `10.0.0.2/24`, as Docker shows an endpoint's.
fn address_of(cidr: &str) -> Option<IpAddr> {
    cidr.split('/').next()?.parse().ok()
}

/// The hostnames (short container ids, what the backend answers with) of
/// `service`'s tasks whose container runs on this node of `engine`.
pub fn running_tasks(engine: &Engine, service: &str) -> Result<BTreeSet<String>, String> {
    let filter = format!("label=com.docker.swarm.service.name={service}");
    let ids = engine.try_docker([
        "ps",
        "--quiet",
        "--filter",
        &filter,
        "--filter",
        "status=running",
    ])?;
    Ok(ids.lines().map(str::to_owned).collect())
}

/// Waits until exactly `count` tasks of `service` run; their hostnames.
#[track_caller]
pub fn wait_for_tasks(engine: &Engine, service: &str, count: usize) -> BTreeSet<String> {
    wait_until_ok(&format!("{count} running tasks of {service}"), || {
        let tasks = running_tasks(engine, service)?;
        if tasks.len() == count {
            Ok(tasks)
        } else {
            Err(format!("running: {tasks:?}"))
        }
    })
}

impl Drop for Service {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.engine.try_docker(["service", "rm", &self.name]);
        }
    }
}

/// A stack of this test's; `docker stack rm` on drop, and its volumes after.
pub struct Stack {
    pub name: String,
    engine: &'static Engine,
}

impl Stack {
    /// Waits until exactly `count` tasks of its `service` run; their hostnames.
    #[track_caller]
    pub fn wait_for_tasks(&self, service: &str, count: usize) -> BTreeSet<String> {
        wait_for_tasks(self.engine, &format!("{}_{service}", self.name), count)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.engine.try_docker(["stack", "rm", &self.name]);
        let namespace = format!("label=com.docker.stack.namespace={}", self.name);
        let volumes = self
            .engine
            .try_docker(["volume", "ls", "-q", "--filter", &namespace]);
        for volume in volumes.unwrap_or_default().lines() {
            // In use until the stack's containers are gone, a moment later.
            let _ = poll_within(std::time::Duration::from_secs(10), || {
                self.engine.try_docker(["volume", "rm", volume])
            });
        }
    }
}
