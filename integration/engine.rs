//! The suite's throwaway engine itself: it restarts under running containers,
//! which keep serving (what the daemon-restart scenario stands on).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::*;

#[test]
fn containers_keep_serving_while_the_engine_restarts() {
    let run = TestRun::exclusive("engine-restart");
    let network = run.network("net");
    let backend = run.backend("app").network(&network).run();
    let addr = backend.addr(&network, BACKEND_PORT);
    wait_until_ok("the backend to answer", || http_get(addr, "x", "/"));

    let done = Arc::new(AtomicBool::new(false));
    let (answered, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (done, answered, failed) = (done.clone(), answered.clone(), failed.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                match http_get(addr, "x", "/") {
                    Ok(response) if response.status == 200 => {
                        answered.fetch_add(1, Ordering::SeqCst)
                    }
                    _ => failed.fetch_add(1, Ordering::SeqCst),
                };
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let started = std::time::Instant::now();
    let restarted = run.restart_engine();
    let took = started.elapsed();
    done.store(true, Ordering::SeqCst);
    load.join().unwrap();
    if let Err(error) = &restarted {
        if error.contains("not one this script started") {
            eprintln!("not run: the engine is not the suite's own ({error})");
            return;
        }
    }
    restarted.unwrap();
    eprintln!(
        "engine restart took {took:?}: {} requests answered, {} failed meanwhile",
        answered.load(Ordering::SeqCst),
        failed.load(Ordering::SeqCst)
    );

    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "requests failed during the restart"
    );
    assert!(answered.load(Ordering::SeqCst) > 0);
    assert_eq!(backend.state(), "running");
    let after = run.backend("after").network(&network).run();
    let addr = after.addr(&network, BACKEND_PORT);
    let response = wait_until_ok("a container started after the restart", || {
        http_get(addr, "x", "/")
    });
    assert_eq!(response.json()["hostname"], after.name.as_str());
}
