//! `rate_limit`: a token bucket per client address (or per value of a
//! header), refilled at `average / period`, holding at most `burst`. Its
//! memory is bounded whatever the number of clients: at most
//! `MOST_BUCKETS` buckets per location; when full, buckets that have
//! filled up again (the same as a client never seen) go first, then the
//! oldest, so a flood of new addresses can make the limit forget some
//! clients but never grows it. Buckets are kept across route-table
//! rebuilds (`RateLimiters`) while the location and its setting stay.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::HeaderMap;

use crate::config::middleware::{RateLimit, RateLimitKey};
use crate::sync::lock;

/// The most buckets one location keeps (about 64 bytes each: 4 MiB).
pub const MOST_BUCKETS: usize = 65_536;
/// Buckets are spread over this many locks, so clients seldom wait on
/// each other from different worker threads.
const SHARDS: usize = 16;
/// When a shard is full and a sweep frees less than this share of it, the
/// oldest buckets make up the rest: sweeps then come at most once per this
/// many new clients.
const FREED_AT_LEAST: usize = MOST_BUCKETS / SHARDS / 8;

/// Whose bucket a request draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum BucketKey {
    Client(IpAddr),
    /// A header's value, hashed: the value itself is not kept.
    Header(u64),
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

/// One location's buckets.
pub struct RateLimiter {
    setting: RateLimit,
    /// Tokens per second.
    rate: f64,
    shards: Box<[Mutex<HashMap<BucketKey, Bucket>>]>,
    hasher: RandomState,
}

impl RateLimiter {
    pub fn new(setting: RateLimit) -> RateLimiter {
        RateLimiter {
            rate: f64::from(setting.average) / setting.period.as_secs_f64(),
            setting,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
        }
    }

    /// Takes a token for the request; `Err(wait)` when there is none, with
    /// how long until there is.
    pub fn take(&self, client: IpAddr, headers: &HeaderMap, now: Instant) -> Result<(), Duration> {
        let key = self.key(client, headers);
        let mut buckets = lock(self.shard(key));
        let burst = f64::from(self.setting.burst);
        if !buckets.contains_key(&key) && buckets.len() >= MOST_BUCKETS / SHARDS {
            self.make_room(&mut buckets, now);
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: burst,
            updated: now,
        });
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(self.wait_for_one(bucket.tokens))
    }

    /// Whether the request's bucket has a token now, without taking it.
    pub fn available(
        &self,
        client: IpAddr,
        headers: &HeaderMap,
        now: Instant,
    ) -> Result<(), Duration> {
        let key = self.key(client, headers);
        let Some(bucket) = lock(self.shard(key)).get(&key).copied() else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        let tokens = bucket.tokens + elapsed * self.rate;
        match tokens >= 1.0 {
            true => Ok(()),
            false => Err(self.wait_for_one(tokens)),
        }
    }

    fn key(&self, client: IpAddr, headers: &HeaderMap) -> BucketKey {
        match &self.setting.by {
            RateLimitKey::Header(name) => match headers.get(name) {
                Some(value) => BucketKey::Header(self.hasher.hash_one(value.as_bytes())),
                None => BucketKey::Client(client),
            },
            RateLimitKey::Client => BucketKey::Client(client),
        }
    }

    fn shard(&self, key: BucketKey) -> &Mutex<HashMap<BucketKey, Bucket>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// How long until a bucket holding `tokens` has one.
    fn wait_for_one(&self, tokens: f64) -> Duration {
        Duration::from_secs_f64((1.0 - tokens) / self.rate)
    }

    /// Drops the buckets that are full again, and when that frees too
    /// little, the least recently used.
    fn make_room(&self, buckets: &mut HashMap<BucketKey, Bucket>, now: Instant) {
        let burst = f64::from(self.setting.burst);
        let full_again = |bucket: &Bucket| {
            let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
            bucket.tokens + elapsed * self.rate >= burst
        };
        buckets.retain(|_, bucket| !full_again(bucket));
        let capacity = MOST_BUCKETS / SHARDS;
        let free = capacity.saturating_sub(buckets.len());
        if free >= FREED_AT_LEAST {
            return;
        }
        let mut by_age: Vec<(Instant, BucketKey)> = buckets
            .iter()
            .map(|(key, bucket)| (bucket.updated, *key))
            .collect();
        by_age.sort_unstable_by_key(|(updated, _)| *updated);
        for (_, key) in by_age.into_iter().take(FREED_AT_LEAST - free) {
            buckets.remove(&key);
        }
    }

    /// How many buckets it holds now.
    pub fn buckets(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }
}

/// What a location's limiter counts: its requests (`rate_limit`), or its
/// failed logins (`basic_auth`), kept apart even with equal settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    Requests,
    FailedLogins,
}

/// Where a location's limiters are kept across route-table builds: by its
/// host, prefix, what they count and their setting, so a rebuild for
/// another container's change keeps every client's bucket (a client's
/// failed logins are not forgiven by it), and a changed setting starts
/// afresh.
#[derive(Default)]
pub struct RateLimiters {
    kept: Mutex<HashMap<LimiterKey, Arc<RateLimiter>>>,
}

type LimiterKey = (String, String, Counted, RateLimit);

impl RateLimiters {
    /// Starts a build: the limiters it asks for are kept, the others go
    /// when it ends.
    pub fn build(&self) -> LimitersBuild<'_> {
        LimitersBuild {
            registry: self,
            asked: Mutex::default(),
        }
    }
}

/// The limiters of one route-table build.
pub struct LimitersBuild<'r> {
    registry: &'r RateLimiters,
    asked: Mutex<HashMap<LimiterKey, Arc<RateLimiter>>>,
}

impl LimitersBuild<'_> {
    /// The limiter of the location `prefix` of `host` that counts
    /// `counted` with `setting`.
    pub fn limiter(
        &self,
        host: &str,
        prefix: &str,
        counted: Counted,
        setting: &RateLimit,
    ) -> Arc<RateLimiter> {
        let key = (host.to_owned(), prefix.to_owned(), counted, setting.clone());
        let kept = lock(&self.registry.kept).get(&key).cloned();
        let limiter = kept.unwrap_or_else(|| Arc::new(RateLimiter::new(setting.clone())));
        lock(&self.asked).insert(key, limiter.clone());
        limiter
    }
}

impl Drop for LimitersBuild<'_> {
    fn drop(&mut self) {
        let asked = std::mem::take(&mut *lock(&self.asked));
        *lock(&self.registry.kept) = asked;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    fn limiter(average: u32, burst: u32, by: RateLimitKey) -> RateLimiter {
        RateLimiter::new(RateLimit {
            average,
            burst,
            period: Duration::from_secs(1),
            by,
        })
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_burst_then_the_average() {
        let limiter = limiter(10, 3, RateLimitKey::Client);
        let start = Instant::now();
        let client = ip("192.0.2.1");
        let none = HeaderMap::new();
        for _ in 0..3 {
            assert_eq!(limiter.take(client, &none, start), Ok(()));
        }
        let wait = limiter.take(client, &none, start).unwrap_err();
        assert!(
            (wait.as_secs_f64() - 0.1).abs() < 1e-6,
            "a token every 100 ms: {wait:?}"
        );
        // Another client has its own bucket.
        assert_eq!(limiter.take(ip("192.0.2.2"), &none, start), Ok(()));
        // 100 ms later, one more.
        let later = start + Duration::from_millis(100);
        assert_eq!(limiter.take(client, &none, later), Ok(()));
        assert!(limiter.take(client, &none, later).is_err());
    }

    #[test]
    fn by_header_counts_each_value_and_falls_back_to_the_client() {
        let name = HeaderName::from_static("x-api-key");
        let limiter = limiter(1, 1, RateLimitKey::Header(name.clone()));
        let now = Instant::now();
        let key = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name.clone(), HeaderValue::from_static(value));
            headers
        };
        let client = ip("192.0.2.1");
        assert_eq!(limiter.take(client, &key("a"), now), Ok(()));
        assert!(limiter.take(client, &key("a"), now).is_err());
        assert_eq!(limiter.take(client, &key("b"), now), Ok(()));
        assert_eq!(limiter.take(client, &HeaderMap::new(), now), Ok(()));
        assert!(limiter.take(client, &HeaderMap::new(), now).is_err());
    }

    /// Issue 16, item 5: memory bounded whatever the number of clients.
    #[test]
    fn a_hundred_thousand_clients_never_hold_more_than_the_bound() {
        let limiter = limiter(1, 1, RateLimitKey::Client);
        let now = Instant::now();
        let none = HeaderMap::new();
        for n in 0..100_000u32 {
            let client = IpAddr::from((0x0a00_0000 + n).to_be_bytes());
            assert_eq!(limiter.take(client, &none, now), Ok(()));
            assert!(limiter.take(client, &none, now).is_err());
        }
        let held = limiter.buckets();
        assert!(held <= MOST_BUCKETS, "{held} buckets");
        assert!(held > MOST_BUCKETS / 2, "most recent clients kept: {held}");
        // The latest client is still limited.
        let last = IpAddr::from((0x0a00_0000 + 99_999u32).to_be_bytes());
        assert!(limiter.take(last, &none, now).is_err());
    }

    #[test]
    fn rebuilds_keep_the_buckets_of_an_unchanged_location_only() {
        let registry = RateLimiters::default();
        let setting = RateLimit {
            average: 1,
            burst: 1,
            period: Duration::from_secs(60),
            by: RateLimitKey::Client,
        };
        let requests = Counted::Requests;
        let first = registry.build().limiter("a.com", "/", requests, &setting);
        let now = Instant::now();
        assert_eq!(first.take(ip("192.0.2.1"), &HeaderMap::new(), now), Ok(()));
        let build = registry.build();
        let again = build.limiter("a.com", "/", requests, &setting);
        assert!(Arc::ptr_eq(&first, &again));
        // The same setting counting failed logins is another limiter.
        let logins = build.limiter("a.com", "/", Counted::FailedLogins, &setting);
        assert!(!Arc::ptr_eq(&first, &logins));
        drop(build);
        let changed = RateLimit {
            average: 2,
            ..setting.clone()
        };
        let other = registry.build().limiter("a.com", "/", requests, &changed);
        assert!(!Arc::ptr_eq(&first, &other));
        // The build that asked only for the changed one let the first go.
        let back = registry.build().limiter("a.com", "/", requests, &setting);
        assert!(!Arc::ptr_eq(&first, &back));
    }
}
