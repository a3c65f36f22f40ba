//! The health-check service: one background task that checks every checked
//! endpoint of the registry every interval, for as long as some route table
//! uses it. Building a table starts nothing; a new checked endpoint wakes
//! the service. What a check's result does is `health`'s.

use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::health::Probe;
use super::registry::EndpointRegistry;

/// Checks every checked endpoint of `registry`
/// every interval, for as long as some route table uses it. One task for
/// all of them; building a table starts nothing.
pub async fn run_checks(registry: Arc<EndpointRegistry>, probe: Probe) {
    let mut running = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        let mut next_due: Option<Instant> = None;
        for state in registry.checked_states() {
            if let Some(address) = state.start_check_if_due(now) {
                let check = probe(address);
                running.push(async move {
                    let reachable = check.await;
                    state.finish_check(reachable);
                });
            } else if let Some(due) = state.next_check() {
                next_due = Some(next_due.map_or(due, |next| next.min(due)));
            }
        }
        tokio::select! {
            Some(()) = running.next(), if !running.is_empty() => {}
            () = sleep_until_some(next_due) => {}
            () = registry.checks_changed() => {}
        }
    }
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use crate::upstream::{Destination, Transport};

    fn scripted_probe(answers: Arc<Mutex<bool>>, calls: Arc<AtomicUsize>) -> Probe {
        Arc::new(move |_| {
            let reachable = *answers.lock().unwrap();
            calls.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move { reachable })
        })
    }

    #[tokio::test(start_paused = true)]
    async fn checks_run_every_interval_and_stop_with_the_state() {
        let reachable = Arc::new(Mutex::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let registry = Arc::new(EndpointRegistry::new());
        let probe = scripted_probe(reachable.clone(), calls.clone());
        tokio::spawn(run_checks(registry.clone(), probe));
        let destination = Destination::Address("10.0.0.1:80".parse().unwrap());
        let transport = Transport::Http1;
        let interval = Some(Duration::from_secs(15));
        let state = registry.state(&destination, &transport, interval, &"a.com/".into());

        tokio::time::sleep(Duration::from_millis(14_900)).await;
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "no check before the interval"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        *reachable.lock().unwrap() = false;
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(state.is_healthy(), "one failed check");
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(!state.is_healthy(), "two failed checks in a row");
        *reachable.lock().unwrap() = true;
        tokio::time::sleep(Duration::from_secs(15)).await;
        assert!(state.is_healthy(), "one good check");
        assert_eq!(calls.load(Ordering::Relaxed), 4);

        drop(state);
        registry.sweep();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(calls.load(Ordering::Relaxed), 4, "no checks once unused");
    }
}
