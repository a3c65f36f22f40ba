//! SRV origins (RFC 2782): an upstream written as an owner name is dialed
//! through its SRV answer. `order` ranks targets, `cache` keeps answers and
//! counts lookups, `dial` connects to the first target that answers. Choosing
//! which upstream to dial, TLS and pooling are not here.

mod cache;
mod dial;
mod order;

#[cfg(test)]
pub(crate) mod fake_dns;

pub use cache::{
    CacheTtls, LookupCounts, SrvResolver, SrvStats, TierAttempts, DEFAULT_CAPACITY, DIAL_TIERS,
    REFRESH_WAIT,
};
pub use dial::{dial, dial_rng, SrvConnection, SrvDialError};
pub use order::{order_targets, OrderedTarget};
