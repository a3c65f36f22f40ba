//! Slow clients: heads trickled in, responses not read.

use std::sync::Arc;

use http::Response;

use crate::support::*;

const MIB: u64 = 1024 * 1024;

#[tokio::test]
async fn measure_stalled_readers() {
    let meter = Arc::new(StreamMeter::default());
    let backend = Backend::start({
        let meter = meter.clone();
        move |_request| {
            let meter = meter.clone();
            async move { Response::new(metered_body(100 * MIB, meter)) }
        }
    })
    .await;
    let process = ProxyProcess::start(&one_route("example.com", backend.addr), &[]).await;
    let before = process.rss_bytes();
    let mut readers = Vec::new();
    let n = 20;
    for _ in 0..n {
        readers.push(stalled_reader(process.addr, "example.com").await);
    }
    let taken = settled(|| meter.taken()).await;
    let peak = process.peak_rss_bytes();
    let now = process.rss_bytes();
    println!(
        "before {} KiB, peak {} KiB, now {} KiB, per reader {} KiB, taken per reader {} KiB",
        before / 1024,
        peak / 1024,
        now / 1024,
        (peak - before) / n / 1024,
        taken / n / 1024
    );
}

#[tokio::test]
async fn measure_stalled_h2_streams() {
    let meter = Arc::new(StreamMeter::default());
    let backend = Backend::start({
        let meter = meter.clone();
        move |_request| {
            let meter = meter.clone();
            async move { Response::new(metered_body(100 * MIB, meter)) }
        }
    })
    .await;
    let process = ProxyProcess::start(&one_route("example.com", backend.addr), &[]).await;
    let before = process.rss_bytes();
    let mut readers = Vec::new();
    let n = 20;
    for _ in 0..n {
        let mut sender = h2_connection(process.addr).await;
        let response = sender
            .send_request(request("GET", "example.com", "/").body(empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        readers.push((sender, response));
    }
    let taken = settled(|| meter.taken()).await;
    let peak = process.peak_rss_bytes();
    let now = process.rss_bytes();
    println!(
        "h2: before {} KiB, peak {} KiB, now {} KiB, per reader {} KiB, taken per reader {} KiB",
        before / 1024,
        peak / 1024,
        now / 1024,
        (peak - before) / n / 1024,
        taken / n / 1024
    );
}
