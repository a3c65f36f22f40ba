//! Leaks: a labelled container recreated again and again while dockhand runs
//! on the host, each new container routed before the old one is removed.
//! dockhand's resident memory, threads and open descriptors (read from
//! `/proc/<pid>`) come back, after the cycles, to the level they had after a
//! warm-up, within the bounds stated below: a pool, connection, task's
//! thread or descriptor kept per removed container would exceed them.
//!
//! `DOCKHAND_LEAK_CYCLES` sets the number of cycles (CI runs
//! [`CI_CYCLES`]; `integration/leaks.sh` runs 1,000).

use std::time::{Duration, Instant};

use crate::support::*;

/// Cycles before the reference level is taken: pools, caches and the
/// allocator reach their working size.
const WARM_UP_CYCLES: usize = 10;
/// What CI runs: about two minutes on a vfs-backed engine.
const CI_CYCLES: usize = 60;
/// Above the warm-up level: descriptors (the test's own connections being
/// closed, another test's containers watched meanwhile).
const FD_MARGIN: u64 = 16;
/// Above the warm-up level: threads (tokio's blocking threads, idle for up
/// to 10 s before they end).
const THREAD_MARGIN: u64 = 8;
/// Above the warm-up level: resident memory (allocator noise, not growth
/// per cycle: 1,000 cycles leaking 16 KiB each would exceed it).
const RSS_MARGIN_KIB: u64 = 16 * 1024;

/// A process's resident memory, threads and open descriptors.
#[derive(Debug, Clone, Copy)]
struct Levels {
    rss_kib: u64,
    threads: u64,
    fds: u64,
}

impl Levels {
    fn of(pid: u32) -> Levels {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap_or_else(|e| panic!("/proc/{pid}/fd: {e}"))
            .count() as u64;
        Levels {
            rss_kib: field("VmRSS:"),
            threads: field("Threads:"),
            fds,
        }
    }

    /// Whether `self` is within the margins above `reference`.
    fn within(&self, reference: Levels) -> Result<(), String> {
        let over = self.rss_kib > reference.rss_kib + RSS_MARGIN_KIB
            || self.threads > reference.threads + THREAD_MARGIN
            || self.fds > reference.fds + FD_MARGIN;
        if over {
            Err(format!(
                "{self:?}, above {reference:?} by more than the margins"
            ))
        } else {
            Ok(())
        }
    }
}

impl std::fmt::Display for Levels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} KiB, {} threads, {} fds",
            self.rss_kib, self.threads, self.fds
        )
    }
}

fn cycles() -> usize {
    match std::env::var("DOCKHAND_LEAK_CYCLES") {
        Ok(count) => count
            .parse()
            .unwrap_or_else(|_| panic!("DOCKHAND_LEAK_CYCLES={count:?} is not a count")),
        Err(_) => CI_CYCLES,
    }
}

#[test]
fn recreate_cycles_leave_memory_threads_and_descriptors_at_their_level() {
    let run = TestRun::new("leaks");
    let network = run.network("net");
    let host = run.host("web");
    let dockhand = DockhandOnHost::start(&[]);
    let pid = dockhand.pid();
    let at_start = Levels::of(pid);

    // One cycle: the next container runs and answers through dockhand, then
    // the previous one is removed (`docker rm -f`).
    let mut generation = 0;
    let mut cycle = |previous: Option<Container>| -> Container {
        generation += 1;
        let next = run
            .backend(&format!("web{generation}"))
            .label("dockhand.host", &host)
            .network(&network)
            .run();
        wait_until("the new container answers through dockhand", || {
            http_get(dockhand.addr, &host, "/")
                .ok()
                .filter(|r| r.status == 200 && r.json()["hostname"] == next.name.as_str())
        });
        if let Some(previous) = previous {
            previous.remove();
        }
        next
    };
    let mut current = cycle(None);
    for _ in 1..WARM_UP_CYCLES {
        current = cycle(Some(current));
    }
    let after_warm_up = Levels::of(pid);

    let count = cycles();
    let started = Instant::now();
    for _ in 0..count {
        current = cycle(Some(current));
    }
    let took = started.elapsed();
    // Once the last removal has been followed (its connections closed,
    // blocking threads idled out), the levels are back within the margins.
    let at_end = wait_until_within(
        Duration::from_secs(20),
        "the levels to come back within the margins",
        || {
            let now = Levels::of(pid);
            now.within(after_warm_up).map(|()| now)
        },
    );
    record_figure(&format!(
        "{count} recreate cycles in {took:?} ({:?} each): at start {at_start}; \
         after {WARM_UP_CYCLES} warm-up cycles {after_warm_up}; at the end {at_end}",
        took / count.max(1) as u32
    ));
    assert_eq!(
        http_get(dockhand.addr, &host, "/").unwrap().json()["hostname"],
        current.name.as_str()
    );
}
