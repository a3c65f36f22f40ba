//! `rate_limit`: a token bucket per client or per header value, as
//! settings (the buckets are `crate::middleware`'s).

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

use http::HeaderName;

use super::{header_name, read_text, scalars, WrittenSettings};
use crate::config::durations::parse_duration;

/// Requests a rate limit may allow per period, and the most it may let
/// through at once.
const RATE_LIMIT_COUNTS: RangeInclusive<u64> = 1..=1_000_000;
const RATE_LIMIT_PERIODS: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(86_400);

/// A token bucket per client (or per value of a header): `average`
/// requests per `period` on the whole, up to `burst` at once; past it, `429`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RateLimit {
    pub average: u32,
    pub burst: u32,
    pub period: Duration,
    pub by: RateLimitKey,
}

/// Whose requests share a bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateLimitKey {
    /// The client's address (as `--trusted-proxies` establish it).
    Client,
    /// The value of this request header; requests without it count by
    /// their client's address.
    Header(HeaderName),
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} per {:?}, burst {}, by ",
            self.average, self.period, self.burst
        )?;
        match &self.by {
            RateLimitKey::Client => f.write_str("client"),
            RateLimitKey::Header(name) => write!(f, "header:{name}"),
        }
    }
}

pub(super) fn read_rate_limit(written: &mut impl WrittenSettings) -> Option<RateLimit> {
    let count = |text: &str| scalars::whole_number(text, RATE_LIMIT_COUNTS).map(|n| n as u32);
    let average = read_text(written, "rate_limit.average", count);
    let burst = read_text(written, "rate_limit.burst", count);
    let period = read_text(written, "rate_limit.period", |text| {
        let period = parse_duration(text)?;
        match RATE_LIMIT_PERIODS.contains(&period) {
            true => Ok(period),
            false => Err(format!("`{text}` is outside 1ms..24h")),
        }
    });
    let by = read_text(written, "rate_limit.by", rate_limit_key);
    let others_written = ["rate_limit.burst", "rate_limit.period", "rate_limit.by"]
        .iter()
        .any(|key| written.is_written(key));
    let Some(average) = average else {
        if others_written && !written.is_written("rate_limit.average") {
            let reason =
                "a rate limit needs rate_limit.average, the requests allowed per period".to_owned();
            written.refuse("rate_limit.average", reason);
        }
        return None;
    };
    Some(RateLimit {
        average,
        // As many at once as in a period, unless told otherwise.
        burst: burst.unwrap_or(average),
        period: period.unwrap_or(Duration::from_secs(1)),
        by: by.unwrap_or(RateLimitKey::Client),
    })
}

/// `client`, or `header:<Header-Name>`.
pub fn rate_limit_key(text: &str) -> Result<RateLimitKey, String> {
    if text == "client" {
        return Ok(RateLimitKey::Client);
    }
    let name = text
        .strip_prefix("header:")
        .ok_or_else(|| format!("`{text}`: expected `client` or `header:<Header-Name>`"))?;
    header_name(name.trim()).map(RateLimitKey::Header)
}
