//! Placeholder replaced by the rewrite module.
use http::uri::PathAndQuery;

use crate::config::Rewrite;

pub fn rewrite_path(_rewrite: &Rewrite, original: &PathAndQuery) -> PathAndQuery {
    original.clone()
}
