//! An address's lease: held by every endpoint state for the address (so by
//! every route table that uses it, and every request in flight to it); when
//! the last one goes, the address is retired and its idle pooled connections
//! close.

use tokio_util::sync::CancellationToken;

/// Held by every endpoint state for an address; the address is retired when
/// the last one goes.
#[derive(Debug)]
pub struct AddressLease {
    retired: CancellationToken,
}

impl Drop for AddressLease {
    fn drop(&mut self) {
        self.retired.cancel();
    }
}

impl AddressLease {
    pub fn new() -> AddressLease {
        AddressLease {
            retired: CancellationToken::new(),
        }
    }

    /// Cancelled when the last holder of the lease goes.
    pub fn retirement(&self) -> CancellationToken {
        self.retired.clone()
    }
}
