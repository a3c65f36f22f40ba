//! What ACME should do now, decided from what is served and what is held:
//! which names wait (no healthy upstream yet, a failure backing off), which
//! are ordered together, which certificates are renewed, and when to look
//! again. Pure: the caller passes the time and performs the orders; this
//! module remembers only what it must across looks (names that have had a
//! healthy upstream, orders running, failures and their backoff, names
//! gathering into a batch).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use crate::config::{Diagnostic, Origin, Severity};
use crate::tls::OrderState;

/// How long names that appear one after another are gathered into one
/// order: containers of one compose project start within this.
pub const SETTLE_DELAY: Duration = Duration::from_secs(2);
/// Orders gather names for at most this long while more keep arriving.
const LONGEST_GATHERING: Duration = Duration::from_secs(10);
/// How often health is looked at again while a name waits for it (health
/// changes are not announced).
pub const HEALTH_RECHECK: Duration = Duration::from_secs(1);
/// The first wait after a failure; each further failure doubles it.
const FIRST_BACKOFF: Duration = Duration::from_secs(60);
const LONGEST_BACKOFF: Duration = Duration::from_secs(24 * 60 * 60);
/// Let's Encrypt's limit of names in one certificate.
const MOST_NAMES_PER_ORDER: usize = 100;

/// A name the route table serves that a public CA could issue for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub name: String,
    /// One of its upstreams is healthy now (or unchecked: checks are off).
    pub healthy_now: bool,
    /// A certificate from the certificates directory covers it: never ordered.
    pub file_covered: bool,
}

/// An ACME certificate held (stored and served).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its name in storage.
    pub id: String,
    pub names: Vec<String>,
    pub not_after: SystemTime,
    /// When it is renewed: a third of its lifetime before it ends, or in the
    /// CA's renewal window (RFC 9773).
    pub renew_at: SystemTime,
}

/// One order to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRequest {
    /// Sorted.
    pub names: Vec<String>,
    /// The held certificate it replaces, by id.
    pub renews: Option<String>,
}

/// The outcome of one look.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Every orderable name served, and where it stands.
    pub states: BTreeMap<String, OrderState>,
    /// Orders to start now (already counted as running).
    pub orders: Vec<OrderRequest>,
    /// When to look again at the latest (besides changes).
    pub wake_at: Option<SystemTime>,
    /// Failed orders and wildcard hosts.
    pub diagnostics: Vec<Diagnostic>,
}

/// Why an order failed, as the CA said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub detail: String,
    /// The CA's `Retry-After`, if it gave one.
    pub retry_after: Option<SystemTime>,
}

#[derive(Debug, Clone)]
struct Failure {
    /// Failures in a row.
    count: u32,
    detail: String,
    next_try: SystemTime,
}

#[derive(Debug, Default)]
pub struct Planner {
    /// Names that have had a healthy upstream at least once (flaps since
    /// don't matter: the name is real).
    seen_healthy: BTreeSet<String>,
    /// Name → when its running order started.
    ordering: BTreeMap<String, SystemTime>,
    failures: BTreeMap<String, Failure>,
    /// Names ready to be ordered, gathering into a batch, since when.
    gathering: BTreeMap<String, SystemTime>,
}

impl Planner {
    /// Looks at what is served and held at `now`; the orders returned count
    /// as running until `order_ended`.
    pub fn plan(
        &mut self,
        now: SystemTime,
        served: &[Served],
        wildcards: &[String],
        held: &[Held],
    ) -> Plan {
        let mut plan = Plan::default();
        let mut wake = Wake::default();
        // A certificate was issued for a name: it had a healthy upstream.
        self.seen_healthy
            .extend(held.iter().flat_map(|held| held.names.iter().cloned()));
        let mut ready = BTreeSet::new();
        for served in served.iter().filter(|served| !served.file_covered) {
            let name = &served.name;
            if served.healthy_now {
                self.seen_healthy.insert(name.clone());
            }
            let holder = holder_of(held, name);
            let state = if let Some(since) = self.ordering.get(name) {
                OrderState::Ordering { since: *since }
            } else if let Some(held) = holder.filter(|held| held.renew_at > now) {
                wake.at(held.renew_at);
                OrderState::Issued {
                    not_after: held.not_after,
                    renew_at: held.renew_at,
                }
            } else if let Some(failure) = self.failures.get(name).filter(|f| f.next_try > now) {
                wake.at(failure.next_try);
                plan.diagnostics.push(failure_diagnostic(name, failure));
                OrderState::Failed {
                    detail: failure.detail.clone(),
                    next_try: failure.next_try,
                }
            } else if !self.seen_healthy.contains(name) {
                wake.at(now + HEALTH_RECHECK);
                OrderState::Waiting {
                    reason: "no healthy upstream yet".to_owned(),
                }
            } else {
                ready.insert(name.clone());
                match holder {
                    Some(held) => OrderState::Issued {
                        not_after: held.not_after,
                        renew_at: held.renew_at,
                    },
                    None => OrderState::Waiting {
                        reason: "to be ordered with the names that appear with it".to_owned(),
                    },
                }
            };
            plan.states.insert(name.clone(), state);
        }
        self.gathering.retain(|name, _| ready.contains(name));
        for name in &ready {
            self.gathering.entry(name.clone()).or_insert(now);
        }
        if let Some(start) = batch_start(&self.gathering) {
            if start <= now {
                plan.orders = batches(&ready, held);
                for order in &plan.orders {
                    for name in &order.names {
                        self.gathering.remove(name);
                        self.ordering.insert(name.clone(), now);
                        plan.states
                            .insert(name.clone(), OrderState::Ordering { since: now });
                    }
                }
            } else {
                wake.at(start);
            }
        }
        for wildcard in wildcards {
            plan.diagnostics.push(Diagnostic {
                origin: Origin::Acme {
                    name: wildcard.clone(),
                },
                key: "acme".to_owned(),
                severity: Severity::Warning,
                reason: "no certificate is ordered for a wildcard: it needs the DNS-01 challenge, and DNS-01 is not supported yet".to_owned(),
                value: None,
                suggestion: None,
            });
        }
        plan.diagnostics.sort();
        plan.wake_at = wake.0;
        plan
    }

    /// An order for `names` ended at `now`: issued (`Ok`) or refused.
    pub fn order_ended(&mut self, names: &[String], now: SystemTime, outcome: Result<(), Refusal>) {
        for name in names {
            self.ordering.remove(name);
            match &outcome {
                Ok(()) => {
                    self.failures.remove(name);
                }
                Err(refusal) => {
                    let count = self.failures.get(name).map_or(0, |f| f.count) + 1;
                    self.failures.insert(
                        name.clone(),
                        Failure {
                            count,
                            detail: refusal.detail.clone(),
                            next_try: next_try(now, count, refusal.retry_after),
                        },
                    );
                }
            }
        }
    }
}

/// The earliest of the times given.
#[derive(Default)]
struct Wake(Option<SystemTime>);

impl Wake {
    fn at(&mut self, time: SystemTime) {
        self.0 = Some(self.0.map_or(time, |earliest| earliest.min(time)));
    }
}

/// The held certificate serving `name`: the one valid longest.
fn holder_of<'a>(held: &'a [Held], name: &str) -> Option<&'a Held> {
    held.iter()
        .filter(|held| held.names.iter().any(|held_name| held_name == name))
        .max_by_key(|held| held.not_after)
}

/// When the names gathering are ordered: a settle delay after the last
/// one joined, and no later than the longest gathering after the first.
fn batch_start(gathering: &BTreeMap<String, SystemTime>) -> Option<SystemTime> {
    let first = gathering.values().min()?;
    let last = gathering.values().max()?;
    Some((*last + SETTLE_DELAY).min(*first + LONGEST_GATHERING))
}

/// The orders for the names ready: a certificate due for renewal is
/// renewed with the names of it still served, replacing it; new names go
/// together, at most `MOST_NAMES_PER_ORDER` to an order.
fn batches(ready: &BTreeSet<String>, held: &[Held]) -> Vec<OrderRequest> {
    let mut renewals: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut new_names = Vec::new();
    for name in ready {
        match holder_of(held, name) {
            Some(holder) => renewals.entry(&holder.id).or_default().push(name.clone()),
            None => new_names.push(name.clone()),
        }
    }
    let renewals = renewals.into_iter().map(|(id, names)| OrderRequest {
        names,
        renews: Some(id.to_owned()),
    });
    let new = new_names
        .chunks(MOST_NAMES_PER_ORDER)
        .map(|names| OrderRequest {
            names: names.to_vec(),
            renews: None,
        })
        .collect::<Vec<_>>();
    renewals.chain(new).collect()
}

/// A third of the lifetime before the end (Let's Encrypt's advice: 30 days
/// before the end of 90).
pub fn renewal_time(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    let lifetime = not_after.duration_since(not_before).unwrap_or_default();
    not_after - lifetime / 3
}

/// A point in the CA's suggested renewal window (RFC 9773 §4.2: chosen at
/// random, so clients don't all come at once); `fraction` is in `0..1`.
pub fn time_in_window(start: SystemTime, end: SystemTime, fraction: f64) -> SystemTime {
    let width = end.duration_since(start).unwrap_or_default();
    start + width.mul_f64(fraction.clamp(0.0, 1.0))
}

/// The wait after the `count`th failure in a row: a minute, doubling, at
/// most a day; never before the CA's `Retry-After`.
fn next_try(now: SystemTime, count: u32, retry_after: Option<SystemTime>) -> SystemTime {
    let doublings = count.saturating_sub(1).min(20);
    let backoff = FIRST_BACKOFF
        .saturating_mul(1 << doublings)
        .min(LONGEST_BACKOFF);
    let ours = now + backoff;
    retry_after.map_or(ours, |theirs| theirs.max(ours))
}

fn failure_diagnostic(name: &str, failure: &Failure) -> Diagnostic {
    Diagnostic {
        origin: Origin::Acme {
            name: name.to_owned(),
        },
        key: "acme".to_owned(),
        severity: Severity::Error,
        reason: format!(
            "the order failed: {}; next try at {} (served over HTTP meanwhile)",
            failure.detail,
            humantime::format_rfc3339_seconds(failure.next_try)
        ),
        value: None,
        suggestion: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::from_secs(1_800_000_000);

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(seconds)
    }

    fn served(name: &str, healthy_now: bool) -> Served {
        Served {
            name: name.to_owned(),
            healthy_now,
            file_covered: false,
        }
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn names_that_appear_together_are_ordered_together_after_the_settle_delay() {
        let mut planner = Planner::default();
        let plan = planner.plan(at(0), &[served("a.example.com", true)], &[], &[]);
        assert!(plan.orders.is_empty());
        assert_eq!(plan.wake_at, Some(at(0) + SETTLE_DELAY));
        let both = [served("a.example.com", true), served("b.example.com", true)];
        let plan = planner.plan(at(1), &both, &[], &[]);
        assert!(plan.orders.is_empty(), "b joined: the delay starts again");
        assert_eq!(plan.wake_at, Some(at(1) + SETTLE_DELAY));
        let plan = planner.plan(at(3), &both, &[], &[]);
        assert_eq!(
            plan.orders,
            [OrderRequest {
                names: names(&["a.example.com", "b.example.com"]),
                renews: None
            }]
        );
        assert_eq!(
            plan.states["a.example.com"],
            OrderState::Ordering { since: at(3) }
        );
        let plan = planner.plan(at(10), &both, &[], &[]);
        assert!(plan.orders.is_empty(), "one order per name at a time");
        assert_eq!(plan.wake_at, None);
    }

    #[test]
    fn names_arriving_without_pause_are_ordered_after_the_longest_gathering() {
        let mut planner = Planner::default();
        let mut hosts = Vec::new();
        for second in 0..12 {
            hosts.push(served(&format!("n{second}.example.com"), true));
            let plan = planner.plan(at(second), &hosts, &[], &[]);
            if second < 10 {
                assert!(plan.orders.is_empty(), "at {second} s");
            } else {
                assert_eq!(plan.orders.len(), 1);
                assert_eq!(plan.orders[0].names.len(), 11);
                break;
            }
        }
    }

    #[test]
    fn a_name_waits_for_a_healthy_upstream_and_remembers_it_across_flaps() {
        let mut planner = Planner::default();
        let plan = planner.plan(at(0), &[served("a.example.com", false)], &[], &[]);
        assert_eq!(
            plan.states["a.example.com"],
            OrderState::Waiting {
                reason: "no healthy upstream yet".to_owned()
            }
        );
        assert_eq!(plan.wake_at, Some(at(0) + HEALTH_RECHECK));
        planner.plan(at(1), &[served("a.example.com", true)], &[], &[]);
        let plan = planner.plan(at(5), &[served("a.example.com", false)], &[], &[]);
        assert_eq!(
            plan.orders.len(),
            1,
            "unhealthy again, but it has been healthy"
        );
    }

    #[test]
    fn a_name_a_file_certificate_covers_is_never_ordered() {
        let mut planner = Planner::default();
        let covered = Served {
            file_covered: true,
            ..served("a.example.com", true)
        };
        let plan = planner.plan(at(0), std::slice::from_ref(&covered), &[], &[]);
        let plan_later = planner.plan(at(60), &[covered], &[], &[]);
        assert!(plan.states.is_empty() && plan_later.orders.is_empty());
    }

    #[test]
    fn failures_back_off_doubling_to_a_day_and_honour_retry_after() {
        let mut planner = Planner::default();
        let host = [served("a.example.com", true)];
        let refused = || {
            Err(Refusal {
                detail: "rate limited".to_owned(),
                retry_after: None,
            })
        };
        planner.plan(at(0), &host, &[], &[]);
        let mut now = at(0) + SETTLE_DELAY;
        let mut waits = Vec::new();
        for _ in 0..13 {
            let plan = planner.plan(now, &host, &[], &[]);
            assert_eq!(plan.orders.len(), 1);
            planner.order_ended(&plan.orders[0].names, now, refused());
            let plan = planner.plan(now, &host, &[], &[]);
            let OrderState::Failed { detail, next_try } = &plan.states["a.example.com"] else {
                panic!("{:?}", plan.states)
            };
            assert_eq!(detail, "rate limited");
            assert_eq!(plan.diagnostics.len(), 1);
            assert_eq!(plan.diagnostics[0].severity, Severity::Error);
            assert!(plan.diagnostics[0].reason.contains("rate limited"));
            waits.push(next_try.duration_since(now).unwrap().as_secs());
            // The retry joins a new batch: ordered a settle delay later.
            now = *next_try;
            planner.plan(now, &host, &[], &[]);
            now += SETTLE_DELAY;
        }
        assert_eq!(
            waits,
            [60, 120, 240, 480, 960, 1920, 3840, 7680, 15360, 30720, 61440, 86400, 86400]
        );
        let plan = planner.plan(now, &host, &[], &[]);
        planner.order_ended(
            &plan.orders[0].names,
            now,
            Err(Refusal {
                detail: "too many orders".to_owned(),
                retry_after: Some(now + Duration::from_secs(3 * 86400)),
            }),
        );
        let plan = planner.plan(now, &host, &[], &[]);
        assert!(matches!(
            plan.states["a.example.com"],
            OrderState::Failed { next_try, .. } if next_try == now + Duration::from_secs(3 * 86400)
        ));
        now += Duration::from_secs(4 * 86400);
        planner.plan(now, &host, &[], &[]);
        let plan = planner.plan(now + SETTLE_DELAY, &host, &[], &[]);
        planner.order_ended(&plan.orders[0].names, now, Ok(()));
        assert!(
            planner.failures.is_empty(),
            "a success forgets the failures"
        );
    }

    #[test]
    fn a_certificate_is_renewed_a_third_of_its_lifetime_before_it_ends() {
        let not_before = at(0);
        let not_after = at(90 * 86400);
        assert_eq!(renewal_time(not_before, not_after), at(60 * 86400));
        assert_eq!(
            time_in_window(at(100), at(200), 0.25),
            at(125),
            "RFC 9773 §4.2: a point in the window"
        );
    }

    #[test]
    fn a_held_certificate_is_renewed_with_its_names_when_due() {
        let mut planner = Planner::default();
        let held = [Held {
            id: "a.example.com".to_owned(),
            names: names(&["a.example.com", "b.example.com"]),
            not_after: at(90),
            renew_at: at(60),
        }];
        let hosts = [
            served("a.example.com", false),
            served("b.example.com", false),
            served("c.example.com", true),
        ];
        let plan = planner.plan(at(0), &hosts, &[], &held);
        assert_eq!(
            plan.states["a.example.com"],
            OrderState::Issued {
                not_after: at(90),
                renew_at: at(60)
            }
        );
        let plan = planner.plan(at(10), &hosts, &[], &held);
        assert_eq!(
            plan.orders,
            [OrderRequest {
                names: names(&["c.example.com"]),
                renews: None
            }]
        );
        let plan = planner.plan(at(60), &hosts, &[], &held);
        assert!(
            plan.orders.is_empty(),
            "a and b became due just now: their batch settles"
        );
        let plan = planner.plan(at(60) + SETTLE_DELAY, &hosts, &[], &held);
        assert_eq!(
            plan.orders,
            [OrderRequest {
                names: names(&["a.example.com", "b.example.com"]),
                renews: Some("a.example.com".to_owned())
            }],
            "renewed without a healthy upstream now: it had one when issued"
        );
    }

    #[test]
    fn a_wildcard_gets_a_warning() {
        let mut planner = Planner::default();
        let plan = planner.plan(at(0), &[], &["*.example.com".to_owned()], &[]);
        assert_eq!(plan.diagnostics.len(), 1);
        assert_eq!(plan.diagnostics[0].severity, Severity::Warning);
        assert!(plan.diagnostics[0]
            .reason
            .contains("DNS-01 is not supported yet"));
    }
}
