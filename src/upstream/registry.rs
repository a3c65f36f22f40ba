//! Endpoint state that outlives route tables. A rebuilt table asks here for
//! the state of each endpoint it has; an address that stays gets the same
//! state back (its health, in-flight count and checks), one that goes is
//! dropped with the last table that used it. The same goes for an address's
//! pooled connections: they hold a lease-bound retirement signal, so once no
//! table uses the address any more its idle connections are closed. Sooner
//! than that, as soon as the table requests use no longer has the address,
//! it has departed: connection attempts to it are abandoned.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::endpoint::{Destination, Transport};
use super::health::{Check, EndpointState};
use super::lease::{AddressLease, Retirement};
use crate::sync::lock;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct StateKey {
    destination: Destination,
    transport: Transport,
    /// Endpoints checked at different intervals keep separate health.
    check_interval: Option<Duration>,
}

type LeaseKey = (Transport, SocketAddr);

#[derive(Default)]
pub struct EndpointRegistry {
    states: Mutex<HashMap<StateKey, Weak<EndpointState>>>,
    leases: Mutex<HashMap<LeaseKey, Weak<AddressLease>>>,
    /// Wakes the health-check service when a checked endpoint is added.
    checks_added: Notify,
    /// The number of the route table being built: endpoint states list
    /// the locations of the newest one.
    table: AtomicU64,
}

impl EndpointRegistry {
    pub fn new() -> EndpointRegistry {
        EndpointRegistry::default()
    }

    /// A new route table is being built: the endpoints it asks for from now
    /// on list its locations in place of the last table's.
    pub fn start_table(&self) {
        self.table.fetch_add(1, Ordering::Relaxed);
    }

    /// The state of an endpoint `location` uses: the one already in use for
    /// the same place, or a new one (healthy; checked by the health service
    /// when `check_interval` is set and the destination is an address).
    pub fn state(
        &self,
        destination: &Destination,
        transport: &Transport,
        check_interval: Option<Duration>,
        location: &Arc<str>,
    ) -> Arc<EndpointState> {
        let state = self.state_for(destination, transport, check_interval);
        state.used_by(self.table.load(Ordering::Relaxed), location);
        state
    }

    fn state_for(
        &self,
        destination: &Destination,
        transport: &Transport,
        check_interval: Option<Duration>,
    ) -> Arc<EndpointState> {
        let key = StateKey {
            destination: destination.clone(),
            transport: transport.clone(),
            check_interval,
        };
        let mut states = lock(&self.states);
        if let Some(state) = states.get(&key).and_then(Weak::upgrade) {
            return state;
        }
        let address = match destination {
            Destination::Address(address) => Some(*address),
            // An SRV endpoint's address changes with every connection: its
            // connects are not checked one by one.
            Destination::Srv { .. } => None,
        };
        let lease = address.map(|address| self.lease(transport, address));
        let check = address
            .zip(check_interval)
            .map(|(address, interval)| Check::new(address, interval));
        let checked = check.is_some();
        let state = Arc::new(EndpointState::new(check, lease));
        states.insert(key, Arc::downgrade(&state));
        if checked {
            self.checks_added.notify_one();
        }
        state
    }

    /// Every endpoint state in use that has active checks.
    pub fn checked_states(&self) -> Vec<Arc<EndpointState>> {
        lock(&self.states)
            .values()
            .filter_map(Weak::upgrade)
            .filter(|state| state.is_checked())
            .collect()
    }

    /// Resolves when a checked endpoint is added after the last call.
    pub async fn checks_changed(&self) {
        self.checks_added.notified().await
    }

    fn lease(&self, transport: &Transport, address: SocketAddr) -> Arc<AddressLease> {
        let mut leases = lock(&self.leases);
        let key = (transport.clone(), address);
        if let Some(lease) = leases.get(&key).and_then(Weak::upgrade) {
            return lease;
        }
        let lease = Arc::new(AddressLease::new());
        leases.insert(key, Arc::downgrade(&lease));
        lease
    }

    /// The signal that closes connections to `address` once no table uses
    /// it; `None` when none does already.
    pub fn retirement(&self, transport: &Transport, address: SocketAddr) -> Option<Retirement> {
        self.held_lease(transport, address)
            .map(|lease| lease.retirement())
    }

    /// Cancelled when a route table without `address` is swapped in (see
    /// `finish_table`); `None` when no table uses it already.
    pub fn departure(
        &self,
        transport: &Transport,
        address: SocketAddr,
    ) -> Option<CancellationToken> {
        self.held_lease(transport, address)
            .map(|lease| lease.departure())
    }

    /// The lease of `address`, while a table or a request holds it.
    fn held_lease(&self, transport: &Transport, address: SocketAddr) -> Option<Arc<AddressLease>> {
        lock(&self.leases)
            .get(&(transport.clone(), address))
            .and_then(Weak::upgrade)
    }

    /// The table built last is now the one requests use: every address it
    /// does not use has departed. Requests that still hold an older table
    /// keep its leases, and so are told.
    pub fn finish_table(&self) {
        let table = self.table.load(Ordering::Relaxed);
        let leases: Vec<_> = lock(&self.leases)
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for lease in leases {
            lease.depart_unless_used_by(table);
        }
    }

    /// Forgets the entries of endpoints no table uses any more.
    pub fn sweep(&self) {
        lock(&self.states).retain(|_, state| state.strong_count() > 0);
        lock(&self.leases).retain(|_, lease| lease.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> EndpointRegistry {
        EndpointRegistry::new()
    }

    fn address(text: &str) -> Destination {
        Destination::Address(text.parse().unwrap())
    }

    fn location(name: &str) -> Arc<str> {
        name.into()
    }

    /// The state of 10.0.0.1:80 as location `a.com/` asks for it.
    fn state_of(
        registry: &EndpointRegistry,
        transport: Transport,
        interval: Option<Duration>,
    ) -> Arc<EndpointState> {
        let place = address("10.0.0.1:80");
        registry.state(&place, &transport, interval, &location("a.com/"))
    }

    #[test]
    fn an_address_that_stays_keeps_its_state() {
        let registry = registry();
        let interval = Some(Duration::from_secs(15));
        let first = state_of(&registry, Transport::Http1, interval);
        first.record(false);
        first.record(false);
        let again = state_of(&registry, Transport::Http1, interval);
        assert!(Arc::ptr_eq(&first, &again));
        assert!(!again.is_healthy());
        let other = state_of(&registry, Transport::H2c, interval);
        assert!(
            !Arc::ptr_eq(&first, &other),
            "another transport is another pool"
        );
    }

    #[test]
    fn the_last_user_gone_retires_the_address() {
        let registry = registry();
        let place = "10.0.0.1:80".parse().unwrap();
        let state = state_of(&registry, Transport::Http1, None);
        let retirement = registry.retirement(&Transport::Http1, place).unwrap();
        assert!(!retirement.is_raised());
        let waiting = retirement.clone().into_token();
        drop(state);
        assert!(retirement.is_raised());
        assert!(waiting.is_cancelled(), "a wait on it ends too");
        assert!(registry.retirement(&Transport::Http1, place).is_none());
        registry.sweep();
        assert!(lock(&registry.states).is_empty());
        assert!(lock(&registry.leases).is_empty());
    }

    #[test]
    fn an_address_the_swapped_in_table_does_not_use_has_departed() {
        let registry = registry();
        let (kept, dropped) = (address("10.0.0.1:80"), address("10.0.0.2:80"));
        let place = |destination: &Destination| match destination {
            Destination::Address(address) => *address,
            Destination::Srv { .. } => unreachable!(),
        };
        let departure = |destination| registry.departure(&Transport::Http1, place(destination));
        let build = |destinations: &[&Destination]| -> Vec<Arc<EndpointState>> {
            registry.start_table();
            let states = destinations
                .iter()
                .map(|d| registry.state(d, &Transport::Http1, None, &location("a.com/")))
                .collect();
            registry.finish_table();
            states
        };
        let first = build(&[&kept, &dropped]);
        let (kept_signal, dropped_signal) =
            (departure(&kept).unwrap(), departure(&dropped).unwrap());
        // A request in flight still holds the first table's endpoints.
        let second = build(&[&kept]);
        assert!(!kept_signal.is_cancelled(), "still used");
        assert!(dropped_signal.is_cancelled(), "gone from the new table");
        assert!(departure(&dropped).unwrap().is_cancelled(), "while held");

        let third = build(&[&kept, &dropped]);
        let back = departure(&dropped).unwrap();
        assert!(!back.is_cancelled(), "back in a table: a new signal");
        assert!(dropped_signal.is_cancelled(), "the old one stays raised");
        drop((first, second, third));
        assert!(back.is_cancelled(), "no holder left");
    }

    #[test]
    fn an_endpoint_lists_the_locations_of_the_newest_table() {
        let registry = registry();
        let place = address("10.0.0.1:80");
        registry.start_table();
        let state = registry.state(&place, &Transport::Http1, None, &location("a.com/"));
        registry.state(&place, &Transport::Http1, None, &location("b.com/api"));
        registry.state(&place, &Transport::Http1, None, &location("a.com/"));
        assert_eq!(state.locations(), "a.com/, b.com/api");
        registry.start_table();
        registry.state(&place, &Transport::Http1, None, &location("b.com/api"));
        assert_eq!(
            state.locations(),
            "b.com/api",
            "a.com/ left with the old table"
        );
    }
}
