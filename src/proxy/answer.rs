//! An upstream's answer made fit for the client: its head checked (its
//! version is the client connection's, its framing passed on), its body
//! limited in how long it may stall, and a protocol switch accepted only
//! where one was asked for. For the upstream's answer (`forward`) and for
//! an auth service's (`forward_auth`).

use std::time::Duration;

use http::header::HeaderValue;
use http::{Response, StatusCode, Version};

use super::attempt::RequestPlan;
use super::error::{ErrorKind, ProxyError};
use super::framing::{self, ReadAhead};
use super::response_body::UpstreamStream;
use super::upgrade;
use crate::connect::UpstreamResponse;

/// The upstream's answer as the client may get it, with the protocols it
/// switched to if it did; or why it is refused: a transfer coding that is
/// not passed on, a body that failed before any of it was sent, or a
/// switch nobody asked for, or to another protocol (which would hand the
/// client a tunnel past routing). Its body may leave the client waiting
/// for at most `stall_limit` between two frames.
pub fn checked_answer(
    route: &RequestPlan,
    response: UpstreamResponse,
    stall_limit: Duration,
) -> Result<(Response<ReadAhead<UpstreamStream>>, Option<HeaderValue>), ProxyError> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Ok((plain_answer(response, stall_limit)?, None));
    }
    let response = checked_head(response, stall_limit)?;
    let protocols = upgrade::accepted_switch(route.upgrade.as_ref(), response.headers())
        .map_err(|unexpected| ProxyError::new(ErrorKind::UnexpectedUpgrade, unexpected))?;
    Ok((response.map(ReadAhead::from), Some(protocols)))
}

/// An answer that switches no protocol, as the client may get it (the
/// auth service's too).
pub fn plain_answer(
    response: UpstreamResponse,
    stall_limit: Duration,
) -> Result<Response<ReadAhead<UpstreamStream>>, ProxyError> {
    let response = checked_head(response, stall_limit)?;
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return Err(ProxyError::new(
            ErrorKind::UnexpectedUpgrade,
            "a protocol switch where none was asked for",
        ));
    }
    framing::read_ahead(response)
}

/// The answer's head checked, its body limited in how long it may stall.
fn checked_head(
    mut response: UpstreamResponse,
    stall_limit: Duration,
) -> Result<Response<UpstreamStream>, ProxyError> {
    // The client's connection has its own version; the upstream's is not passed on.
    *response.version_mut() = Version::HTTP_11;
    framing::check_response_head(&mut response)?;
    Ok(response.map(|body| UpstreamStream::new(body, stall_limit)))
}
