//! Which container port a route sends to: the `port` label, else the
//! container's only exposed port. Guessing among several, or inventing one
//! when none is exposed, would route to the wrong place silently, so both are
//! errors that name the label to set.

use std::collections::BTreeSet;

/// The port to use, or why there is none. `port_label` is named in the messages.
pub fn choose(
    requested: Option<u16>,
    exposed: &BTreeSet<u16>,
    port_label: &str,
) -> Result<u16, String> {
    if let Some(port) = requested {
        return Ok(port);
    }
    let mut ports = exposed.iter();
    match (ports.next(), ports.next()) {
        (Some(only), None) => Ok(*only),
        (None, _) => Err(format!("the container exposes no port; set {port_label}")),
        (Some(_), Some(_)) => {
            let listed: Vec<String> = exposed.iter().map(u16::to_string).collect();
            Err(format!(
                "the container exposes several ports ({}); set {port_label} to one of them",
                listed.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_wins_then_the_only_port() {
        let exposed = BTreeSet::from([80, 443]);
        assert_eq!(choose(Some(8080), &exposed, "p"), Ok(8080));
        assert_eq!(choose(None, &BTreeSet::from([3000]), "p"), Ok(3000));
        assert_eq!(
            choose(None, &exposed, "dockhand.port"),
            Err(
                "the container exposes several ports (80, 443); set dockhand.port to one of them"
                    .into()
            )
        );
        assert!(choose(None, &BTreeSet::new(), "p").is_err());
    }
}
