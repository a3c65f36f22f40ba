//! The grace period for locations whose upstreams move and went away (the
//! last container of a location stopped or was removed): a recreate is
//! usually seconds from bringing it back, so the location is kept, without
//! upstreams (requests wait for one), for the period (`--upstream-wait`),
//! then removed. Locations whose upstreams stay put (the routes file) go at
//! once. One `Grace` per provider, kept by the router.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::{Duration, Instant};

use crate::config::{DesiredHosts, HostConfig, HostPattern, LocationConfig};

type LocationKey = (HostPattern, String);

pub struct Grace {
    period: Duration,
    /// Gone locations still served empty, until their deadline: the host
    /// without its locations, and the location without its upstreams.
    vanished: BTreeMap<LocationKey, (Instant, HostConfig, LocationConfig)>,
}

impl Grace {
    pub fn new(period: Duration) -> Grace {
        Grace {
            period,
            vanished: BTreeMap::new(),
        }
    }

    /// The provider's hosts went from `before` to `after` at `now`: the
    /// locations whose upstreams move and that are gone start their grace
    /// period; those back, or past their deadline, end it.
    pub fn update(&mut self, before: &DesiredHosts, after: &DesiredHosts, now: Instant) {
        let present: BTreeSet<(&HostPattern, &str)> = after
            .hosts
            .iter()
            .flat_map(|host| {
                let prefixes = host.locations.iter().map(|l| l.prefix.as_str());
                prefixes.map(move |prefix| (&host.pattern, prefix))
            })
            .collect();
        for host in &before.hosts {
            for location in host.locations.iter().filter(|l| l.upstreams_move) {
                if present.contains(&(&host.pattern, location.prefix.as_str())) {
                    continue;
                }
                let key = (host.pattern.clone(), location.prefix.clone());
                self.vanished.entry(key).or_insert_with(|| {
                    let host = HostConfig {
                        locations: Vec::new(),
                        ..host.clone()
                    };
                    let location = LocationConfig {
                        upstreams: Vec::new(),
                        ..location.clone()
                    };
                    (now + self.period, host, location)
                });
            }
        }
        self.vanished.retain(|(pattern, prefix), (deadline, _, _)| {
            *deadline > now && !present.contains(&(pattern, prefix.as_str()))
        });
    }

    /// Ends the grace periods that are over by `now`; returns whether any was.
    pub fn expire(&mut self, now: Instant) -> bool {
        let before = self.vanished.len();
        self.vanished.retain(|_, (deadline, _, _)| *deadline > now);
        self.vanished.len() != before
    }

    /// `hosts` plus the locations in their grace period, without upstreams;
    /// `None` when no location is in its grace period (`hosts` as they are).
    pub fn served(&self, hosts: &DesiredHosts) -> Option<DesiredHosts> {
        if self.vanished.is_empty() {
            return None;
        }
        let mut served = hosts.clone();
        for ((pattern, _), (_, host, location)) in &self.vanished {
            match served.hosts.iter_mut().find(|h| &h.pattern == pattern) {
                Some(existing) => existing.locations.push(location.clone()),
                None => served.hosts.push(HostConfig {
                    locations: vec![location.clone()],
                    ..host.clone()
                }),
            }
        }
        Some(served)
    }

    /// When the next vanished location expires, if any does.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.vanished
            .values()
            .map(|(deadline, _, _)| *deadline)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_routes_file;

    /// As a provider of containers writes them: upstreams that move.
    fn hosts(json: &str) -> DesiredHosts {
        let mut hosts = parse_routes_file(json).unwrap();
        for host in &mut hosts.hosts {
            for location in &mut host.locations {
                location.upstreams_move = true;
            }
        }
        hosts
    }

    fn shape(grace: &Grace, hosts: &DesiredHosts) -> Vec<(String, String, usize)> {
        let served = grace.served(hosts).unwrap_or_else(|| hosts.clone());
        let mut shape: Vec<_> = served
            .hosts
            .iter()
            .flat_map(|h| {
                h.locations
                    .iter()
                    .map(move |l| (h.pattern.to_string(), l.prefix.clone(), l.upstreams.len()))
            })
            .collect();
        shape.sort();
        shape
    }

    #[test]
    fn a_vanished_location_is_kept_empty_for_the_period() {
        let start = Instant::now();
        let mut grace = Grace::new(Duration::from_secs(5));
        let both = hosts(
            r#"{"host": {"a.com": {"location": {
                "/": {"upstream": {"10.0.0.1:80": {}}},
                "/api": {"upstream": {"10.0.0.2:80": {}}}}}}}"#,
        );
        let root_only =
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#);
        grace.update(&DesiredHosts::default(), &both, start);
        assert!(grace.served(&both).is_none(), "nothing vanished");

        grace.update(&both, &root_only, start + Duration::from_secs(1));
        assert_eq!(
            shape(&grace, &root_only),
            [
                ("a.com".into(), "/".into(), 1),
                ("a.com".into(), "/api".into(), 0)
            ]
        );
        assert_eq!(grace.next_deadline(), Some(start + Duration::from_secs(6)));
        assert!(!grace.expire(start + Duration::from_secs(5)));

        assert!(grace.expire(start + Duration::from_secs(7)));
        assert_eq!(shape(&grace, &root_only), [("a.com".into(), "/".into(), 1)]);
        assert_eq!(grace.next_deadline(), None);
    }

    #[test]
    fn a_returning_location_ends_its_grace() {
        let start = Instant::now();
        let mut grace = Grace::new(Duration::from_secs(5));
        let one =
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#);
        let moved =
            hosts(r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.9:80": {}}}}}}}"#);
        let gone = DesiredHosts::default();
        grace.update(&one, &gone, start + Duration::from_secs(1));
        assert_eq!(shape(&grace, &gone), [("a.com".into(), "/".into(), 0)]);
        grace.update(&gone, &moved, start + Duration::from_secs(2));
        assert_eq!(shape(&grace, &moved), [("a.com".into(), "/".into(), 1)]);
        assert_eq!(grace.next_deadline(), None);
    }

    #[test]
    fn locations_whose_upstreams_stay_put_go_at_once() {
        let mut grace = Grace::new(Duration::from_secs(5));
        let file = parse_routes_file(
            r#"{"host": {"a.com": {"location": {"/": {"upstream": {"10.0.0.1:80": {}}}}}}}"#,
        )
        .unwrap();
        grace.update(&file, &DesiredHosts::default(), Instant::now());
        assert!(grace.served(&DesiredHosts::default()).is_none());
    }
}
