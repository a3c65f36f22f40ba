//! Reaching upstreams: the pools of keep-alive connections (`pool`),
//! opening one connection within the connect timeout (`dial`), dialing SRV
//! owners through their cached answers (`srv`), upstream TLS as a client
//! (`tls`; serving TLS to clients is not this module's), and the connection
//! type the pools hold (`connection`), and why connecting failed (`error`). It decides nothing about which
//! upstream a request goes to (`upstream`, `proxy` do).

mod connection;
mod dial;
mod error;
mod http1_exchange;
pub mod idle_pool;
mod pool;
mod srv;
pub mod tls;
mod upstream_body;

pub use dial::{connect_tcp, Connector};
pub use error::ConnectError;
pub use http1_exchange::{ExchangeError, Http1BodyError};
pub use pool::{authority_is_address, Http1Engine, UpstreamClient};
pub use upstream_body::{SendError, UpstreamIncoming, UpstreamResponse};
