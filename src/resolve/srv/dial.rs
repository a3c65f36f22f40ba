//! Opening a connection to an SRV origin: the owner's answer, its targets in
//! RFC 2782 order, each target's addresses, all within one connect timeout
//! shared out so no single target or address can use it all. The connecting
//! itself is the caller's (TCP in production, fakes in tests); TLS and
//! pooling happen above.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::time::{timeout, timeout_at, Instant};

use super::cache::SrvResolver;
use super::order::{order_targets, OrderedTarget};
use crate::resolve::{LookupError, SrvAnswer};

/// A connection to one target of an SRV answer.
#[derive(Debug)]
pub struct SrvConnection<S> {
    pub stream: S,
    /// The target's name as the answer gave it (for `tls_server_name = "target"`).
    pub target: String,
    pub address: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
pub enum SrvDialError {
    /// NXDOMAIN, an empty answer, or only `.` targets.
    #[error("the SRV service is not available")]
    Unavailable,
    #[error("SRV lookup failed: {0}")]
    LookupFailed(String),
    /// The connect timeout ran out before every target was tried.
    #[error("no SRV target answered within the connect timeout")]
    TimedOut,
    /// Every target was tried; the error of the last one.
    #[error("no SRV target could be reached: {0}")]
    AllFailed(#[source] io::Error),
}

/// A fast random source for target order, seeded by the OS; tests pass a
/// seeded one of their own instead.
pub fn dial_rng() -> SmallRng {
    SmallRng::from_os_rng()
}

/// Connects to a target of `owner`'s SRV answer: targets in RFC 2782 order,
/// the next one when a dial fails, all within `connect_timeout`. Each target
/// gets the time left divided by the targets left, for resolving its name and
/// trying each of its addresses in turn (each address a share of the
/// target's time). `connect` gets the address and the time it has.
pub async fn dial<S, C, F, R>(
    resolver: &SrvResolver,
    owner: &str,
    connect_timeout: Duration,
    rng: &mut R,
    mut connect: C,
) -> Result<SrvConnection<S>, SrvDialError>
where
    C: FnMut(SocketAddr, Duration) -> F,
    F: Future<Output = io::Result<S>>,
    R: Rng + ?Sized,
{
    let deadline = Instant::now() + connect_timeout;
    let answer = match timeout_at(deadline, resolver.lookup_srv(owner)).await {
        Err(_) => return Err(SrvDialError::TimedOut),
        Ok(Err(LookupError::NotFound)) => return Err(SrvDialError::Unavailable),
        Ok(Err(LookupError::Failed(reason))) => return Err(SrvDialError::LookupFailed(reason)),
        Ok(Ok(answer)) => answer,
    };
    let targets = order_targets(&answer.records, rng);
    let mut last_error = None;
    for (index, target) in targets.iter().enumerate() {
        let now = Instant::now();
        if now >= deadline {
            return Err(SrvDialError::TimedOut);
        }
        let target_deadline = now + share(deadline - now, targets.len() - index);
        match dial_target(resolver, &answer, target, target_deadline, &mut connect).await {
            Ok(connection) => return Ok(connection),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.map_or(SrvDialError::Unavailable, SrvDialError::AllFailed))
}

async fn dial_target<S, C, F>(
    resolver: &SrvResolver,
    answer: &SrvAnswer,
    target: &OrderedTarget<'_>,
    deadline: Instant,
    connect: &mut C,
) -> io::Result<SrvConnection<S>>
where
    C: FnMut(SocketAddr, Duration) -> F,
    F: Future<Output = io::Result<S>>,
{
    let name = &target.record.target;
    let addresses = target_addresses(resolver, answer, name, deadline).await?;
    let mut last_error = io::Error::new(
        io::ErrorKind::NotFound,
        format!("SRV target {name} has no addresses"),
    );
    for (index, ip) in addresses.iter().enumerate() {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let time = share(deadline - now, addresses.len() - index);
        let address = SocketAddr::new(*ip, target.record.port);
        let result = timeout(time, connect(address, time))
            .await
            .unwrap_or_else(|_| Err(timed_out(format!("connecting to {address}"))));
        resolver.count_dial_attempt(target.tier, result.is_ok());
        match result {
            Ok(stream) => {
                return Ok(SrvConnection {
                    stream,
                    target: name.clone(),
                    address,
                })
            }
            Err(error) => last_error = error,
        }
    }
    Err(last_error)
}

/// An IP literal as given; else the addresses the server sent along with
/// the answer; else a lookup.
async fn target_addresses(
    resolver: &SrvResolver,
    answer: &SrvAnswer,
    name: &str,
    deadline: Instant,
) -> io::Result<Vec<IpAddr>> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let sent: Vec<IpAddr> = answer
        .additional
        .iter()
        .filter(|(owner, _)| owner.eq_ignore_ascii_case(name))
        .map(|(_, ip)| *ip)
        .collect();
    if !sent.is_empty() {
        return Ok(sent);
    }
    match timeout_at(deadline, resolver.lookup_ip(name)).await {
        Ok(Ok(found)) => Ok(found.addresses),
        Ok(Err(error)) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("SRV target {name}: {error}"),
        )),
        Err(_) => Err(timed_out(format!("resolving SRV target {name}"))),
    }
}

/// `time` split evenly between `ways` (at least one).
fn share(time: Duration, ways: usize) -> Duration {
    time / u32::try_from(ways.max(1)).unwrap_or(u32::MAX)
}

fn timed_out(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what} timed out"))
}

#[cfg(test)]
mod tests;
