//! Which address reaches a container, decided the same way every time: the
//! route's `network` label (a compose network's short name accepted); else the
//! first of dockhand's own networks, in its preference order, that the
//! container is also on; when dockhand runs outside any container, the
//! container's networks by name. Host-network containers are reached on
//! loopback when dockhand shares the host's network stack.

use std::net::{IpAddr, Ipv4Addr};

use super::facts::{ContainerFacts, ProxyFacts};

/// The address chosen, with a note when there was a choice to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    pub address: IpAddr,
    /// Set when several networks would do: says which one was taken.
    pub warning: Option<String>,
}

/// Chooses the address dockhand reaches `container` at, or says why there is none.
/// `network_label` names the label that would choose, for the messages.
pub fn reach(
    container: &ContainerFacts,
    requested: Option<&str>,
    context: &ProxyFacts,
    network_label: &str,
) -> Result<Reach, String> {
    if container.uses_host_network() {
        return if context.proxy_on_host_network {
            Ok(Reach {
                address: IpAddr::V4(Ipv4Addr::LOCALHOST),
                warning: None,
            })
        } else {
            Err("the container uses the host network, which dockhand reaches only when it runs on the host network too".into())
        };
    }
    if let Some(joined) = container.joined_container() {
        return Err(format!(
            "the container shares the network stack of container {joined} and has no address of its own; route to that container instead"
        ));
    }
    match requested {
        Some(name) => through_named(container, name),
        None => through_shared(container, context, network_label),
    }
}

/// The network the label names: its full name, or a compose short name.
fn through_named(container: &ContainerFacts, name: &str) -> Result<Reach, String> {
    let compose_name = container
        .compose_project
        .as_ref()
        .map(|project| format!("{project}_{name}"));
    let network = [Some(name), compose_name.as_deref()]
        .into_iter()
        .flatten()
        .find(|network| container.networks.contains_key(*network))
        .ok_or_else(|| {
            format!(
                "`{name}` is not one of the container's networks ({})",
                names_or_none(container.networks.keys())
            )
        })?;
    match container.networks.get(network) {
        Some(Some(address)) => Ok(Reach {
            address: *address,
            warning: None,
        }),
        _ => Err(format!(
            "the container has no address on network `{network}`"
        )),
    }
}

/// The first network, in preference order, that both sides are on.
fn through_shared(
    container: &ContainerFacts,
    context: &ProxyFacts,
    network_label: &str,
) -> Result<Reach, String> {
    let shared: Vec<&str> = if context.proxy_networks.is_empty() {
        container.networks.keys().map(String::as_str).collect()
    } else {
        context
            .proxy_networks
            .iter()
            .map(String::as_str)
            .filter(|network| container.networks.contains_key(*network))
            .collect()
    };
    let candidates: Vec<(&str, IpAddr)> = shared
        .iter()
        .filter_map(|network| Some((*network, container.networks.get(*network).copied()??)))
        .collect();
    let Some(&(chosen, address)) = candidates.first() else {
        return Err(match shared.as_slice() {
            [] if context.proxy_networks.is_empty() => "the container is on no network".to_owned(),
            [] => format!(
                "the container shares no network with dockhand (container: {}; dockhand: {})",
                names_or_none(container.networks.keys()),
                names_or_none(context.proxy_networks.iter())
            ),
            [only] => format!("the container has no address on network `{only}`"),
            several => format!(
                "the container has no address on networks {}",
                several.join(", ")
            ),
        });
    };
    let warning = (candidates.len() > 1).then(|| {
        let names: Vec<&str> = candidates.iter().map(|(network, _)| *network).collect();
        format!(
            "reachable through several networks ({}); using `{chosen}` (set {network_label} to choose)",
            names.join(", ")
        )
    });
    Ok(Reach { address, warning })
}

fn names_or_none<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
