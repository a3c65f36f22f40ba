//! Certificates ordered over ACME (RFC 8555) for the hosts served. `names`
//! says which host names a public CA can issue for; `plan` decides, as a
//! pure function of what is served and held, what to order and when (one
//! order per name at a time, names batched, backoff, renewal);
//! `manager` runs it: it follows the route table, starts `order`s in tasks
//! of their own, keeps what they bring in `storage`, serves it through the
//! certificate store, and publishes diagnostics. `client` is the HTTPS
//! client to the CA and the account. Serving never waits for any of it.

mod client;
mod manager;
mod names;
mod order;
mod plan;
mod storage;

pub use manager::{load, run, Loaded};
