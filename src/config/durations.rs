//! Durations as users write them: `500ms`, `5s`, `1m`, `1h`.

use std::time::Duration;

/// Parses a duration of one number and one unit (`ms`, `s`, `m`, `h`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit (write e.g. 500ms, 5s, 1m)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (write e.g. 500ms, 5s, 1m)"))?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "`{text}` has an unknown unit `{unit}` (use ms, s, m or h)"
            ))
        }
    };
    number
        .checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "",
            "5",
            "s",
            "5 sec",
            "-1s",
            "1.5s",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }
}
