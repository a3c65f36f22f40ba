//! `SrvResolver`: the caches in front of `Dns` for SRV origins, one per set
//! of resolution settings. It owns when a name is looked up again (record TTLs
//! clamped to min/max, negative answers, failures keeping the last good
//! answer, single flight, a bound on names) and the counters of lookups and
//! dial attempts. It does not choose targets or dial (`order`, `dial`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio::time::Instant;

use crate::resolve::{Dns, IpAnswer, LookupError, SrvAnswer};

/// How long after an expired answer's refresh started lookups wait for it
/// before they use the last good answer.
pub const REFRESH_WAIT: Duration = Duration::from_millis(500);
/// Names kept per cache, so hosts derived from clients can't grow it.
pub const DEFAULT_CAPACITY: usize = 4096;
/// Dial attempts are counted for tiers 0..DIAL_TIERS; later tiers count as the last.
pub const DIAL_TIERS: usize = 16;

/// How long answers are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheTtls {
    /// The shortest time an answer is kept, and the time between retries of a
    /// failing lookup.
    pub min_ttl: Duration,
    /// The longest time an answer is kept, and served after failures.
    pub max_ttl: Duration,
    /// How long NXDOMAIN or an empty answer is kept.
    pub negative_ttl: Duration,
}

/// Lookups by what they served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LookupCounts {
    /// A cached answer, still fresh.
    pub hit: u64,
    /// An answer looked up for this request.
    pub miss: u64,
    /// The last good answer, because the refresh failed or was slow.
    pub stale: u64,
    /// A cached NXDOMAIN, empty answer or failure.
    pub negative: u64,
    /// A lookup that ended without an answer to serve.
    pub error: u64,
}

/// Dial attempts to the targets of one priority tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierAttempts {
    /// 0 is the preferred tier.
    pub tier: usize,
    pub success: u64,
    pub failure: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SrvStats {
    /// SRV lookups of owner names.
    pub lookups: LookupCounts,
    /// A/AAAA lookups of target names.
    pub target_lookups: LookupCounts,
    /// Tiers with at least one attempt, in tier order.
    pub dial_attempts: Vec<TierAttempts>,
}

/// SRV answers per owner name and addresses per target name, shared by every
/// dial of the upstreams with the same resolution settings.
#[derive(Clone)]
pub struct SrvResolver {
    owners: Arc<NameCache<SrvAnswer>>,
    targets: Arc<NameCache<IpAnswer>>,
    dial_attempts: Arc<DialCounters>,
}

impl SrvResolver {
    pub fn new(dns: Arc<dyn Dns>, ttls: CacheTtls) -> SrvResolver {
        SrvResolver::with_capacity(dns, ttls, DEFAULT_CAPACITY)
    }

    /// At most `capacity` owner names and as many target names are kept.
    pub fn with_capacity(dns: Arc<dyn Dns>, ttls: CacheTtls, capacity: usize) -> SrvResolver {
        SrvResolver {
            owners: Arc::new(NameCache::new(Arc::clone(&dns), ttls, capacity)),
            targets: Arc::new(NameCache::new(dns, ttls, capacity)),
            dial_attempts: Arc::default(),
        }
    }

    /// The SRV answer of `owner`, from the cache or looked up.
    pub async fn lookup_srv(&self, owner: &str) -> Result<SrvAnswer, LookupError> {
        self.owners.resolve(owner).await
    }

    /// The addresses of an SRV target, from the cache or looked up.
    pub async fn lookup_ip(&self, target: &str) -> Result<IpAnswer, LookupError> {
        self.targets.resolve(target).await
    }

    /// The last good SRV answer of `owner`, if one is cached; never looks up.
    pub fn cached_srv(&self, owner: &str) -> Option<SrvAnswer> {
        self.owners.last_good(owner)
    }

    pub fn stats(&self) -> SrvStats {
        SrvStats {
            lookups: self.owners.counts.snapshot(),
            target_lookups: self.targets.counts.snapshot(),
            dial_attempts: self.dial_attempts.snapshot(),
        }
    }

    pub(super) fn count_dial_attempt(&self, tier: usize, success: bool) {
        self.dial_attempts.count(tier, success);
    }
}

/// What the caches hold: an answer with its TTL, and how it is looked up.
trait Answer: Clone + Send + Sync + 'static {
    fn ttl(&self) -> Duration;
    fn look_up<'a>(dns: &'a dyn Dns, name: &'a str) -> BoxFuture<'a, Result<Self, LookupError>>;
}

impl Answer for SrvAnswer {
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn look_up<'a>(dns: &'a dyn Dns, name: &'a str) -> BoxFuture<'a, Result<Self, LookupError>> {
        dns.lookup_srv(name)
    }
}

impl Answer for IpAnswer {
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn look_up<'a>(dns: &'a dyn Dns, name: &'a str) -> BoxFuture<'a, Result<Self, LookupError>> {
        dns.lookup_ip(name)
    }
}

/// What a finished lookup leaves to serve.
#[derive(Clone)]
enum Served<T> {
    Fresh(T),
    /// The lookup failed; the last good answer is still within max_ttl.
    Stale(T),
    Nothing(LookupError),
}

type Refresh<T> = Shared<BoxFuture<'static, Served<T>>>;

struct Entry<T> {
    last_good: Option<(T, Instant)>,
    /// Why the last lookup gave no answer; `None` when it answered.
    failure: Option<LookupError>,
    /// No lookup before this, unless nothing can be served.
    next_lookup: Instant,
    /// The lookup in flight, and when it started.
    refresh: Option<(Refresh<T>, Instant)>,
    created: Instant,
}

impl<T: Clone> Entry<T> {
    /// The last good answer while it may still be served.
    fn usable(&self, now: Instant, max_ttl: Duration) -> Option<&T> {
        self.last_good
            .as_ref()
            .filter(|(_, looked_up)| now < *looked_up + max_ttl)
            .map(|(answer, _)| answer)
    }

    fn is_expired(&self, now: Instant, max_ttl: Duration) -> bool {
        self.refresh.is_none() && now >= self.next_lookup && self.usable(now, max_ttl).is_none()
    }
}

/// What the cache can say without waiting.
enum Cached<T> {
    Ready(Result<T, LookupError>, fn(&LookupCounters) -> &AtomicU64),
    Refreshing {
        refresh: Refresh<T>,
        fallback: Option<T>,
        /// What is left of `REFRESH_WAIT` for a fallback to be used.
        wait: Duration,
    },
}

struct NameCache<T> {
    dns: Arc<dyn Dns>,
    ttls: CacheTtls,
    capacity: usize,
    /// Never held across an await.
    entries: Mutex<HashMap<String, Entry<T>>>,
    counts: LookupCounters,
}

impl<T: Answer> NameCache<T> {
    fn new(dns: Arc<dyn Dns>, ttls: CacheTtls, capacity: usize) -> NameCache<T> {
        NameCache {
            dns,
            ttls,
            capacity: capacity.max(1),
            entries: Mutex::default(),
            counts: LookupCounters::default(),
        }
    }

    fn last_good(&self, name: &str) -> Option<T> {
        let entries = self.lock();
        let entry = entries.get(&name.to_ascii_lowercase())?;
        entry.last_good.as_ref().map(|(answer, _)| answer.clone())
    }

    async fn resolve(self: &Arc<Self>, name: &str) -> Result<T, LookupError> {
        let key = name.to_ascii_lowercase();
        let served = match self.cached(&key) {
            Cached::Ready(result, counter) => {
                counter(&self.counts).fetch_add(1, Ordering::Relaxed);
                return result;
            }
            Cached::Refreshing {
                refresh,
                fallback: Some(last_good),
                wait,
            } => match tokio::time::timeout(wait, refresh).await {
                Ok(served) => served,
                Err(_) => Served::Stale(last_good),
            },
            Cached::Refreshing {
                refresh,
                fallback: None,
                ..
            } => refresh.await,
        };
        let (result, counter) = match served {
            Served::Fresh(answer) => (Ok(answer), &self.counts.miss),
            Served::Stale(answer) => (Ok(answer), &self.counts.stale),
            Served::Nothing(error) => (Err(error), &self.counts.error),
        };
        counter.fetch_add(1, Ordering::Relaxed);
        result
    }

    fn cached(self: &Arc<Self>, key: &str) -> Cached<T> {
        let now = Instant::now();
        let max_ttl = self.ttls.max_ttl;
        let mut entries = self.lock();
        let entry = self.entry(&mut entries, key, now);
        if entry.refresh.is_none() && now < entry.next_lookup {
            match (entry.usable(now, max_ttl), &entry.failure) {
                (Some(answer), None) => return Cached::Ready(Ok(answer.clone()), |c| &c.hit),
                (Some(answer), Some(_)) => return Cached::Ready(Ok(answer.clone()), |c| &c.stale),
                (None, Some(failure)) => {
                    return Cached::Ready(Err(failure.clone()), |c| &c.negative)
                }
                (None, None) => {}
            }
        }
        let (refresh, started) = entry
            .refresh
            .get_or_insert_with(|| (self.start_refresh(key), now))
            .clone();
        Cached::Refreshing {
            refresh,
            fallback: entry.usable(now, max_ttl).cloned(),
            wait: REFRESH_WAIT.saturating_sub(now - started),
        }
    }

    /// Looks `key` up in a task of its own, so the refresh finishes and is
    /// stored even when every lookup waiting for it has given up.
    fn start_refresh(self: &Arc<Self>, key: &str) -> Refresh<T> {
        let cache = Arc::clone(self);
        let name = key.to_owned();
        let task = tokio::spawn(async move {
            let result = T::look_up(cache.dns.as_ref(), &name).await;
            cache.store(&name, result)
        });
        let cache = Arc::clone(self);
        let name = key.to_owned();
        task.map(move |joined| match joined {
            Ok(served) => served,
            Err(error) => cache.store(
                &name,
                Err(LookupError::Failed(format!("the lookup stopped: {error}"))),
            ),
        })
        .boxed()
        .shared()
    }

    fn store(&self, key: &str, result: Result<T, LookupError>) -> Served<T> {
        let now = Instant::now();
        let CacheTtls {
            min_ttl,
            max_ttl,
            negative_ttl,
        } = self.ttls;
        let mut entries = self.lock();
        let entry = self.entry(&mut entries, key, now);
        entry.refresh = None;
        match result {
            Ok(answer) => {
                entry.next_lookup = now + answer.ttl().max(min_ttl).min(max_ttl);
                entry.last_good = Some((answer.clone(), now));
                entry.failure = None;
                Served::Fresh(answer)
            }
            Err(LookupError::NotFound) => {
                entry.next_lookup = now + negative_ttl;
                entry.last_good = None;
                entry.failure = Some(LookupError::NotFound);
                Served::Nothing(LookupError::NotFound)
            }
            Err(failure) => {
                entry.next_lookup = now + min_ttl;
                entry.failure = Some(failure.clone());
                match entry.usable(now, max_ttl).cloned() {
                    Some(answer) => Served::Stale(answer),
                    None => {
                        entry.last_good = None;
                        Served::Nothing(failure)
                    }
                }
            }
        }
    }

    fn entry<'m>(
        &self,
        entries: &'m mut HashMap<String, Entry<T>>,
        key: &str,
        now: Instant,
    ) -> &'m mut Entry<T> {
        if !entries.contains_key(key) {
            self.make_room(entries, now);
        }
        entries.entry(key.to_owned()).or_insert_with(|| Entry {
            last_good: None,
            failure: None,
            next_lookup: now,
            refresh: None,
            created: now,
        })
    }

    /// Below capacity, dropping expired names first, then the oldest.
    fn make_room(&self, entries: &mut HashMap<String, Entry<T>>, now: Instant) {
        if entries.len() < self.capacity {
            return;
        }
        let max_ttl = self.ttls.max_ttl;
        entries.retain(|_, entry| !entry.is_expired(now, max_ttl));
        while entries.len() >= self.capacity {
            let oldest = entries
                .iter()
                .min_by_key(|(_, entry)| entry.created)
                .map(|(name, _)| name.clone());
            match oldest {
                Some(name) => entries.remove(&name),
                None => break,
            };
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry<T>>> {
        crate::sync::lock(&self.entries)
    }
}

#[derive(Default)]
struct LookupCounters {
    hit: AtomicU64,
    miss: AtomicU64,
    stale: AtomicU64,
    negative: AtomicU64,
    error: AtomicU64,
}

impl LookupCounters {
    fn snapshot(&self) -> LookupCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        LookupCounts {
            hit: read(&self.hit),
            miss: read(&self.miss),
            stale: read(&self.stale),
            negative: read(&self.negative),
            error: read(&self.error),
        }
    }
}

#[derive(Default)]
struct DialCounters {
    /// Per tier: successes, failures.
    tiers: [[AtomicU64; 2]; DIAL_TIERS],
}

impl DialCounters {
    fn count(&self, tier: usize, success: bool) {
        let counters = &self.tiers[tier.min(DIAL_TIERS - 1)];
        counters[usize::from(!success)].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Vec<TierAttempts> {
        self.tiers
            .iter()
            .enumerate()
            .map(|(tier, [success, failure])| TierAttempts {
                tier,
                success: success.load(Ordering::Relaxed),
                failure: failure.load(Ordering::Relaxed),
            })
            .filter(|attempts| attempts.success + attempts.failure > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests;
