//! The Docker provider against a real engine: labelled containers are routed,
//! followed through recreates, scaling, health and network changes, and a
//! daemon restart, with dockhand on the host and in a container.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::core_harness::tls_support::{client_config, https_connection, tls_connect, TestCa};
use crate::support::*;

/// The access-log events dockhand printed for `host`.
fn access_events(log: &str, host: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["target"] == "dockhand::access" && event["host"] == host)
        .collect()
}

#[test]
fn a_labelled_container_is_routed_by_dockhand_on_the_host() {
    let run = TestRun::new("on-host");
    let network = run.network("net");
    let host = run.host("web");
    let web = routed_backend(&run, "web", &host, &network).run();
    let dockhand = DockhandOnHost::start(&[]);
    let response = wait_for_200(dockhand.addr, &host, "/hello?x=1");
    assert_eq!(answered_by(&response), web.name);
    assert_eq!(response.json()["path"], "/hello");
    assert_eq!(response.json()["headers"]["host"], host);
    let upstream = web.addr(&network, BACKEND_PORT).to_string();
    let events = access_events(&dockhand.log(), &host);
    assert!(
        events.iter().any(|e| e["upstream"] == upstream),
        "{events:?}"
    );
}

#[test]
fn dockhand_in_a_container_routes_containers_on_its_network() {
    let run = TestRun::new("in-container");
    let network = run.network("web");
    let host = run.host("app");
    let app = routed_backend(&run, "app", &host, &network).run();
    let dockhand = run.dockhand_in_container("dockhand", &network, &[]);
    let response = wait_for_200(dockhand.addr, &host, "/");
    assert_eq!(answered_by(&response), app.name);
    // It found its own container, and so the network it shares with the app.
    let log = dockhand.log();
    assert!(log.contains("running in a container"), "{log}");
}

#[test]
fn recreating_the_only_container_loses_no_request() {
    let run = TestRun::new("recreate");
    let network = run.network("net");
    let host = run.host("web");
    let start_web = || routed_backend(&run, "web", &host, &network).run();
    let first = start_web();
    let first_ip = first.ip(&network);
    let dockhand = DockhandOnHost::start(&[]);
    wait_for_200(dockhand.addr, &host, "/");

    let requests = RequestLoop::start(dockhand.addr, &host);
    requests.wait_for_more(20);
    first.remove();
    // Docker hands a freed address out again; a filler takes it, so the new
    // container comes back on another address, as after a move.
    let _filler = run.backend("filler").network(&network).run();
    let second = start_web();
    let second_ip = second.ip(&network);
    assert_ne!(
        first_ip, second_ip,
        "the recreated container has a new address"
    );
    wait_until("the new container answers", || {
        http_get(dockhand.addr, &host, "/")
            .ok()
            .filter(|r| r.status == 200 && answered_by(r) == second.name)
    });
    requests.wait_for_more(20);
    let (sent, failures) = requests.stop();
    record_figure(&format!(
        "recreate: {sent} requests across `docker rm -f` + `docker run` ({first_ip} -> {second_ip}), {} failed",
        failures.len()
    ));
    assert!(
        failures.is_empty(),
        "failed requests during the recreate: {failures:?}"
    );
}

#[test]
fn an_upstream_named_by_a_network_alias_follows_its_container_through_a_recreate() {
    let run = TestRun::new("alias");
    let network = run.network("net");
    let host = run.host("api");
    let alias = "api-backend";
    let app = |name: &str| {
        run.backend(name)
            .network(&network)
            .option(&format!("--network-alias={alias}"))
            .create()
    };
    let first = app("app1");
    first.start();
    // The route lives on a container of its own, sending to the alias by name
    // (as a compose service name would be), so recreating the app changes
    // only what the name resolves to.
    let _routes = run
        .backend("routes")
        .network(&network)
        .label("dockhand.host", &host)
        .label("dockhand.upstream", &format!("{alias}:{BACKEND_PORT}"))
        .run();
    let dockhand = run.dockhand_in_container("dockhand", &network, &[]);
    let response = wait_for_200(dockhand.addr, &host, "/");
    assert_eq!(answered_by(&response), first.name);

    let requests = RequestLoop::start(dockhand.addr, &host);
    requests.wait_for_more(20);
    let first_ip = first.ip(&network);
    first.remove();
    // A filler takes the freed address, so the app comes back on another one.
    let _filler = run.backend("filler").network(&network).run();
    let second = app("app2");
    second.start();
    let started = Instant::now();
    wait_until("the recreated app answers through its alias", || {
        http_get(dockhand.addr, &host, "/")
            .ok()
            .filter(|r| r.status == 200 && answered_by(r) == second.name)
    });
    let followed_in = started.elapsed();
    let second_ip = second.ip(&network);
    assert_ne!(first_ip, second_ip);
    requests.wait_for_more(20);
    let (sent, failures) = requests.stop();
    record_figure(&format!(
        "alias recreate: new container start -> first request routed to it {followed_in:?}; \
         {sent} requests across the recreate ({first_ip} -> {second_ip}), {} failed",
        failures.len()
    ));
    assert!(failures.is_empty(), "failed requests: {failures:?}");
}

#[test]
fn time_from_docker_start_to_the_first_200() {
    let run = TestRun::new("start-latency");
    let network = run.network("net");
    let host = run.host("web");
    let dockhand = DockhandOnHost::start(&[]);
    let mut samples = Vec::new();
    for round in 0..20 {
        // A new container each round, created ahead so `docker start` alone is timed.
        let web = run
            .backend(&format!("web{round}"))
            .label("dockhand.host", &host)
            .network(&network)
            .create();
        web.start();
        let started = Instant::now();
        // A request waits up to --upstream-wait for the route, so the first
        // answer from this container is the measure.
        wait_until("the new container answers", || {
            http_get(dockhand.addr, &host, "/")
                .ok()
                .filter(|r| r.status == 200 && answered_by(r) == web.name)
        });
        samples.push(started.elapsed());
        web.remove();
    }
    samples.sort();
    record_figure(&format!(
        "docker start -> first 200 through dockhand: median {:?} (min {:?}, max {:?}, n=20)",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1]
    ));
}

#[test]
fn replicas_share_traffic_and_scaling_is_followed() {
    let run = TestRun::new("replicas");
    let network = run.network("net");
    let host = run.host("web");
    let replica = |n: u32| {
        run.backend(&format!("web{n}"))
            .label("dockhand.host", &host)
            .network(&network)
            .run()
    };
    let mut replicas: Vec<Container> = (1..=3).map(replica).collect();
    let dockhand = DockhandOnHost::start(&[]);
    let names = |replicas: &[Container]| -> std::collections::BTreeSet<String> {
        replicas.iter().map(|c| c.name.clone()).collect()
    };
    let seen_in = |rounds: usize| -> std::collections::BTreeSet<String> {
        (0..rounds)
            .map(|_| answered_by(&wait_for_200(dockhand.addr, &host, "/")))
            .collect()
    };
    wait_until("all three replicas answer", || {
        (seen_in(9) == names(&replicas)).then_some(())
    });

    let third = replicas.pop().unwrap();
    let second = replicas.pop().unwrap();
    third.remove();
    second.remove();
    wait_until("only the first answers", || {
        (seen_in(9) == names(&replicas)).then_some(())
    });

    replicas.push(replica(2));
    replicas.push(replica(3));
    wait_until("three again", || {
        (seen_in(9) == names(&replicas)).then_some(())
    });
}

#[test]
fn networks_are_chosen_as_documented() {
    let run = TestRun::new("networks");
    let front = run.network("front");
    let back = run.network("back");
    let elsewhere = run.network("elsewhere");
    let (two_nets, labelled, isolated) =
        (run.host("two"), run.host("labelled"), run.host("isolated"));
    // A container on front and back is reached through front, dockhand's first choice.
    let both = routed_backend(&run, "both", &two_nets, &back)
        .network(&front)
        .run();
    // The label picks back over that preference.
    let chosen = run
        .backend("chosen")
        .label("dockhand.host", &labelled)
        .label("dockhand.network", back.as_ref())
        .network(&front)
        .network(&back)
        .run();
    let alone = routed_backend(&run, "alone", &isolated, &elsewhere).run();

    // On both networks, front preferred by --network order (by name, back would win).
    let preference = [
        "--upstream-wait",
        "200ms",
        "--network",
        front.as_ref(),
        "--network",
        back.as_ref(),
    ];
    let dockhand =
        run.dockhand_in_container_with("dockhand", &front, &preference, |spec| spec.network(&back));
    wait_for_200(dockhand.addr, &two_nets, "/");
    wait_for_200(dockhand.addr, &labelled, "/");
    let response = wait_until_ok("503 for the isolated container", || {
        let response = dockhand.get(&isolated, "/").map_err(|e| e.to_string())?;
        if response.status == 503 {
            Ok(response)
        } else {
            Err(format!("{}", response.status))
        }
    });
    assert_eq!(
        response.header("x-dockhand-error"),
        Some("no_healthy_upstream")
    );

    let log = dockhand.log();
    // The upstreams requests were sent to; those answered before the
    // routes were loaded (404, no upstream) say nothing of the choice.
    let upstream_of = |host: &str| -> Vec<String> {
        access_events(&log, host)
            .iter()
            .filter_map(|e| e["upstream"].as_str().filter(|u| !u.is_empty()))
            .map(str::to_owned)
            .collect()
    };
    let via_front = both.addr(&front, BACKEND_PORT).to_string();
    assert!(
        log.contains("reachable through several networks"),
        "no warning naming the network taken:\n{log}"
    );
    assert!(
        upstream_of(&two_nets).iter().all(|u| *u == via_front),
        "{:?} vs {via_front}",
        upstream_of(&two_nets)
    );
    let via_back = chosen.addr(&back, BACKEND_PORT).to_string();
    assert!(
        upstream_of(&labelled).iter().all(|u| *u == via_back),
        "{:?} vs {via_back}",
        upstream_of(&labelled)
    );
    assert!(
        log.contains(&format!("container \\\"{}\\\"", alone.name))
            && log.contains("shares no network with dockhand"),
        "no diagnostic for the isolated container:\n{log}"
    );
}

#[test]
fn an_unhealthy_container_gets_no_traffic_until_healthy() {
    let run = TestRun::new("health");
    let network = run.network("net");
    let host = run.host("web");
    let healthy = routed_backend(&run, "healthy", &host, &network).run();
    let slow = run
        .backend("slow")
        .label("dockhand.host", &host)
        .env("UNHEALTHY_FOR_MS", "4000")
        .healthcheck("1s")
        .network(&network)
        .run();
    let dockhand = DockhandOnHost::start(&[]);
    wait_for_200(dockhand.addr, &host, "/");
    // While its check has not passed, only the healthy replica answers.
    while slow.health() != "healthy" {
        let response = wait_for_200(dockhand.addr, &host, "/");
        let answered = answered_by(&response);
        if answered == slow.name {
            assert_eq!(
                slow.health(),
                "healthy",
                "traffic reached a container that was not healthy"
            );
        }
        assert!(answered == healthy.name || answered == slow.name);
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_until("the now healthy container gets traffic", || {
        (answered_by(&wait_for_200(dockhand.addr, &host, "/")) == slow.name).then_some(())
    });
}

#[test]
fn bad_labels_are_diagnosed_and_other_routes_keep_working() {
    let run = TestRun::new("bad-labels");
    let network = run.network("net");
    let (good_host, bad_host) = (run.host("good"), run.host("bad"));
    let good = routed_backend(&run, "good", &good_host, &network).run();
    let dockhand = DockhandOnHost::start(&[]);
    wait_for_200(dockhand.addr, &good_host, "/");
    let bad = run
        .backend("bad")
        .label("dockhand.host", &bad_host)
        .label("dockhand.port", "eighty")
        .label("dockhand.hots", "typo.test")
        .label("dockhnad.path", "/x")
        .network(&network)
        .run();
    let name = bad.name.clone();
    let log = wait_until("the diagnostics", || {
        let log = dockhand.log();
        (log.contains("did you mean `dockhand.host`")
            && log.contains("dockhand.port")
            && log.contains("dockhnad.path"))
        .then_some(log)
    });
    assert!(
        log.contains(&name),
        "diagnostics name the container:\n{log}"
    );
    assert_eq!(
        answered_by(&wait_for_200(dockhand.addr, &good_host, "/")),
        good.name
    );
}

/// Under a steady bounded load, the engine's restart loses no request, and
/// the state converges after it: a container started later is routed, one
/// removed later is dropped (the event stream was taken up again).
#[test]
fn routes_survive_a_docker_daemon_restart() {
    let run = TestRun::exclusive("daemon-restart");
    let network = run.network("net");
    let (host, leaving_host) = (run.host("web"), run.host("leaving"));
    let web = routed_backend(&run, "web", &host, &network).run();
    let leaving = routed_backend(&run, "leaving", &leaving_host, &network).run();
    // A short grace, so the removed container's host is dropped soon.
    let dockhand = DockhandOnHost::start(&["--upstream-wait", "1s"]);
    wait_for_200(dockhand.addr, &host, "/");
    wait_for_200(dockhand.addr, &leaving_host, "/");
    let requests = RequestLoop::start(dockhand.addr, &host);
    requests.wait_for_more(20);
    let started = Instant::now();
    let restarted = run.restart_engine();
    let restart_took = started.elapsed();
    if let Err(reason) = restarted {
        requests.stop();
        // Only an engine the suite started may be restarted.
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{reason}");
        eprintln!("skipped the restart: {reason}");
        return;
    }
    requests.wait_for_more(20);
    let during_restart = requests.sent();

    let later_host = run.host("later");
    let later = routed_backend(&run, "later", &later_host, &network).run();
    assert_answered_by(dockhand.addr, &later_host, &later);
    leaving.remove();
    let dropped = wait_until_ok("the removed container's host to be dropped", || {
        let response = http_get(dockhand.addr, &leaving_host, "/").map_err(|e| e.to_string())?;
        match response.status {
            404 => Ok(response),
            status => Err(format!("{status} {}", response.text())),
        }
    });
    assert_eq!(dropped.header("x-dockhand-error"), Some("no_host"));
    requests.wait_for_more(20);
    let (sent, failures) = requests.stop();
    record_figure(&format!(
        "Docker daemon restart ({restart_took:?}) under load: {during_restart} requests until \
         it answered again, {sent} in all with a container started and one removed after it, \
         {} failed",
        failures.len()
    ));
    assert!(
        failures.is_empty(),
        "{} of {sent} requests failed across the restart: {failures:?}",
        failures.len()
    );
    assert_answered_by(dockhand.addr, &host, &web);
    assert!(
        dockhand.log().contains("lost Docker"),
        "the loss was noticed"
    );
}

/// The provider subscribes to events before it lists the containers, and
/// the engine is asked for them when the stream is first read, after the
/// list: a container started in between (as compose starts its services
/// while dockhand lists) must still come through the stream, or it stays a
/// 503 until the next relist.
#[test]
fn a_container_started_before_the_event_stream_is_read_comes_through_it() {
    use dockhand::provider::docker::{BollardApi, DockerApi, EventAction};
    use dockhand::settings::DockerHost;
    use futures_util::StreamExt;

    let run = TestRun::new("events-replayed");
    let network = run.network("net");
    let socket = docker_socket_path().expect("the engine on a unix socket");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let api = BollardApi::connect(&DockerHost::Unix(socket))
            .await
            .expect("the engine answers");
        let mut events = api.events();
        // `docker start` returns once the container runs.
        let backend = run.backend("late").network(&network).run();
        let seen = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(event) = events.next().await {
                let event = event.expect("the stream stays up");
                if event.container == backend.id && event.action == EventAction::Start {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(
            seen,
            Ok(true),
            "the start of {} before the stream was read came through it",
            backend.name
        );
    });
}

#[test]
fn the_compose_example_answers_through_dockhand() {
    let run = TestRun::new("compose-example");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/compose/compose.yaml");
    let port = free_port().to_string();
    let https_port = free_port();
    let admin_port = free_port().to_string();
    let (dockhand_image, demo_image) = (dockhand_image(), backend_image());
    let socket = docker_socket_path().expect("the engine on a unix socket");
    let socket = socket.to_string_lossy();
    // The certificates folder starts empty; a pair is put in later.
    let certs = tempfile::tempdir().unwrap();
    let project = run.compose_up(
        &file,
        &[
            ("DOCKHAND_IMAGE", dockhand_image.as_str()),
            ("DEMO_IMAGE", demo_image.as_str()),
            ("DOCKHAND_HTTP_PORT", port.as_str()),
            ("DOCKHAND_HTTPS_PORT", &https_port.to_string()),
            ("DOCKHAND_ADMIN_PORT", admin_port.as_str()),
            ("DOCKHAND_CERTS", &certs.path().to_string_lossy()),
            ("DOCKER_SOCKET", &socket),
            ("DEMO_PORT", "8080"),
            // The test backend stands in for oauth2-proxy's /oauth2/auth.
            ("AUTH_IMAGE", demo_image.as_str()),
            ("AUTH_PORT", "8080"),
        ],
    );
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // The two replicas answer the host in turn; /api goes to the other app.
    // (Compose containers answer with their hostname, their short id.)
    let replicas = wait_until("both replicas answer whoami.localhost", || {
        let seen: std::collections::BTreeSet<String> = (0..6)
            .filter_map(|_| http_get(addr, "whoami.localhost", "/").ok())
            .filter(|response| response.status == 200)
            .map(|response| answered_by(&response))
            .collect();
        (seen.len() == 2).then_some(seen)
    });
    let api = wait_for_200(addr, "whoami.localhost", "/api");
    assert!(
        !replicas.contains(&answered_by(&api)),
        "/api answered by a whoami replica"
    );
    assert_eq!(api.json()["path"], "/api");
    let log = project.run(&["logs", "dockhand"]).unwrap_or_default();
    assert!(log.contains("running in a container"), "{log}");

    // The app behind forward auth: the auth service's own 401 until a
    // session cookie, then the app, told the user; the sign-in pages under
    // /oauth2 go to the auth service without being asked of it.
    let short_id = |service: &str| project.container_ids(service).remove(0)[..12].to_owned();
    let refused = wait_until_ok("the app behind forward auth", || {
        match http_get(addr, "private.localhost", "/") {
            Ok(response) if response.status == 401 => Ok(response),
            Ok(response) => Err(format!("{response:?}")),
            Err(error) => Err(error.to_string()),
        }
    });
    assert_eq!(
        refused.text(),
        "Unauthorized\n",
        "the auth service's answer"
    );
    let session = [("cookie", "_oauth2_proxy=demo")];
    let private = http_request(addr, "GET", "private.localhost", "/", &session, b"").unwrap();
    assert_eq!(private.status, 200, "{private:?}");
    assert_eq!(answered_by(&private), short_id("private"));
    assert_eq!(private.json()["headers"]["x-auth-request-user"], "demo");
    let sign_in = http_get(addr, "private.localhost", "/oauth2/sign_in").unwrap();
    assert_eq!(sign_in.status, 200, "{sign_in:?}");
    assert_eq!(answered_by(&sign_in), short_id("auth"));

    // The admin API, on the host's loopback, with the example's token; the
    // healthcheck (`dockhand healthcheck` in a shell-less image) turns healthy.
    let token = std::fs::read_to_string(file.with_file_name("admin-token")).unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{admin_port}").parse().unwrap();
    let hosts = "/api/v1/hosts/whoami.localhost";
    assert_eq!(http_get(admin, "localhost", hosts).unwrap().status, 401);
    let authorization = format!("Bearer {}", token.trim());
    let headers = [("authorization", authorization.as_str())];
    let view = http_request(admin, "GET", "localhost", hosts, &headers, b"")
        .unwrap()
        .json();
    let addresses = view["location"]["/"]["upstream"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|upstream| upstream["addresses"].as_array().unwrap().clone())
        .collect::<Vec<_>>();
    assert_eq!(addresses.len(), 2, "{view}");
    for address in &addresses {
        assert_eq!(address["source"]["kind"], "container", "{view}");
        assert!(address["source"]["name"]
            .as_str()
            .unwrap()
            .contains("whoami"));
    }
    let dockhand = project.container_ids("dockhand").remove(0);
    wait_until("the healthcheck says healthy", || {
        let health = try_docker(["inspect", "-f", "{{.State.Health.Status}}", &dockhand]).ok()?;
        (health.trim() == "healthy").then_some(())
    });

    // A certificate for whoami.localhost put in the certificates folder (as
    // its README says) is picked up while running: HTTPS through the
    // published 443, verified against the test's CA, and plain HTTP for the
    // host is redirected there (308, RFC 9110 §15.4.9).
    let ca = TestCa::new("compose example test CA");
    ca.leaf("whoami.localhost")
        .write_pair(certs.path(), "whoami");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let https_addr: SocketAddr = format!("127.0.0.1:{https_port}").parse().unwrap();
    let reply = wait_until_ok("HTTPS for whoami.localhost", || {
        let config = client_config(ca.roots(), &[b"http/1.1"]);
        runtime.block_on(async {
            let stream = tls_connect(https_addr, "whoami.localhost", Arc::clone(&config))
                .await
                .map_err(|error| error.to_string())?;
            drop(stream);
            Ok::<_, String>(
                https_connection(https_addr, "whoami.localhost", config)
                    .await
                    .get("whoami.localhost", "/api")
                    .await,
            )
        })
    });
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["path"], "/api");
    assert_eq!(body["headers"]["x-forwarded-proto"], "https", "{body}");
    let plain = http_get(addr, "whoami.localhost", "/api?x=1").unwrap();
    assert_eq!(plain.status, 308, "{}", plain.text());
    assert_eq!(
        plain.header("location"),
        Some("https://whoami.localhost/api?x=1")
    );
}

#[test]
fn a_paused_replica_is_out_of_rotation_until_unpaused() {
    let run = TestRun::new("pause");
    let network = run.network("net");
    let host = run.host("web");
    let replica = |name: &str| routed_backend(&run, name, &host, &network).run();
    let (kept, paused) = (replica("kept"), replica("paused"));
    let dockhand = DockhandOnHost::start(&[]);
    let answers = |rounds: usize| -> std::collections::BTreeSet<String> {
        (0..rounds)
            .map(|_| answered_by(&wait_for_200(dockhand.addr, &host, "/")))
            .collect()
    };
    wait_until("both replicas answer", || {
        (answers(6).len() == 2).then_some(())
    });
    paused.pause();
    wait_until("only the running replica answers", || {
        (answers(6) == std::collections::BTreeSet::from([kept.name.clone()])).then_some(())
    });
    paused.unpause();
    wait_until("both again", || (answers(6).len() == 2).then_some(()));
}

#[test]
fn a_host_network_container_is_reached_on_loopback_from_the_host() {
    let run = TestRun::new("host-network");
    let host = run.host("local");
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    // Not `backend()`: Docker refuses a hostname with the host network.
    let _local = run
        .container("local", &backend_image())
        .options(&["--network=host", "--no-healthcheck"])
        .env("LISTEN", &listen)
        .label("dockhand.host", &host)
        .label("dockhand.port", &port)
        .run();
    let dockhand = DockhandOnHost::start(&[]);
    let response = wait_for_200(dockhand.addr, &host, "/");
    assert_eq!(response.json()["path"], "/");
    let events = access_events(&dockhand.log(), &host);
    assert!(
        events.iter().any(|e| e["upstream"] == listen.as_str()),
        "{events:?}"
    );
}
