//! Arbitrary bytes as one client connection's requests, to dockhand's
//! HTTP/1.1 wire layer (`dockhand::http1`, in the loop the connection loop
//! will run) and to hyper's HTTP/1 server in process: they must agree on
//! how many requests there are and on each one's method, target, body and
//! trailers, except where the wire layer is deliberately stricter (each
//! rule, with its RFC reason, in the shared harness,
//! `tests/http1_differential/harness.rs`). The wire layer is also fed the
//! input in pieces, which must change nothing.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tokio::runtime::Runtime;

// The cargo test of the same name uses the parts this target doesn't.
#[allow(dead_code)]
#[path = "../../tests/http1_differential/harness.rs"]
mod harness;

static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
});

fuzz_target!(|data: &[u8]| {
    // Arrivals cut where the input says, so the fuzzer explores them too.
    let cuts: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|&(index, &byte)| (usize::from(byte) + index) % 11 == 0)
        .map(|(index, _)| index)
        .take(16)
        .collect();
    if let Err(disagreement) = RUNTIME.block_on(harness::check(data, &cuts)) {
        panic!("{disagreement}");
    }
});
