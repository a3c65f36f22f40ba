//! Per-request costs of the work the proxy does for every request, one
//! criterion group per piece: `rewrite` (the path an upstream receives) today,
//! with room for others (such as `pick`, choosing an upstream) beside it.
//! Inputs are built once, outside the measured loop, as the route table
//! builds them once at load.
//!
//! `cargo bench --bench hot_path` (add `-- rewrite` for one group).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use http::uri::PathAndQuery;

use dockhand::config::values::rewrite_pattern;
use dockhand::config::Rewrite;
use dockhand::proxy::rewrite::rewrite_path;

fn prefix(strip: Option<&str>, add: Option<&str>) -> Rewrite {
    Rewrite::Prefix {
        strip: strip.map(str::to_owned),
        add: add.map(str::to_owned),
    }
}

fn regex(pattern: &str, replace: &str) -> Rewrite {
    Rewrite::Regex {
        pattern: rewrite_pattern(pattern).expect("a valid benchmark pattern"),
        replace: replace.to_owned(),
    }
}

fn rewrite(c: &mut Criterion) {
    let cases = [
        (
            "prefix_strip",
            prefix(Some("/api"), None),
            "/api/users?page=2",
        ),
        (
            "prefix_strip_add",
            prefix(Some("/legacy"), Some("/v2")),
            "/legacy/orders?page=2",
        ),
        (
            "regex_group",
            regex(r"^/users/(\d+)/profile$", "/profiles/$1"),
            "/users/42/profile?tab=posts",
        ),
        (
            "regex_named_group",
            regex(r"^/users/(?P<id>\d+)/profile$", "/profiles/${id}"),
            "/users/42/profile?tab=posts",
        ),
        (
            "regex_no_match",
            regex(r"^/users/(\d+)/profile$", "/profiles/$1"),
            "/orders/42/items?tab=posts",
        ),
    ];
    let mut group = c.benchmark_group("rewrite");
    for (name, rewrite, path) in &cases {
        let path = PathAndQuery::from_static(path);
        group.bench_function(*name, |b| {
            b.iter(|| rewrite_path(black_box(rewrite), black_box(&path)))
        });
    }
    group.finish();
}

criterion_group!(hot_path, rewrite);
criterion_main!(hot_path);
