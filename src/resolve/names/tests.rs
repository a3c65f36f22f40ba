//! The worker fed by a scripted DNS, on tokio's paused clock: the refresh
//! schedule, on-demand lookups and their rate limits, single flight, the
//! lookup time bound, watched-set changes and what gets published.

use std::io;

use super::*;
use crate::resolve::{IpAnswer, SrvAnswer};

/// A DNS in memory: scripted answers and delays per name, and a record of
/// every lookup.
#[derive(Default)]
struct FakeDns {
    state: Mutex<FakeState>,
}

#[derive(Default)]
struct FakeState {
    answers: HashMap<String, Result<Vec<IpAddr>, LookupError>>,
    delays: HashMap<String, Duration>,
    starts: HashMap<String, Vec<Instant>>,
    in_flight: HashMap<String, usize>,
    most_in_flight: HashMap<String, usize>,
}

impl FakeDns {
    fn answer(&self, name: &str, addresses: &[&str]) {
        let addresses = addresses.iter().map(|a| a.parse().unwrap()).collect();
        self.script(name, Ok(addresses));
    }

    fn script(&self, name: &str, answer: Result<Vec<IpAddr>, LookupError>) {
        self.state
            .lock()
            .unwrap()
            .answers
            .insert(name.into(), answer);
    }

    fn delay(&self, name: &str, delay: Duration) {
        self.state.lock().unwrap().delays.insert(name.into(), delay);
    }

    fn calls(&self, name: &str) -> usize {
        self.starts(name).len()
    }

    fn starts(&self, name: &str) -> Vec<Instant> {
        let state = self.state.lock().unwrap();
        state.starts.get(name).cloned().unwrap_or_default()
    }

    fn most_in_flight(&self, name: &str) -> usize {
        let state = self.state.lock().unwrap();
        state.most_in_flight.get(name).copied().unwrap_or(0)
    }
}

/// Counts a lookup out when it ends or is dropped by the time bound.
struct InFlight<'a>(&'a FakeDns, &'a str);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap();
        *state.in_flight.get_mut(self.1).unwrap() -= 1;
    }
}

impl Dns for FakeDns {
    fn lookup_ip<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<IpAnswer, LookupError>> {
        async move {
            let (answer, delay) = {
                let mut state = self.state.lock().unwrap();
                state
                    .starts
                    .entry(name.into())
                    .or_default()
                    .push(Instant::now());
                let in_flight = state.in_flight.entry(name.into()).or_default();
                *in_flight += 1;
                let in_flight = *in_flight;
                let most = state.most_in_flight.entry(name.into()).or_default();
                *most = (*most).max(in_flight);
                let answer = state.answers.get(name).cloned();
                let delay = state.delays.get(name).copied().unwrap_or_default();
                (answer.unwrap_or(Err(LookupError::NotFound)), delay)
            };
            let _in_flight = InFlight(self, name);
            tokio::time::sleep(delay).await;
            // Docker's DNS answers with 10 minutes; the worker must not wait for it.
            answer.map(|addresses| IpAnswer {
                addresses,
                ttl: Duration::from_secs(600),
            })
        }
        .boxed()
    }

    fn lookup_srv<'a>(&'a self, _owner: &'a str) -> BoxFuture<'a, Result<SrvAnswer, LookupError>> {
        async { Err(LookupError::NotFound) }.boxed()
    }
}

#[derive(Default)]
struct RecordingSink {
    published: Mutex<Vec<ResolvedNames>>,
}

impl AddressSink for RecordingSink {
    fn addresses_changed(&self, resolved: ResolvedNames) {
        self.published.lock().unwrap().push(resolved);
    }
}

impl RecordingSink {
    fn count(&self) -> usize {
        self.published.lock().unwrap().len()
    }

    fn last(&self) -> ResolvedNames {
        let published = self.published.lock().unwrap();
        published.last().cloned().unwrap_or_default()
    }

    /// `name`'s addresses in the last state published, as text.
    fn addresses(&self, name: &str) -> Option<Vec<String>> {
        let last = self.last();
        let addresses = last.get(name)?;
        Some(addresses.iter().map(ToString::to_string).collect())
    }
}

struct Running {
    dns: Arc<FakeDns>,
    sink: Arc<RecordingSink>,
    watched: watch::Sender<Arc<BTreeSet<String>>>,
    /// What the router bumps when containers moved.
    moves: watch::Sender<u64>,
    resolver: NameResolver,
    started: Instant,
}

impl Running {
    /// What the router does when a provider's containers moved.
    fn containers_moved(&self) {
        self.moves.send_modify(|moves| *moves += 1);
    }

    /// Starts the worker watching `names`, with answers already scripted in `dns`.
    fn start(dns: FakeDns, names: &[&str]) -> Running {
        let dns = Arc::new(dns);
        let sink = Arc::new(RecordingSink::default());
        let (watched, receiver) = watch::channel(name_set(names));
        let (moves, moved) = watch::channel(0);
        let resolver = NameResolver::spawn(dns.clone(), receiver, moved, sink.clone());
        Running {
            dns,
            sink,
            watched,
            moves,
            resolver,
            started: Instant::now(),
        }
    }

    /// Lets simulated time run until `millis` after the start. Checks are made
    /// between the worker's own instants (ticks at whole multiples of 5 s,
    /// rate limits at multiples of 100 ms), never on them.
    async fn at(&self, millis: u64) {
        tokio::time::sleep_until(self.started + Duration::from_millis(millis)).await;
    }

    fn watch(&self, names: &[&str]) {
        self.watched.send_replace(name_set(names));
    }
}

fn name_set(names: &[&str]) -> Arc<BTreeSet<String>> {
    Arc::new(names.iter().map(|name| name.to_string()).collect())
}

fn millis_since(start: Instant, instants: &[Instant]) -> Vec<u128> {
    instants.iter().map(|i| (*i - start).as_millis()).collect()
}

#[tokio::test(start_paused = true)]
async fn every_name_is_resolved_at_once_then_every_five_seconds_whatever_the_ttl() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    dns.answer("db", &["10.0.0.6"]);
    let running = Running::start(dns, &["app", "db"]);

    running.at(4_999).await;
    assert_eq!(running.dns.calls("app"), 1);
    running.at(25_001).await;
    let starts = running.dns.starts("app");
    assert_eq!(
        millis_since(running.started, &starts),
        [0, 5_000, 10_000, 15_000, 20_000, 25_000]
    );
    assert_eq!(running.dns.calls("db"), 6);
}

#[tokio::test(start_paused = true)]
async fn a_changed_answer_is_published_at_the_next_refresh() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);
    running.at(1).await;
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.5"]);

    running.dns.answer("app", &["10.0.0.9"]);
    running.at(4_999).await;
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.5"]);
    running.at(5_001).await;
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.9"]);
    assert_eq!(running.sink.count(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_lookup_keeps_the_last_addresses() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5", "10.0.0.6"]);
    dns.script(
        "never-answered",
        Err(LookupError::Failed("SERVFAIL".into())),
    );
    let running = Running::start(dns, &["app", "never-answered"]);
    running.at(1).await;

    running
        .dns
        .script("app", Err(LookupError::Failed("timed out".into())));
    running.at(20_001).await;
    assert_eq!(running.dns.calls("app"), 5);
    assert_eq!(
        running.sink.addresses("app").unwrap(),
        ["10.0.0.5", "10.0.0.6"]
    );
    assert_eq!(running.sink.last().get("never-answered"), None);
    assert_eq!(running.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn not_found_empties_the_addresses_at_once_and_a_later_answer_restores_them() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);
    running.at(2_000).await;

    running.dns.script("app", Err(LookupError::NotFound));
    running.resolver.after_failed_connect("app");
    running.at(2_001).await;
    assert_eq!(running.sink.addresses("app"), Some(vec![]));

    running.dns.answer("app", &["10.0.0.7"]);
    running.at(2_200).await;
    running.resolver.after_no_upstream("app");
    running.at(2_201).await;
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.7"]);
    assert_eq!(running.sink.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn after_failed_connect_resolves_at_once_but_not_twice_within_a_second() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);

    running.at(1_500).await;
    running.resolver.after_failed_connect("app");
    running.at(1_501).await;
    assert_eq!(
        running.dns.calls("app"),
        2,
        "asked for after the limit: at once"
    );

    for millis in [1_600, 2_000, 2_400] {
        running.at(millis).await;
        running.resolver.after_failed_connect("app");
    }
    running.at(2_499).await;
    assert_eq!(
        running.dns.calls("app"),
        2,
        "within a second of the last start"
    );
    running.at(4_999).await;
    let starts = running.dns.starts("app");
    // Requests inside the limit are delayed to its end and coalesced, not lost.
    assert_eq!(millis_since(running.started, &starts), [0, 1_500, 2_500]);
}

#[tokio::test(start_paused = true)]
async fn after_no_upstream_resolves_at_most_every_100_ms() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);

    // A request every 10 ms, from 5 ms to 995 ms.
    for millis in (5..1_000).step_by(10) {
        running.at(millis).await;
        running.resolver.after_no_upstream("app");
    }
    running.at(4_999).await;
    let starts = running.dns.starts("app");
    let expected: Vec<u128> = (0..=1_000).step_by(100).collect();
    assert_eq!(millis_since(running.started, &starts), expected);
}

#[tokio::test(start_paused = true)]
async fn containers_that_moved_have_every_name_resolved_without_a_rate_limit() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    dns.answer("db", &["10.0.0.6"]);
    let running = Running::start(dns, &["app", "db"]);
    running.at(1_000).await;

    running.dns.answer("app", &["10.0.0.7"]);
    running.dns.answer("db", &["10.0.0.8"]);
    running.containers_moved();
    running.at(1_001).await;
    assert_eq!(running.dns.calls("app"), 2);
    assert_eq!(running.dns.calls("db"), 2);
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.7"]);
    assert_eq!(running.sink.addresses("db").unwrap(), ["10.0.0.8"]);
    assert_eq!(
        running.sink.count(),
        2,
        "answers arriving together publish once"
    );

    running.containers_moved();
    running.at(1_002).await;
    assert_eq!(running.dns.calls("app"), 3);
    assert_eq!(running.dns.calls("db"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_name_never_has_two_lookups_in_flight() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    dns.delay("app", Duration::from_millis(3_000));
    let running = Running::start(dns, &["app"]);

    running.at(1_500).await;
    running.resolver.after_failed_connect("app");
    running.resolver.after_no_upstream("app");
    running.containers_moved();
    running.at(2_999).await;
    assert_eq!(running.dns.calls("app"), 1);
    assert_eq!(running.sink.count(), 0);

    // The first lookup ends at 3 s; one lookup follows for the requests made
    // while it ran, and the tick at 5 s finds that one still in flight.
    running.at(8_001).await;
    let starts = running.dns.starts("app");
    assert_eq!(millis_since(running.started, &starts), [0, 3_000]);
    assert_eq!(running.dns.most_in_flight("app"), 1);
    running.at(20_001).await;
    assert_eq!(running.dns.most_in_flight("app"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lookup_without_an_answer_in_five_seconds_counts_as_failed() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);
    running.at(1_000).await;

    running.dns.delay("app", Duration::from_secs(3_600));
    running.containers_moved();
    running.at(5_999).await;
    assert_eq!(running.dns.calls("app"), 2, "the tick at 5 s waits for it");
    running.at(6_001).await;
    running.resolver.after_failed_connect("app");
    running.at(6_002).await;
    assert_eq!(
        running.dns.calls("app"),
        3,
        "given up at 6 s, so a new one starts"
    );
    assert_eq!(running.dns.most_in_flight("app"), 1);
    assert_eq!(running.sink.addresses("app").unwrap(), ["10.0.0.5"]);
    assert_eq!(running.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn added_names_are_resolved_at_once_and_removed_names_are_forgotten() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    dns.answer("db", &["10.0.0.6"]);
    let running = Running::start(dns, &["app"]);
    running.at(1_000).await;
    assert_eq!(running.dns.calls("db"), 0);

    running.watch(&["app", "db"]);
    running.at(1_001).await;
    assert_eq!(running.dns.calls("db"), 1);
    assert_eq!(running.sink.addresses("db").unwrap(), ["10.0.0.6"]);

    running.watch(&["db"]);
    running.at(1_002).await;
    assert_eq!(running.sink.addresses("app"), None);
    assert_eq!(running.sink.count(), 3);
    running.resolver.after_failed_connect("app");
    running.at(10_001).await;
    assert_eq!(
        running.dns.calls("app"),
        1,
        "no lookups for a name not watched"
    );
    assert_eq!(running.dns.calls("db"), 3);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_published_when_nothing_changed() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);
    running.at(1).await;
    assert_eq!(running.sink.count(), 1);

    running.containers_moved();
    running.at(30_001).await;
    assert_eq!(running.dns.calls("app"), 8);
    assert_eq!(running.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn addresses_are_sorted_and_deduplicated_and_order_is_no_change() {
    let dns = FakeDns::default();
    dns.answer("app", &["fd00::1", "10.0.0.9", "10.0.0.5", "10.0.0.9"]);
    let running = Running::start(dns, &["app"]);
    running.at(1).await;
    assert_eq!(
        running.sink.addresses("app").unwrap(),
        ["10.0.0.5", "10.0.0.9", "fd00::1"]
    );

    running
        .dns
        .answer("app", &["10.0.0.9", "fd00::1", "10.0.0.5"]);
    running.at(5_001).await;
    assert_eq!(running.dns.calls("app"), 2);
    assert_eq!(running.sink.count(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_worker_stops_only_when_every_handle_and_the_names_sender_are_dropped() {
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let Running {
        dns,
        watched,
        resolver,
        started,
        ..
    } = Running::start(dns, &["app"]);

    let other = resolver.clone();
    drop(resolver);
    drop(watched);
    tokio::time::sleep_until(started + Duration::from_millis(5_001)).await;
    assert_eq!(dns.calls("app"), 2, "one handle is left");

    drop(other);
    tokio::time::sleep_until(started + Duration::from_millis(5_002)).await;
    assert_eq!(Arc::strong_count(&dns), 1, "the worker let go of its DNS");
}

/// Log lines written while the worker runs on this test's thread.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl CapturedLog {
    fn lines(&self, level: &str) -> usize {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        text.lines().filter(|line| line.contains(level)).count()
    }
}

/// A name resolved, failing (SERVFAIL), gone (NXDOMAIN) and resolved again,
/// each state held over several refreshes: the INFO and WARN lines in `log`
/// after each.
async fn log_lines_through_the_transitions(log: &CapturedLog) -> Vec<(usize, usize)> {
    let counts = || (log.lines("INFO"), log.lines("WARN"));
    let dns = FakeDns::default();
    dns.answer("app", &["10.0.0.5"]);
    let running = Running::start(dns, &["app"]);
    running.at(1).await;
    let mut seen = vec![counts()];
    running
        .dns
        .script("app", Err(LookupError::Failed("SERVFAIL".into())));
    running.at(20_001).await;
    seen.push(counts());
    running.dns.script("app", Err(LookupError::NotFound));
    running.at(40_001).await;
    seen.push(counts());
    running.dns.answer("app", &["10.0.0.6"]);
    running.at(60_001).await;
    seen.push(counts());
    seen
}

#[tokio::test(start_paused = true)]
async fn each_transition_is_logged_once_not_at_every_refresh() {
    const EXPECTED: [(usize, usize); 4] = [(1, 0), (1, 1), (1, 2), (2, 2)];
    // Whether a log callsite is of interest is cached process-wide, and a
    // registration by another test's thread still in progress when this
    // thread's subscriber is set can store a stale "no interest" after the
    // rebuild. Such a run sees fewer lines than were written, so a short
    // run is tried again; a run that logs a transition twice never passes.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let log = CapturedLog::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        seen = log_lines_through_the_transitions(&log).await;
        let fewer = seen
            .iter()
            .zip(EXPECTED)
            .all(|(s, e)| s.0 <= e.0 && s.1 <= e.1);
        if seen == EXPECTED || !fewer {
            break;
        }
    }
    assert_eq!(seen, EXPECTED);
}
