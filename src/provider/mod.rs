//! Providers: where desired hosts come from. Each follows its own input and
//! publishes a `Desired` (hosts and diagnostics) to the router under its own
//! id, whole, on every change; the router does the rest (merging, grace,
//! conflicts). A provider's identity never changes request behaviour: what
//! differs is data it sets on the locations (`upstreams_move`).
//!
//! - `file`: the JSON routes file, reloaded on change and on SIGHUP.
//! - `docker`: containers' labels, followed through Docker's events.
//! - `swarm`: Swarm services' labels, their tasks as replicas.
//! - `labelled`: what both publish from labels.
//! - `dns_servers`: DNS servers written as names, looked up by both when
//!   they load, so the hosts they publish hold addresses.
//! - `users_files`: `basic_auth.users_file` htpasswd files, read by both
//!   when they load.

mod dns_servers;
pub mod docker;
#[cfg(test)]
mod fake_engine;
pub mod file;
mod labelled;
pub mod swarm;
mod users_files;
