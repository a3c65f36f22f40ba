//! `GET /api/v1/diagnostics`: every provider's current label and routes-file
//! problems, and every host two providers define, as the router holds them
//! now. A problem fixed is gone from the next answer.

use serde_json::{json, Value};

use super::AdminState;
use crate::config::SeverityCounts;

pub fn current(state: &AdminState) -> Value {
    let diagnostics = state.router().diagnostics();
    let counts = SeverityCounts::of(diagnostics.iter().map(|(_, diagnostic)| diagnostic));
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
        "counts": counts.to_json(),
    })
}
