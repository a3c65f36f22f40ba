//! Deploys under a steady, bounded load (a `RequestLoop` of several
//! threads): replicas recreated one after the other, a stopped container's
//! slow requests, `docker-compose up -d` with a new image, and a container
//! that takes over a removed one's address. Nothing is lost in any of them;
//! the counts go to the figures file. (A single replica recreated, held by
//! `--upstream-wait`, is `provider::recreating_the_only_container_loses_no_request`.)

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;

/// Threads sending requests during a deploy.
const WORKERS: usize = 4;

/// Asserts no request failed; records the count and the slowest.
#[track_caller]
fn assert_none_lost(what: &str, outcomes: &[Outcome]) {
    let failed: Vec<_> = outcomes.iter().filter(|o| o.failed()).collect();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    record_figure(&format!(
        "{what}: {} requests, {} failed, slowest {slowest:?}",
        outcomes.len(),
        failed.len()
    ));
    assert!(failed.is_empty(), "{what}: failed requests: {failed:?}");
}

/// The deploy that began at `started` is over: `requests` run on a little,
/// then none of them may have failed.
#[track_caller]
fn deploy_over(requests: RequestLoop, started: Instant, what: &str) {
    let took = started.elapsed();
    requests.wait_for_more(50);
    assert_none_lost(&format!("{what} ({took:?})"), &requests.finish());
}

/// Waits until `count` answers in a row come from `names` only.
#[track_caller]
fn wait_until_served_by<S: AsRef<str> + std::fmt::Debug>(
    dockhand: &DockhandOnHost,
    host: &str,
    names: &[S],
    count: usize,
) {
    wait_until(&format!("{host} served by {names:?} only"), || {
        (0..count)
            .all(|_| {
                let answered = answered_by(&wait_for_200(dockhand.addr, host, "/"));
                names.iter().any(|name| name.as_ref() == answered)
            })
            .then_some(())
    });
}

#[test]
fn two_replicas_recreated_one_after_the_other_lose_no_request() {
    let run = TestRun::new("rolling");
    let network = run.network("net");
    let host = run.host("web");
    let replica = |name: &str| routed_backend(&run, name, &host, &network).run();
    let (old1, old2) = (replica("old1"), replica("old2"));
    let dockhand = DockhandOnHost::start(&[]);
    wait_until_served_by(&dockhand, &host, &[&old1.name, &old2.name], 4);

    let requests = RequestLoop::with_workers(dockhand.addr, &host, "/", WORKERS);
    requests.wait_for_more(50);
    let started = Instant::now();
    // As a rolling deploy does it: stop (SIGTERM), remove, start the new one.
    old1.stop(10);
    old1.remove();
    let new1 = replica("new1");
    wait_until_served_by(&dockhand, &host, &[&new1.name, &old2.name], 4);
    old2.stop(10);
    old2.remove();
    let new2 = replica("new2");
    wait_until_served_by(&dockhand, &host, &[&new1.name, &new2.name], 4);
    deploy_over(requests, started, "two replicas recreated in turn");
}

#[test]
fn a_stopped_containers_slow_requests_complete() {
    let run = TestRun::new("stop-slow");
    let network = run.network("net");
    let host = run.host("web");
    let old = routed_backend(&run, "old", &host, &network).run();
    let dockhand = DockhandOnHost::start(&[]);
    wait_for_200(dockhand.addr, &host, "/");

    // Slow requests, all to the only replica.
    let slow: Vec<_> = (0..6)
        .map(|_| {
            let (addr, host) = (dockhand.addr, host.clone());
            std::thread::spawn(move || {
                let response = http_get(addr, &host, "/delay/3000");
                (response, Instant::now())
            })
        })
        .collect();
    let new = routed_backend(&run, "new", &host, &network).run();
    let requests = RequestLoop::with_workers(dockhand.addr, &host, "/", WORKERS);
    requests.wait_for_more(20);
    let stop_started = Instant::now();
    // Its backend answers what it has in flight before it exits.
    old.stop(30);
    let stopped_in = stop_started.elapsed();
    requests.wait_for_more(20);
    let outcomes = requests.finish();
    for (response, finished) in slow.into_iter().map(|s| s.join().unwrap()) {
        let response = response.expect("a slow request answered");
        assert_eq!(response.status, 200, "{}", response.text());
        assert_eq!(answered_by(&response), old.name);
        assert!(
            finished > stop_started,
            "the slow request was answered before the stop: it proves nothing"
        );
    }
    assert_none_lost(
        &format!("docker stop with 6 slow requests in flight (stopped in {stopped_in:?}, all 6 answered 200)"),
        &outcomes,
    );
    assert!(outcomes.iter().any(|o| o.detail == new.name));
}

#[test]
fn compose_up_with_a_new_image_loses_no_request() {
    let run = TestRun::new("compose-deploy");
    let host = run.host("web");
    // A second version of the backend image, built here (nothing is pulled).
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!("FROM {}\nLABEL dockhand-test.version=2\n", backend_image()),
    )
    .unwrap();
    let new_image = format!("dockhand-testbackend:{}", run.id());
    let built = std::process::Command::new("docker")
        .args(["build", "--quiet", "--tag", &new_image])
        .arg(context.path())
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let _image = ImageGuard(new_image.clone());

    let file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("integration/fixtures/replicas.compose.yaml");
    let old_image = backend_image();
    let mut project = run.compose_up(
        &file,
        &[("WEB_IMAGE", old_image.as_str()), ("HOST", host.as_str())],
    );
    // Compose containers answer with their hostname, their short id.
    let replicas = |project: &ComposeProject| -> Vec<String> {
        let ids = project.container_ids("web");
        ids.iter().map(|id| id[..12].to_owned()).collect()
    };
    let before = replicas(&project);
    assert_eq!(before.len(), 2, "{before:?}");
    let dockhand = DockhandOnHost::start(&[]);
    wait_until_served_by(&dockhand, &host, &before, 4);

    let requests = RequestLoop::with_workers(dockhand.addr, &host, "/", WORKERS);
    requests.wait_for_more(50);
    let started = Instant::now();
    if let Err(error) = project.up_with(&[("WEB_IMAGE", new_image.as_str())]) {
        panic!("{error}");
    }
    let after = replicas(&project);
    assert!(
        after.iter().all(|id| !before.contains(id)),
        "{before:?} -> {after:?}"
    );
    wait_until_served_by(&dockhand, &host, &after, 4);
    deploy_over(
        requests,
        started,
        "docker-compose up -d with a new image, 2 replicas",
    );
}

/// Removes a locally built image on drop.
struct ImageGuard(String);

impl Drop for ImageGuard {
    fn drop(&mut self) {
        let _ = try_docker(["rmi", "-f", &self.0]);
    }
}

/// Rounds of the squatter test: whether dockhand hears of a removal before
/// or after Docker tears the container's network down is a race, and only
/// the second leaves connects retrying towards the old address.
const SQUATTER_ROUNDS: u8 = 4;

/// Issue 11, defect 11: a connect in flight to a container that is being
/// removed is abandoned when the container leaves its location, so it never
/// reaches the container Docker gives the address to next, nor waits for
/// `--connect-timeout`. Each round removes the routed container under load,
/// starts one without the host's labels on its address at once (the
/// squatter), and a routed replacement on the next address.
#[test]
fn a_container_that_takes_over_a_removed_containers_address_gets_no_request() {
    let run = TestRun::new("squatter");
    // A fixed subnet outside Docker's default pools, so the addresses can be
    // chosen: each squatter is given the removed container's.
    let subnet = 10 + std::process::id() % 240;
    let prefix = format!("10.213.{subnet}");
    let network = run.network_with(
        "net",
        &[
            &format!("--subnet={prefix}.0/24"),
            &format!("--ip-range={prefix}.128/25"),
        ],
    );
    let host = run.host("web");
    let at = |last: u8| format!("--ip={prefix}.{last}");
    let routed = |round: u8| {
        routed_backend(&run, &format!("web{round}"), &host, &network)
            .option(&at(10 + round))
            .create()
    };
    let mut current = routed(0);
    current.start();
    let dockhand = DockhandOnHost::start(&["--connect-timeout", "30s", "--upstream-wait", "8s"]);
    wait_for_200(dockhand.addr, &host, "/");

    let requests = RequestLoop::with_workers(dockhand.addr, &host, "/", 16);
    requests.wait_for_more(100);
    let mut squatters = Vec::new();
    for round in 0..SQUATTER_ROUNDS {
        // Created ahead, so `docker start` is all that is left: the squatter
        // listens on the old address as soon as Docker allows.
        let squatter = run
            .backend(&format!("squatter{round}"))
            .network(&network)
            .option(&at(10 + round))
            .create();
        let next = routed(round + 1);
        current.remove();
        squatter.start();
        next.start();
        wait_until_served_by(&dockhand, &host, &[&next.name], 4);
        requests.wait_for_more(100);
        squatters.push(squatter);
        current = next;
    }
    let outcomes = requests.finish();
    let to_squatters = outcomes
        .iter()
        .filter(|o| squatters.iter().any(|s| o.detail == s.name))
        .count();
    assert_none_lost(
        &format!(
            "squatter: {SQUATTER_ROUNDS} times `docker rm -f` with the address taken over at once, \
             {to_squatters} answered by a squatter"
        ),
        &outcomes,
    );
    assert_eq!(
        to_squatters, 0,
        "requests reached a container that took a removed one's address"
    );
    // Far below --connect-timeout (30 s): none waited for it.
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(15),
        "a request took {slowest:?}"
    );
}
