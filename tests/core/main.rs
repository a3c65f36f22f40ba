//! The proxy core, end to end: dockhand serving real loopback backends.

mod dns_server;
mod names;
mod support;
mod upstreams;

mod causes;
mod client_faults;
mod forwarding;
mod host_header;
mod infra_faults;
mod lifecycle;
mod protocols;
mod resolve;
mod routes_file;
mod routing;
mod statuses;
mod tls;
mod tls_support;
mod tls_upstreams;
mod upgrades;
