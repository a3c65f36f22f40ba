//! Heap allocations per request on dockhand's own HTTP/1.1 path, counted
//! by a global allocator that counts only on the thread dockhand runs on
//! (one worker serves on its caller's runtime, so that thread does all of
//! a request's work). A client on another thread sends keep-alive requests
//! one after another to a backend on a third; the count over many requests,
//! divided by their number, is each request's share.
//!
//! A request allocates nothing on this path; what the count finds is
//! background work on the thread (the routes file's poll, about two
//! allocations a second), spread over the requests, which is why the count
//! is an average over many and its bound is not zero.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use dockhand::settings::Settings;
use dockhand::Listeners;

/// Allocations made on dockhand's thread since the test began counting.
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread is dockhand's.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

struct CountingAllocator;

impl CountingAllocator {
    fn note(&self) {
        if COUNTED.try_with(Cell::get).unwrap_or(false) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

// SAFETY: every call is passed to the system allocator unchanged; counting
// touches only an atomic and a thread-local `Cell` without a destructor.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.note();
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        self.note();
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        self.note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations per request on the path of a plain GET through a location
/// without middlewares: none. The request's future and its access record
/// are boxed in memory the thread keeps (`KeptBox`), the small copies a
/// request makes are cut from two buffers the thread takes back in turn
/// (`http1::arena`), custom header names are ones the thread has met
/// (`http1::header_names`), and the names `Connection` lists are removed
/// as the text they are. The bound is room for background work spread over
/// the requests (a few thousandths per request, measured), and is passed
/// by one allocation in ten requests.
const MOST_PER_REQUEST: f64 = 0.1;

/// What a browser sends, in short: its `Connection: keep-alive`, and a
/// custom field.
const REQUEST: &[u8] =
    b"GET / HTTP/1.1\r\nHost: t.test\r\nUser-Agent: allocations\r\nSec-Fetch-Mode: navigate\r\nConnection: keep-alive\r\n\r\n";

const WARM_UP: u32 = 500;
const MEASURED: u32 = 5_000;

/// What an upstream behind nginx answers: its `Connection: keep-alive`, and
/// a custom field.
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nX-Served-By: backend\r\n\r\nok";

#[test]
fn a_keep_alive_get_allocates_nothing() {
    let backend = backend();
    let (addr, _dockhand) = dockhand(backend);
    let mut client = Client::connect(addr);
    for _ in 0..WARM_UP {
        client.get();
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..MEASURED {
        client.get();
    }
    let made = ALLOCATIONS.load(Ordering::Relaxed) - before;
    let per_request = made as f64 / f64::from(MEASURED);
    println!("allocations per request on the own HTTP/1.1 path: {per_request:.3}");
    assert!(
        per_request <= MOST_PER_REQUEST,
        "{per_request:.3} allocations per request, more than {MOST_PER_REQUEST}"
    );
}

/// A backend that answers every request head with `ANSWER`, on its own
/// thread (not counted).
fn backend() -> SocketAddr {
    let listener = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || answer_each_head(stream));
        }
    });
    addr
}

fn answer_each_head(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            // The end of a head (the requests have no body).
            Ok(_) if line == "\r\n" => {
                if writer.write_all(ANSWER).is_err() {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
}

/// dockhand with one worker on a thread of its own, whose allocations are
/// counted, routing `t.test` to `backend`; its address, and what stops it.
fn dockhand(backend: SocketAddr) -> (SocketAddr, mpsc::Sender<()>) {
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.json");
    let file = serde_json::json!({"host": {"t.test": {"location": {"/": {
        "upstream": {backend.to_string(): {}}
    }}}}});
    std::fs::write(&routes, file.to_string()).unwrap();
    let (ready, is_ready) = mpsc::channel();
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let _dir = dir;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ready.send(http.local_addr().unwrap()).unwrap();
            let settings = Settings {
                routes_file: Some(routes),
                docker: None,
                workers: std::num::NonZeroUsize::MIN,
                ..Settings::default()
            };
            let listeners = Listeners {
                http,
                https: None,
                admin: None,
            };
            COUNTED.with(|counted| counted.set(true));
            let shutdown = async move {
                let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
            };
            dockhand::run(listeners, settings, shutdown).await.unwrap();
        });
    });
    let addr = is_ready.recv_timeout(Duration::from_secs(10)).unwrap();
    (addr, stop)
}

/// One keep-alive connection to dockhand.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    /// Connects, waiting until dockhand has read its routes (a `200`).
    fn connect(addr: SocketAddr) -> Client {
        for _ in 0..200 {
            let stream = TcpStream::connect(addr).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut client = Client {
                reader: BufReader::new(stream.try_clone().unwrap()),
                writer: stream,
            };
            if client.try_get() == Some(200) {
                return client;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("dockhand never answered t.test with 200");
    }

    fn get(&mut self) {
        assert_eq!(self.try_get(), Some(200));
    }

    /// One GET; the status, if an answer came whole.
    fn try_get(&mut self) -> Option<u16> {
        self.writer.write_all(REQUEST).ok()?;
        let mut line = String::new();
        self.reader.read_line(&mut line).ok()?;
        let status = line.split(' ').nth(1)?.parse().ok()?;
        let mut length = 0;
        loop {
            line.clear();
            self.reader.read_line(&mut line).ok()?;
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().ok()?;
                }
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).ok()?;
        Some(status)
    }
}
