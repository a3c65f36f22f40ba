//! Reaching upstreams: the pools of keep-alive connections (`pool`),
//! opening one connection within the connect timeout (`dial`), dialing SRV
//! owners through their cached answers (`srv`), upstream TLS as a client
//! (`tls`; serving TLS to clients is not this module's), the connection
//! type the pools hold (`connection`), why connecting or an exchange failed
//! (`error`), and dockhand's own HTTP/1.1 exchange with an upstream address
//! (`http1_exchange`, its response body in `http1_body`, each worker's idle
//! connections in `thread_pool`, kept by `idle_pool`), beside hyper's client for the
//! rest (`upstream_body` says which answered). It decides nothing about
//! which upstream a request goes to (`upstream`, `proxy` do).

mod connection;
mod dial;
mod error;
mod http1_body;
mod http1_exchange;
pub mod idle_pool;
mod pool;
mod set_fields;
mod srv;
mod thread_pool;
pub mod tls;
mod upstream_body;

pub use dial::{connect_tcp, Connector};
pub use error::{ConnectError, ExchangeError};
pub use http1_body::{Http1Body, Http1BodyError};
pub use http1_exchange::Outgoing;
pub use pool::{authority_is_address, Http1Engine, TryHead, UpstreamClient};
pub use set_fields::{SetFields, SetFieldsRef};
pub use upstream_body::{SendError, UpstreamIncoming, UpstreamResponse};
