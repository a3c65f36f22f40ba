//! An address's lease: held by every endpoint state for the address (so by
//! every route table that uses it, and every request in flight to it); when
//! the last one goes, the address is retired and its idle pooled connections
//! close. It also knows whether the newest route table still uses the
//! address: when a table without it is swapped in (its container stopped or
//! was removed, a name points elsewhere), the address has departed, and
//! connection attempts to it are abandoned, since its old IP may already
//! belong to another container.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// Held by every endpoint state for an address; the address is retired when
/// the last one goes.
#[derive(Debug)]
pub struct AddressLease {
    retired: Retirement,
    membership: Mutex<Membership>,
}

/// The newest route table that uses the address, and the signal raised when
/// a newer one does not.
#[derive(Debug)]
struct Membership {
    table: u64,
    departed: CancellationToken,
}

/// The signal that an address was retired: a token to wait on, and a flag
/// to look at. Looking at the token takes its lock, where the flag is one
/// load: the own pool looks at it on every read of a connection.
#[derive(Clone, Debug, Default)]
pub struct Retirement {
    token: CancellationToken,
    raised: Arc<AtomicBool>,
}

impl Retirement {
    fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.token.cancel();
    }

    pub fn is_raised(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    /// The token, for a wait that the retirement ends.
    pub fn into_token(self) -> CancellationToken {
        self.token
    }
}

impl Drop for AddressLease {
    fn drop(&mut self) {
        self.retired.raise();
        lock(&self.membership).departed.cancel();
    }
}

impl AddressLease {
    pub fn new() -> AddressLease {
        AddressLease {
            retired: Retirement::default(),
            membership: Mutex::new(Membership {
                table: 0,
                departed: CancellationToken::new(),
            }),
        }
    }

    /// Raised when the last holder of the lease goes.
    pub fn retirement(&self) -> Retirement {
        self.retired.clone()
    }

    /// Route table number `table` uses the address. An address that comes
    /// back after it departed gets a new signal: the old one stays raised
    /// for the attempts it ended.
    pub fn used_by_table(&self, table: u64) {
        let mut membership = lock(&self.membership);
        membership.table = table;
        if membership.departed.is_cancelled() {
            membership.departed = CancellationToken::new();
        }
    }

    /// Route table number `table` is now the one requests use: unless it
    /// uses the address, the address has departed.
    pub fn depart_unless_used_by(&self, table: u64) {
        let membership = lock(&self.membership);
        if membership.table != table {
            membership.departed.cancel();
        }
    }

    /// Cancelled when a route table without the address is swapped in.
    pub fn departure(&self) -> CancellationToken {
        lock(&self.membership).departed.clone()
    }
}
