//! Where each name's ACME certificate stands, as the admin API and the
//! dashboard show it: waiting for a healthy upstream, being ordered,
//! failed (with the CA's words and the next try), or issued.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::SystemTime;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderState {
    /// Not ordered yet, and why (no healthy upstream yet, say).
    Waiting { reason: String },
    /// An order is in progress.
    Ordering { since: SystemTime },
    /// The last order failed; the next try is not before `next_try`.
    Failed {
        detail: String,
        next_try: SystemTime,
    },
    /// A certificate is held; it is renewed from `renew_at`.
    Issued {
        not_after: SystemTime,
        renew_at: SystemTime,
    },
}

/// Name (lower case) → state.
#[derive(Default)]
pub struct AcmeStatus(RwLock<BTreeMap<String, OrderState>>);

impl AcmeStatus {
    pub fn set(&self, name: &str, state: OrderState) {
        let mut states = self.0.write().unwrap_or_else(|e| e.into_inner());
        states.insert(name.to_ascii_lowercase(), state);
    }

    pub fn remove(&self, name: &str) {
        let mut states = self.0.write().unwrap_or_else(|e| e.into_inner());
        states.remove(&name.to_ascii_lowercase());
    }

    /// Every name's state, by name.
    pub fn all(&self) -> BTreeMap<String, OrderState> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
