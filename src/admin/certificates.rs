//! `GET /api/v1/certificates`: every certificate held, with where it came
//! from (the chain file's path for the certificates directory) and how long
//! it is valid, and where each name's ACME order stands.

use std::time::SystemTime;

use serde_json::{json, Value};

use super::hosts::timestamp;
use super::AdminState;
use crate::tls::{CertificateSource, OrderState, TlsState};

const DAY_SECONDS: i64 = 24 * 60 * 60;

pub fn all(state: &AdminState) -> Value {
    view(&state.proxy.tls, SystemTime::now())
}

fn view(tls: &TlsState, now: SystemTime) -> Value {
    let certificates: Vec<Value> = tls
        .certificates
        .all()
        .into_iter()
        .map(|(source, certificate)| {
            let path = match source {
                CertificateSource::Files => tls.files.path_of(&certificate),
                CertificateSource::Acme => None,
            };
            json!({
                "source": source.label(),
                "names": certificate.names,
                "not_before": timestamp(certificate.not_before),
                "not_after": timestamp(certificate.not_after),
                "days_left": days_left(certificate.not_after, now),
                "path": path.map(|path| path.display().to_string()),
            })
        })
        .collect();
    let acme: Vec<Value> = tls
        .acme
        .all()
        .into_iter()
        .map(|(name, state)| order_json(name, &state))
        .collect();
    json!({ "certificates": certificates, "acme": acme })
}

/// Whole days from `now` to `not_after`: 0 on the last day, negative once expired.
fn days_left(not_after: SystemTime, now: SystemTime) -> i64 {
    let seconds = match not_after.duration_since(now) {
        Ok(left) => i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
        Err(past) => -i64::try_from(past.duration().as_secs()).unwrap_or(i64::MAX),
    };
    seconds.div_euclid(DAY_SECONDS)
}

fn order_json(name: String, state: &OrderState) -> Value {
    match state {
        OrderState::Waiting { reason } => {
            json!({"name": name, "state": "waiting", "reason": reason})
        }
        OrderState::Ordering { since } => {
            json!({"name": name, "state": "ordering", "since": timestamp(*since)})
        }
        OrderState::Failed { detail, next_try } => json!({
            "name": name, "state": "failed", "detail": detail, "next_try": timestamp(*next_try),
        }),
        OrderState::Issued {
            not_after,
            renew_at,
        } => json!({
            "name": name, "state": "issued",
            "not_after": timestamp(*not_after), "renew_at": timestamp(*renew_at),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tls::test_certificate;

    #[test]
    fn days_left_count_whole_days_and_go_negative_once_expired() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 * 86_400);
        let at = |days: f64| now + Duration::from_secs_f64(days * 86_400.0);
        assert_eq!(days_left(at(2.5), now), 2);
        assert_eq!(days_left(at(0.5), now), 0);
        assert_eq!(days_left(now - Duration::from_secs(3_600), now), -1);
    }

    #[test]
    fn every_certificate_with_its_file_and_every_order_state() {
        let tls = TlsState::default();
        let ordered = test_certificate(&["b.example.com"]);
        tls.certificates
            .replace(CertificateSource::Acme, vec![ordered.clone()]);
        let now = SystemTime::now();
        let later = now + Duration::from_secs(3_600);
        tls.acme.set(
            "a.example.com",
            OrderState::Waiting {
                reason: "no healthy upstream yet".into(),
            },
        );
        tls.acme
            .set("b.example.com", OrderState::Ordering { since: now });
        tls.acme.set(
            "c.example.com",
            OrderState::Failed {
                detail: "rate limited".into(),
                next_try: later,
            },
        );
        tls.acme.set(
            "d.example.com",
            OrderState::Issued {
                not_after: ordered.not_after,
                renew_at: later,
            },
        );
        let view = view(&tls, now);
        let certificate = &view["certificates"][0];
        assert_eq!(certificate["source"], "acme");
        assert_eq!(certificate["names"], json!(["b.example.com"]));
        assert_eq!(certificate["not_after"], timestamp(ordered.not_after));
        assert_eq!(certificate["path"], Value::Null);
        assert!(certificate["days_left"].as_i64().unwrap() > 0, "{view}");
        let states: Vec<(&str, &str)> = view["acme"]
            .as_array()
            .unwrap()
            .iter()
            .map(|order| {
                (
                    order["name"].as_str().unwrap(),
                    order["state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                ("a.example.com", "waiting"),
                ("b.example.com", "ordering"),
                ("c.example.com", "failed"),
                ("d.example.com", "issued")
            ]
        );
        assert_eq!(view["acme"][0]["reason"], "no healthy upstream yet");
        assert_eq!(view["acme"][1]["since"], timestamp(now));
        assert_eq!(view["acme"][2]["detail"], "rate limited");
        assert_eq!(view["acme"][2]["next_try"], timestamp(later));
        assert_eq!(view["acme"][3]["renew_at"], timestamp(later));
    }
}
