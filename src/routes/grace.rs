//! The grace period for locations whose upstreams move and went away (the
//! last container of a location stopped or was removed): a recreate is
//! usually seconds from bringing it back, so the location is kept, without
//! upstreams (requests wait for one), for the period (`--upstream-wait`),
//! then removed. Locations whose upstreams stay put (the routes file) go at
//! once. One `Grace` per provider, kept by the router.

use std::collections::BTreeMap;

use tokio::time::{Duration, Instant};

use crate::config::{DesiredHosts, HostConfig, HostPattern, LocationConfig};

type LocationKey = (HostPattern, String);

pub struct Grace {
    period: Duration,
    /// What the last published hosts held, by host and prefix.
    published: BTreeMap<LocationKey, (HostConfig, LocationConfig)>,
    /// Gone locations still served empty, until their deadline.
    vanished: BTreeMap<LocationKey, (Instant, HostConfig, LocationConfig)>,
}

impl Grace {
    pub fn new(period: Duration) -> Grace {
        Grace {
            period,
            published: BTreeMap::new(),
            vanished: BTreeMap::new(),
        }
    }

    /// `built` plus the locations that vanished less than a period ago.
    pub fn apply(&mut self, built: DesiredHosts, now: Instant) -> DesiredHosts {
        let current: BTreeMap<LocationKey, (HostConfig, LocationConfig)> = built
            .hosts
            .iter()
            .flat_map(|host| {
                let moving = host.locations.iter().filter(|l| l.upstreams_move);
                moving.map(move |location| {
                    let key = (host.pattern.clone(), location.prefix.clone());
                    (key, (host.clone(), location.clone()))
                })
            })
            .collect();
        for (key, (host, location)) in std::mem::take(&mut self.published) {
            if !current.contains_key(&key) && !self.vanished.contains_key(&key) {
                self.vanished
                    .insert(key, (now + self.period, host, location));
            }
        }
        self.vanished
            .retain(|key, (deadline, _, _)| *deadline > now && !current.contains_key(key));
        self.published = current;

        let mut hosts = built.hosts;
        for ((pattern, _), (_, host, location)) in &self.vanished {
            let empty = LocationConfig {
                upstreams: Vec::new(),
                ..location.clone()
            };
            match hosts.iter_mut().find(|h| &h.pattern == pattern) {
                Some(existing) => existing.locations.push(empty),
                None => hosts.push(HostConfig {
                    locations: vec![empty],
                    ..host.clone()
                }),
            }
        }
        DesiredHosts { hosts }
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

    fn shape(desired: &DesiredHosts) -> Vec<(String, String, usize)> {
        let mut shape: Vec<_> = desired
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
        grace.apply(both.clone(), start);

        let kept = grace.apply(root_only.clone(), start + Duration::from_secs(1));
        assert_eq!(
            shape(&kept),
            [
                ("a.com".into(), "/".into(), 1),
                ("a.com".into(), "/api".into(), 0)
            ]
        );
        assert_eq!(grace.next_deadline(), Some(start + Duration::from_secs(6)));

        let expired = grace.apply(root_only, start + Duration::from_secs(7));
        assert_eq!(shape(&expired), [("a.com".into(), "/".into(), 1)]);
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
        grace.apply(one, start);
        let gone = grace.apply(DesiredHosts::default(), start + Duration::from_secs(1));
        assert_eq!(shape(&gone), [("a.com".into(), "/".into(), 0)]);
        let back = grace.apply(moved, start + Duration::from_secs(2));
        assert_eq!(shape(&back), [("a.com".into(), "/".into(), 1)]);
        assert_eq!(grace.next_deadline(), None);
    }
}
