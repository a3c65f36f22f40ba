//! The integration suite: dockhand and its test backend against a real Docker
//! engine, with images built locally (never pulled). Run it with
//! `integration/run.sh` (or `./test`), which finds or starts an engine, builds
//! `dockhand:test` and `dockhand-testbackend:test`, then runs this target.
//!
//! `support` is the harness (containers, networks, waiting, HTTP clients,
//! dockhand on the host and in a container); each other module is a group of
//! scenarios, each one an assertion.

mod browser;
mod support;
mod swarm_support;

/// The core suite's Pebble harness and what it stands on (its DNS server,
/// test CA and TLS client), compiled here too rather than copied.
#[path = "../tests/core"]
#[allow(dead_code, unused_imports)]
mod core_harness {
    pub mod dns_server;
    pub mod pebble;
    pub mod support;
    pub mod tls_support;
}

mod acme;
mod backend;
mod dashboard;
mod deploys;
mod diagnostics;
mod engine;
mod leaks;
mod middlewares;
mod provider;
mod routes_file;
mod socket_proxy;
mod swarm;
mod swarm_acme;
