//! `GET /api/v1/diagnostics`: every provider's current label and routes-file
//! problems, and every host two providers define, as the router holds them
//! now. A problem fixed is gone from the next answer.

use serde_json::{json, Value};

use super::AdminState;
use crate::config::Severity;

pub fn current(state: &AdminState) -> Value {
    let diagnostics = state.router().diagnostics();
    let count = |severity| {
        diagnostics
            .iter()
            .filter(|(_, diagnostic)| diagnostic.severity == severity)
            .count()
    };
    let conflicts: Vec<Value> = state
        .router()
        .conflicts()
        .iter()
        .map(|conflict| {
            json!({
                "host": conflict.host.to_string(),
                "served_by": conflict.served_by.to_string(),
                "ignored": conflict.ignored.to_string(),
            })
        })
        .collect();
    json!({
        "diagnostics": diagnostics.iter().map(|(_, diagnostic)| diagnostic.to_json()).collect::<Vec<_>>(),
        "conflicts": conflicts,
        "counts": {"error": count(Severity::Error), "warning": count(Severity::Warning)},
    })
}
