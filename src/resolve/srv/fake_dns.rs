//! A scripted `Dns` for unit tests (the SRV caches and dialing, the
//! providers' DNS server lookups): answers and delays set per name, lookups
//! counted per name. No network.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt};

use crate::resolve::{Dns, IpAnswer, LookupError, SrvAnswer, SrvRecord};

#[derive(Default)]
pub struct FakeDns {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    srv: HashMap<String, Result<SrvAnswer, LookupError>>,
    ip: HashMap<String, Result<IpAnswer, LookupError>>,
    delays: HashMap<String, Duration>,
    srv_calls: HashMap<String, usize>,
    ip_calls: HashMap<String, usize>,
}

impl FakeDns {
    pub fn set_srv(&self, owner: &str, answer: Result<SrvAnswer, LookupError>) {
        self.state.lock().unwrap().srv.insert(owner.into(), answer);
    }

    pub fn set_ip(&self, name: &str, answer: Result<IpAnswer, LookupError>) {
        self.state.lock().unwrap().ip.insert(name.into(), answer);
    }

    /// Every lookup of `name` (either kind) takes this long from now on.
    pub fn set_delay(&self, name: &str, delay: Duration) {
        self.state.lock().unwrap().delays.insert(name.into(), delay);
    }

    pub fn srv_calls(&self, owner: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.srv_calls.get(owner).copied().unwrap_or(0)
    }

    pub fn ip_calls(&self, name: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.ip_calls.get(name).copied().unwrap_or(0)
    }
}

impl Dns for FakeDns {
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        let (answer, delay) = {
            let mut state = self.state.lock().unwrap();
            *state.ip_calls.entry(name.into()).or_default() += 1;
            let answer = state.ip.get(name).cloned();
            (answer, state.delays.get(name).copied())
        };
        async move {
            tokio::time::sleep(delay.unwrap_or_default()).await;
            answer.unwrap_or(Err(LookupError::NotFound))
        }
        .boxed()
    }

    fn lookup_srv<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        let (answer, delay) = {
            let mut state = self.state.lock().unwrap();
            *state.srv_calls.entry(owner.into()).or_default() += 1;
            let answer = state.srv.get(owner).cloned();
            (answer, state.delays.get(owner).copied())
        };
        async move {
            tokio::time::sleep(delay.unwrap_or_default()).await;
            answer.unwrap_or(Err(LookupError::NotFound))
        }
        .boxed()
    }
}

/// An SRV answer of `(priority, weight, port, target)` records.
pub fn srv_answer(records: &[(u16, u16, u16, &str)], ttl: Duration) -> SrvAnswer {
    SrvAnswer {
        records: records
            .iter()
            .map(|&(priority, weight, port, target)| SrvRecord {
                priority,
                weight,
                port,
                target: target.into(),
            })
            .collect(),
        additional: Vec::new(),
        ttl,
    }
}

pub fn ip_answer(addresses: &[&str], ttl: Duration) -> IpAnswer {
    IpAnswer {
        addresses: addresses
            .iter()
            .map(|a| a.parse::<IpAddr>().unwrap())
            .collect(),
        ttl,
    }
}
