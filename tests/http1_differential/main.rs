//! The differential test of item 3 of issue 14: the same byte streams to
//! dockhand's HTTP/1.1 wire layer and to hyper's HTTP/1 server, compared
//! request by request (`http1_differential/harness.rs` says how, and lists
//! the rules where the wire layer deliberately differs). A bounded run of
//! generated inputs, the committed corpus
//! (`fuzz/corpus/http1_differential/`, shared with the fuzz target of the
//! same name), and every valid input cut at every offset.
//!
//! `HTTP1_DIFFERENTIAL_CASES` changes the number of generated inputs;
//! `HTTP1_DIFFERENTIAL_SAVE=<dir>` writes every input there, in a folder
//! per rule that applied (`agreed` when none did), to grow the corpus.

mod generate;
mod harness;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use harness::{check, wire_layer, Rule};

const DEFAULT_CASES: usize = 3000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/http1_differential")
}

/// Generated inputs (a fixed seed, so a failure reproduces), each compared.
#[test]
fn generated_streams_are_framed_as_hyper_frames_them() {
    let cases = std::env::var("HTTP1_DIFFERENTIAL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    let save = std::env::var_os("HTTP1_DIFFERENTIAL_SAVE").map(PathBuf::from);
    let mut rng = SmallRng::seed_from_u64(14);
    let runtime = runtime();
    let mut rules: BTreeMap<Rule, usize> = BTreeMap::new();
    let mut requests = 0;
    let mut ours = 0;
    for _ in 0..cases {
        let input = generate::input(&mut rng);
        let cuts = generate::cuts(&mut rng, input.len());
        let verdict = runtime
            .block_on(check(&input, &cuts))
            .unwrap_or_else(|disagreement| panic!("{disagreement}"));
        requests += verdict.hyper.len();
        ours += verdict.ours.exchanges.len();
        let kind = match verdict.rule {
            Some(rule) => {
                *rules.entry(rule).or_default() += 1;
                format!("{rule:?}")
            }
            None => "agreed".to_string(),
        };
        if let Some(dir) = &save {
            save_input(&dir.join(kind), &input);
        }
    }
    println!(
        "{cases} inputs, {requests} requests hyper took, {ours} the wire layer; \
         rules applied: {rules:?}"
    );
    // The generator reaches the framing rules it is meant to exercise; a
    // change that stops it doing so would make this test weaker unseen.
    for rule in [
        Rule::LengthWithTransferEncoding,
        Rule::ChunkedTwice,
        Rule::ChunkLineTooLong,
    ] {
        assert!(
            rules.contains_key(&rule),
            "{rule:?} never applied: {rules:?}"
        );
    }
    assert!(requests > cases, "{requests} requests in {cases} inputs");
}

/// The interesting inputs found so far, kept (and fuzzed from).
#[test]
fn the_corpus_is_framed_as_hyper_frames_it() {
    let runtime = runtime();
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .expect("the committed corpus")
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "{} corpus files", files.len());
    for file in files {
        let input = std::fs::read(&file).expect("a corpus file");
        let cuts: Vec<usize> = (1..input.len()).step_by(7).collect();
        if let Err(disagreement) = runtime.block_on(check(&input, &cuts)) {
            panic!("{}: {disagreement}", file.display());
        }
    }
}

/// Incremental parsing: every valid input gives the same answer however
/// it is cut into arrivals (here: in two, at every offset).
#[test]
fn the_wire_layer_answers_the_same_however_the_input_arrives() {
    let mut rng = SmallRng::seed_from_u64(9112);
    let mut checked = 0;
    while checked < 40 {
        let input = generate::input(&mut rng);
        let whole = wire_layer(&input, &[]);
        // Quadratic in the length: the long inputs (4 KiB chunk lines) are
        // left to the random cuts of the other tests.
        if whole.exchanges.is_empty() || input.len() > 512 {
            continue;
        }
        for cut in 0..input.len() {
            assert_eq!(
                wire_layer(&input, &[cut]),
                whole,
                "cut at {cut}: b\"{}\"",
                input.escape_ascii()
            );
        }
        let every_byte: Vec<usize> = (0..input.len()).collect();
        assert_eq!(wire_layer(&input, &every_byte), whole);
        checked += 1;
    }
}

/// Every deliberate difference is written down with its reason.
#[test]
fn every_rule_states_its_rfc_reason() {
    for rule in Rule::ALL {
        assert!(rule.reason().contains("RFC"), "{rule:?}");
    }
}

fn save_input(dir: &Path, input: &[u8]) {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    input.hash(&mut hasher);
    std::fs::create_dir_all(dir).expect("the save directory");
    std::fs::write(dir.join(format!("{:016x}", hasher.finish())), input).expect("a saved input");
}

/// Counts the allocations of the thread it runs on, so a test can show
/// that the wire layer's common path makes none.
mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    thread_local! {
        static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            ALLOCATIONS.with(|count| count.set(count.get() + 1));
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    /// The allocations `work` made on this thread.
    pub fn allocations(work: impl FnOnce()) -> usize {
        let before = ALLOCATIONS.with(Cell::get);
        work();
        ALLOCATIONS.with(Cell::get) - before
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// Issue 14 item 1: no per-request allocation on the common path. A head
/// parsed, framed and written back, and a chunked body without trailers
/// decoded, allocate nothing.
#[test]
fn the_common_path_allocates_nothing() {
    use dockhand::http1::{
        head_writer, parse_request_head, request_facts, request_framing, ChunkedDecoder, Decimal,
        FieldSlots, RequestFraming,
    };
    let input = b"POST /upload?x=1 HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\
                  User-Agent: test\r\nConnection: keep-alive\r\n\r\n5;x=y\r\nhello\r\n0\r\n\r\n";
    let mut written = Vec::with_capacity(1024);
    let mut body = [0u8; 16];
    let allocations = counting::allocations(|| {
        let mut slots = FieldSlots::new();
        let head = parse_request_head(input, &mut slots).unwrap().unwrap();
        assert_eq!(request_framing(&head), Ok(RequestFraming::Chunked));
        assert!(request_facts(&head).persistent);
        let length = Decimal::new(5);
        head_writer::request_line(&mut written, head.method, head.target, head.version).unwrap();
        for field in head.fields.iter() {
            head_writer::field(&mut written, field.name, field.value);
        }
        head_writer::field(&mut written, b"content-length", length.as_bytes());
        head_writer::end(&mut written);
        let mut decoder = ChunkedDecoder::new();
        let mut rest = &input[head.bytes.len()..];
        let mut filled = 0;
        while !decoder.is_done() {
            let progress = decoder.decode(rest).unwrap();
            let data = &rest[progress.data];
            body[filled..filled + data.len()].copy_from_slice(data);
            filled += data.len();
            rest = &rest[progress.consumed..];
        }
        assert_eq!(&body[..filled], b"hello");
    });
    assert_eq!(allocations, 0);
    assert!(written.starts_with(b"POST /upload?x=1 HTTP/1.1\r\nHost: a.example\r\n"));
    // The counter counts: a Vec of its own is one allocation.
    let one = counting::allocations(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(8))));
    assert_eq!(one, 1);
}
