//! Compression throughput per core, for choosing the default levels: each
//! encoding at the levels worth considering (gzip 1/6/9, brotli 1/4/6/11,
//! zstd 1/3/9), on 1 MB of JSON and 1 MB of HTML fed in 16 KiB frames and
//! flushed after each, as `Compressed` does with an upstream's body.
//! Criterion reports MB/s (one thread: one core); the compressed size of
//! each is printed before its group.
//!
//! `cargo bench --bench compression` (add `-- json` for one body).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use dockhand::config::middleware::Encoding;
use dockhand::middleware::Encoder;

const BODY_SIZE: usize = 1 << 20;
/// A typical upstream frame.
const FRAME: usize = 16 << 10;

const LEVELS: [(Encoding, &[i32]); 3] = [
    (Encoding::Gzip, &[1, 6, 9]),
    (Encoding::Brotli, &[1, 4, 6, 11]),
    (Encoding::Zstd, &[1, 3, 9]),
];

/// A deterministic pseudo-random sequence, so the bodies vary as real
/// ones do without depending on a random generator's version.
fn numbers(seed: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(seed), |n| {
        Some(
            n.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    })
    .map(|n| n >> 33)
}

const WORDS: [&str; 16] = [
    "alpha",
    "delivery",
    "customer",
    "pending",
    "shipped",
    "invoice",
    "warehouse",
    "Berlin",
    "Lisbon",
    "priority",
    "standard",
    "returned",
    "express",
    "account",
    "discount",
    "review",
];

fn word(number: u64) -> &'static str {
    WORDS[(number % 16) as usize]
}

/// Records numbered from 1, each written by `record` from its id and
/// numbers of the sequence `seed` starts, until `body` is within `room`
/// bytes of `BODY_SIZE`.
fn add_records(
    body: &mut String,
    seed: u64,
    room: usize,
    record: impl Fn(u64, &mut dyn FnMut() -> u64) -> String,
) {
    let mut numbers = numbers(seed);
    let mut id = 0;
    while body.len() < BODY_SIZE - room {
        id += 1;
        body.push_str(&record(id, &mut || numbers.next().unwrap()));
    }
}

/// An API's answer: an array of records with ids, names, prices, dates and tags.
fn json_body() -> Vec<u8> {
    let mut body = String::from("[");
    add_records(&mut body, 1, 400, |id, next| {
        format!(
            r#"{{"id":{id},"uuid":"{:08x}-{:04x}-4{:03x}","customer":"{} {}","status":"{}","total":{}.{:02},"created":"2026-{:02}-{:02}T{:02}:{:02}:00Z","tags":["{}","{}"],"notes":"{} {} {}"}},"#,
            next(),
            next() & 0xffff,
            next() & 0xfff,
            word(next()),
            word(next()),
            word(next()),
            next() % 5000,
            next() % 100,
            next() % 12 + 1,
            next() % 28 + 1,
            next() % 24,
            next() % 60,
            word(next()),
            word(next()),
            word(next()),
            word(next()),
            word(next()),
        )
    });
    body.pop();
    body.push(']');
    body.into_bytes()
}

/// A page: a table of the same records with markup and classes.
fn html_body() -> Vec<u8> {
    let mut body = String::from(
        "<!DOCTYPE html><html><head><title>Orders</title><link rel=\"stylesheet\" href=\"/app.css\"></head><body><table class=\"orders\">\n",
    );
    add_records(&mut body, 2, 300, |id, next| {
        format!(
            "<tr class=\"row {}\"><td class=\"id\"><a href=\"/orders/{id}\">#{id}</a></td><td>{} {}</td><td class=\"amount\">{}.{:02} EUR</td><td><span class=\"badge badge-{}\">{}</span></td></tr>\n",
            if id % 2 == 0 { "even" } else { "odd" },
            word(next()), word(next()),
            next() % 5000, next() % 100,
            word(next()), word(next()),
        )
    });
    body.push_str("</table></body></html>\n");
    body.into_bytes()
}

/// The body compressed as `Compressed` does it; returns the compressed size.
fn compress(encoding: Encoding, level: i32, body: &[u8]) -> usize {
    let mut encoder = Encoder::at_level(encoding, level).expect("an encoder");
    let mut size = 0;
    for frame in body.chunks(FRAME) {
        size += encoder.encode(frame).expect("encodes").len();
    }
    size + encoder.finish().expect("finishes").len()
}

fn throughput(c: &mut Criterion) {
    for (name, body) in [("json", json_body()), ("html", html_body())] {
        let mut group = c.benchmark_group(format!("compress_{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.sample_size(10);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(3));
        for (encoding, levels) in LEVELS {
            for &level in levels {
                let size = compress(encoding, level, &body);
                println!(
                    "{name} {} {level}: {} -> {size} bytes ({:.1}%)",
                    encoding.token(),
                    body.len(),
                    size as f64 * 100.0 / body.len() as f64
                );
                let id = BenchmarkId::new(encoding.token(), level);
                group.bench_with_input(id, &body, |b, body| {
                    b.iter(|| compress(encoding, level, black_box(body)))
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
