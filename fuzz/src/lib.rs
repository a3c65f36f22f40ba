//! What the fuzz targets share: reading fuzz input into the shapes dockhand
//! takes, and the checks a target makes of what came out. Each target is in
//! `fuzz_targets/`; `run.sh` builds and runs them.

pub mod labels_input;
pub mod routes_json;
