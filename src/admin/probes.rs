//! Health probes: `/healthz` (the process answers) and `/readyz` (every
//! source of routes has delivered once: the routes file is loaded and the
//! first Docker sync is done; `503` naming what is awaited before), and
//! `dockhand healthcheck`, the client the image's `HEALTHCHECK` runs, as
//! the image has no shell or curl.

use std::net::SocketAddr;
use std::time::Duration;

use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{AdminState, AdminToken};
use crate::config::ProviderId;

/// What `/readyz` answers: `Ok` when ready, else what is awaited.
pub fn readiness(state: &AdminState) -> Result<(), String> {
    let awaited: Vec<&str> = state
        .awaited
        .iter()
        .filter(|provider| !state.router().has_published(**provider))
        .map(|provider| match provider {
            ProviderId::File => "the routes file is not loaded yet",
            ProviderId::Docker => "the first Docker sync has not finished",
            ProviderId::Swarm => "the first Swarm sync has not finished",
            ProviderId::Certificates => "the certificates directory is not read yet",
            ProviderId::Acme => "ACME has not started",
        })
        .collect();
    match awaited.is_empty() {
        true => Ok(()),
        false => Err(awaited.join("; ")),
    }
}

/// How long `dockhand healthcheck` waits for an answer in all.
const HEALTHCHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks `/readyz` at `address` (an unspecified address is asked on
/// loopback); `Ok` on `200`, else why not.
pub async fn healthcheck(address: SocketAddr, token: Option<&AdminToken>) -> Result<(), String> {
    let mut target = address;
    if target.ip().is_unspecified() {
        target.set_ip(match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(target)
            .await
            .map_err(|error| format!("can't reach the admin listener at {target}: {error}"))?;
        let authorization = token
            .map(|token| format!("Authorization: {}\r\n", token.bearer()))
            .unwrap_or_default();
        let request = format!(
            "GET /readyz HTTP/1.1\r\nHost: {target}\r\n{authorization}Connection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|error| format!("can't ask {target}: {error}"))?;
        let mut answer = Vec::new();
        stream
            .read_to_end(&mut answer)
            .await
            .map_err(|error| format!("no answer from {target}: {error}"))?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(HEALTHCHECK_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no answer from {target} within {HEALTHCHECK_TIMEOUT:?}"))??;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok());
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    match status.and_then(|code| StatusCode::from_u16(code).ok()) {
        Some(StatusCode::OK) => Ok(()),
        Some(status) => Err(format!("/readyz answered {status}: {}", body.trim())),
        None => Err(format!("{target} did not answer HTTP")),
    }
}
