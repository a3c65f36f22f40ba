//! The proxy core, end to end: dockhand serving real loopback backends.

mod dns_server;
mod names;
mod raw_h2;
mod support;
mod upstreams;

mod access_log;
mod admin;
mod causes;
mod certs_dir;
mod check_command;
mod client_faults;
mod dashboard;
mod forwarding;
mod host_header;
mod hostile_http1;
mod hostile_http2;
mod https;
mod https_protocols;
mod https_redirect;
mod infra_faults;
mod lifecycle;
mod load;
mod metrics;
mod protocols;
mod resolve;
mod routes_file;
mod routing;
mod slow_clients;
mod statuses;
mod tls;
mod tls_support;
mod tls_upstreams;
mod upgrades;
mod upstream_faults;
