//! SRV answers (RFC 2782) through target ordering and dialing, on arbitrary
//! records. Input: a byte choosing the answer (not found, a failure, or
//! records), two bytes seeding the order, then records of 7 bytes: priority,
//! weight, port (big-endian u16 each) and a byte choosing the target among a
//! few names, `.` and IP literals (bit 7: the answer carries an address for it).
//! A connect succeeds when the port is odd, so the input decides which do.
//!
//! Checked: the order lists every usable record once, tier by tier by
//! priority; dialing tries targets in that tier order, stops at the first
//! connection that succeeds and answers with it; when every one fails, every
//! address of every usable target was tried; "unavailable" means there was
//! nothing usable to try.

#![no_main]

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use dockhand::resolve::srv::{dial, order_targets};
use dockhand::resolve::{
    CacheTtls, Dns, IpAnswer, LookupError, SrvAnswer, SrvDialError, SrvRecord, SrvResolver,
};
use futures_util::future::BoxFuture;
use libfuzzer_sys::fuzz_target;
use rand::rngs::StdRng;
use rand::SeedableRng;

/// `a.example` resolves to two addresses, the others to none; `A.example`
/// and `a.example` are one name, as in DNS.
const TARGETS: [&str; 6] = [
    "a.example",
    "A.example",
    "b.example",
    ".",
    "10.0.0.9",
    "::1",
];
const LOOKED_UP: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)),
    IpAddr::V4(Ipv4Addr::new(10, 0, 1, 2)),
];
const SENT_ALONG: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

struct FuzzDns {
    srv: Result<SrvAnswer, LookupError>,
}

impl Dns for FuzzDns {
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        Box::pin(async move {
            match name.eq_ignore_ascii_case("a.example") {
                true => Ok(IpAnswer {
                    addresses: LOOKED_UP.to_vec(),
                    ttl: Duration::from_secs(5),
                }),
                false => Err(LookupError::NotFound),
            }
        })
    }

    fn lookup_srv<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        Box::pin(async { self.srv.clone() })
    }
}

/// The addresses dialing finds for `record`'s target.
fn addresses(answer: &SrvAnswer, record: &SrvRecord) -> Vec<IpAddr> {
    if let Ok(ip) = record.target.parse() {
        return vec![ip];
    }
    let sent: Vec<IpAddr> = answer
        .additional
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case(&record.target))
        .map(|(_, ip)| *ip)
        .collect();
    match (
        sent.is_empty(),
        record.target.eq_ignore_ascii_case("a.example"),
    ) {
        (false, _) => sent,
        (true, true) => LOOKED_UP.to_vec(),
        (true, false) => Vec::new(),
    }
}

fn answer_of(records: &[u8]) -> SrvAnswer {
    let mut answer = SrvAnswer {
        records: Vec::new(),
        additional: Vec::new(),
        ttl: Duration::from_secs(30),
    };
    for record in records.chunks_exact(7) {
        let number = |at: usize| u16::from_be_bytes([record[at], record[at + 1]]);
        let target = TARGETS[usize::from(record[6] & 0x7f) % TARGETS.len()].to_owned();
        if record[6] & 0x80 != 0 && target != "." {
            answer.additional.push((target.clone(), SENT_ALONG));
        }
        answer.records.push(SrvRecord {
            priority: number(0),
            weight: number(2),
            port: number(4),
            target,
        });
    }
    answer
}

fn check_order(records: &[SrvRecord], seed: u64) {
    let ordered = order_targets(records, &mut StdRng::seed_from_u64(seed));
    let usable = records.iter().filter(|r| r.target != ".").count();
    assert_eq!(ordered.len(), usable, "every usable record once");
    for (index, record) in records.iter().enumerate() {
        let times = ordered
            .iter()
            .filter(|t| std::ptr::eq(t.record, record))
            .count();
        assert_eq!(times, usize::from(record.target != "."), "record {index}");
    }
    for pair in ordered.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        match after.tier - before.tier {
            0 => assert_eq!(before.record.priority, after.record.priority),
            1 => assert!(before.record.priority < after.record.priority),
            skipped => panic!("{skipped} tiers at once"),
        }
    }
    if let Some(first) = ordered.first() {
        assert_eq!(first.tier, 0);
    }
}

fuzz_target!(|data: &[u8]| {
    let [kind, seed_high, seed_low, records @ ..] = data else {
        return;
    };
    let seed = u64::from(u16::from_be_bytes([*seed_high, *seed_low]));
    let answer = answer_of(records);
    check_order(&answer.records, seed);
    let srv = match kind % 8 {
        0 => Err(LookupError::NotFound),
        1 => Err(LookupError::Failed("SERVFAIL".into())),
        _ => Ok(answer.clone()),
    };
    let dns = Arc::new(FuzzDns { srv: srv.clone() });
    let ttls = CacheTtls {
        min_ttl: Duration::from_secs(1),
        max_ttl: Duration::from_secs(60),
        negative_ttl: Duration::from_secs(1),
    };
    let resolver = SrvResolver::new(dns, ttls);
    let mut tried: Vec<SocketAddr> = Vec::new();
    let result = RUNTIME.block_on(dial(
        &resolver,
        "_app._tcp.example",
        Duration::from_secs(60),
        &mut StdRng::seed_from_u64(seed),
        |address: SocketAddr, _time| {
            tried.push(address);
            async move {
                match address.port() % 2 {
                    1 => Ok(address),
                    _ => Err(io::Error::from(io::ErrorKind::ConnectionRefused)),
                }
            }
        },
    ));
    let usable: Vec<&SrvRecord> = answer.records.iter().filter(|r| r.target != ".").collect();
    let tier_of = |address: &SocketAddr| {
        let mut priorities: Vec<u16> = usable.iter().map(|r| r.priority).collect();
        priorities.sort();
        priorities.dedup();
        let priority = usable
            .iter()
            .filter(|r| r.port == address.port() && addresses(&answer, r).contains(&address.ip()))
            .map(|r| r.priority)
            .min()
            .unwrap_or_else(|| panic!("{address} is no usable target's"));
        priorities.binary_search(&priority).unwrap()
    };
    // A target can sit in several tiers; each address is then tried in its
    // lowest, so tiers can only be compared when each address is in one.
    let tiers: Vec<usize> = tried.iter().map(tier_of).collect();
    if tried
        .iter()
        .all(|a| tried.iter().filter(|b| *b == a).count() == 1)
    {
        assert!(tiers.windows(2).all(|w| w[0] <= w[1]), "{tried:?}");
    }
    let (failed, last) = match tried.split_last() {
        Some((last, failed)) => (failed, Some(last)),
        None => (&[][..], None),
    };
    assert!(failed.iter().all(|a| a.port() % 2 == 0), "{tried:?}");
    match result {
        Ok(connection) => {
            assert_eq!(Some(&connection.stream), last);
            assert_eq!(connection.address, connection.stream);
            assert!(connection.address.port() % 2 == 1);
            assert!(
                usable.iter().any(|r| r.target == connection.target
                    && r.port == connection.address.port()
                    && addresses(&answer, r).contains(&connection.address.ip())),
                "{connection:?} is no target's"
            );
        }
        Err(SrvDialError::Unavailable) => {
            assert!(srv.is_err() || usable.is_empty(), "{usable:?}");
            assert!(tried.is_empty());
        }
        Err(SrvDialError::LookupFailed(_)) => assert_eq!(kind % 8, 1),
        Err(SrvDialError::AllFailed(_)) => {
            assert!(last.is_none_or(|a| a.port() % 2 == 0), "{tried:?}");
            let every: usize = usable.iter().map(|r| addresses(&answer, r).len()).sum();
            assert_eq!(tried.len(), every, "every address of every target is tried");
        }
        Err(SrvDialError::TimedOut) => panic!("timed out with nothing slow"),
    }
});
