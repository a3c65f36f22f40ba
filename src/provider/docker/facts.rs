//! From `docker inspect` to `ContainerFacts`: the plain data the label
//! pipeline needs, read once so nothing downstream touches Docker's types.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use bollard::models::{ContainerInspectResponse, HealthStatusEnum};

use crate::labels::{ContainerFacts, Health};

const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";

/// `None` when the answer lacks what identifies a container.
pub fn facts_from_inspect(response: ContainerInspectResponse) -> Option<ContainerFacts> {
    let id = response.id?;
    let name = response
        .name
        .unwrap_or_default()
        .trim_start_matches('/')
        .to_owned();
    let config = response.config.unwrap_or_default();
    let labels: BTreeMap<String, String> = config.labels.unwrap_or_default().into_iter().collect();
    let exposed_ports: BTreeSet<u16> = config
        .exposed_ports
        .unwrap_or_default()
        .keys()
        .filter_map(|port| {
            port.strip_suffix("/tcp")
                .and_then(|number| number.parse().ok())
        })
        .collect();
    let state = response.state.unwrap_or_default();
    let running = state.running.unwrap_or(false)
        && !state.paused.unwrap_or(false)
        && !state.restarting.unwrap_or(false);
    let health = state.health.and_then(|health| match health.status? {
        HealthStatusEnum::STARTING => Some(Health::Starting),
        HealthStatusEnum::HEALTHY => Some(Health::Healthy),
        HealthStatusEnum::UNHEALTHY => Some(Health::Unhealthy),
        _ => None,
    });
    let networks: BTreeMap<String, Option<IpAddr>> = response
        .network_settings
        .and_then(|settings| settings.networks)
        .unwrap_or_default()
        .into_iter()
        .map(|(network, endpoint)| {
            let ipv4 = endpoint
                .ip_address
                .as_deref()
                .and_then(|ip| ip.parse().ok());
            let ipv6 = endpoint
                .global_ipv6_address
                .as_deref()
                .and_then(|ip| ip.parse().ok());
            (network, ipv4.or(ipv6))
        })
        .collect();
    let network_mode = response
        .host_config
        .and_then(|host| host.network_mode)
        .unwrap_or_else(|| "default".to_owned());
    let created = response
        .created
        .as_deref()
        .and_then(parse_rfc3339_seconds)
        .unwrap_or(0);
    let compose_project = labels.get(COMPOSE_PROJECT_LABEL).cloned();
    Some(ContainerFacts {
        id,
        name,
        created,
        labels,
        running,
        health,
        networks,
        network_mode,
        exposed_ports,
        compose_project,
        service: None,
        reached_by_name: None,
    })
}

/// Seconds since the epoch of `2024-05-01T10:20:30.123456789Z` (UTC only, as Docker writes it).
pub(crate) fn parse_rfc3339_seconds(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let mut date_parts = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (
        date_parts.next()??,
        date_parts.next()??,
        date_parts.next()??,
    );
    let time = time.trim_end_matches('Z');
    let time = time.split(['.', '+']).next()?;
    let mut time_parts = time.split(':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (
        time_parts.next()??,
        time_parts.next()??,
        time_parts.next()??,
    );
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_docker_timestamps() {
        assert_eq!(parse_rfc3339_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_seconds("2024-05-01T10:20:30.123456789Z"),
            Some(1_714_558_830)
        );
        assert_eq!(parse_rfc3339_seconds("garbage"), None);
    }
}
