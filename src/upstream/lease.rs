//! An address's lease: held by every endpoint state for the address (so by
//! every route table that uses it, and every request in flight to it); when
//! the last one goes, the address is retired and its idle pooled connections
//! close. It also knows whether the newest route table still uses the
//! address: when a table without it is swapped in (its container stopped or
//! was removed, a name points elsewhere), the address has departed, and
//! connection attempts to it are abandoned, since its old IP may already
//! belong to another container.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// Held by every endpoint state for an address; the address is retired when
/// the last one goes.
#[derive(Debug)]
pub struct AddressLease {
    retired: CancellationToken,
    membership: Mutex<Membership>,
}

/// The newest route table that uses the address, and the signal raised when
/// a newer one does not.
#[derive(Debug)]
struct Membership {
    table: u64,
    departed: CancellationToken,
}

impl Drop for AddressLease {
    fn drop(&mut self) {
        self.retired.cancel();
        lock(&self.membership).departed.cancel();
    }
}

impl AddressLease {
    pub fn new() -> AddressLease {
        AddressLease {
            retired: CancellationToken::new(),
            membership: Mutex::new(Membership {
                table: 0,
                departed: CancellationToken::new(),
            }),
        }
    }

    /// Cancelled when the last holder of the lease goes.
    pub fn retirement(&self) -> CancellationToken {
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
