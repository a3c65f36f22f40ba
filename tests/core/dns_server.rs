//! A real DNS server on loopback for tests: UDP and TCP on 127.0.0.1, port
//! chosen by the OS, answering from records the test sets and changes at any
//! time. It answers A, AAAA and SRV queries (SRV with optional A/AAAA in the
//! additional section), can be told to misbehave per name (NXDOMAIN,
//! SERVFAIL, REFUSED, no reply at all), and counts the queries it received
//! per name and type so tests can assert caching and single flight. It is no
//! resolver: no recursion, no CNAMEs, no zones. It can be taken down (its
//! sockets closed, as when the server process is gone) and brought back on
//! the same address with the records set meanwhile. It stops when dropped.
//!
//! ```ignore
//! let dns = DnsServer::start().await;
//! dns.set_a("app.test", ["127.0.0.1"], 30);
//! dns.set_srv("_app._tcp.test", [srv(10, 1, port, "node.test")], 30);
//! dns.set_additional("_app._tcp.test", [("node.test", "127.0.0.1")]);
//! dns.set_behaviour("down.test", Behaviour::ServFail);
//! let resolver = HickoryDns::with_server(dns.address());
//! assert_eq!(dns.queries("app.test", RecordType::A), 1);
//! ```
//!
//! A name never set gets NXDOMAIN; a name set without records of the type
//! asked for (`set_empty`, or an empty list) gets an empty NOERROR answer.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SRV};
use hickory_proto::rr::{Name, RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

pub use hickory_proto::rr::RecordType;

/// How the server treats queries for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(dead_code)]
pub enum Behaviour {
    /// From the records set (NXDOMAIN for a name never set).
    #[default]
    Answer,
    NxDomain,
    ServFail,
    Refused,
    /// Never answers, so the client times out.
    NoReply,
}

/// One SRV record as a test writes it; `"."` is the "not available" target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srv {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    pub target: String,
}

pub fn srv(priority: u16, weight: u16, port: u16, target: &str) -> Srv {
    Srv {
        priority,
        weight,
        port,
        target: target.to_owned(),
    }
}

pub struct DnsServer {
    zone: Arc<Mutex<Zone>>,
    address: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
    /// While it is down, what keeps its TCP port (see `stop`).
    reserved: Option<socket2::Socket>,
}

#[derive(Default)]
struct Zone {
    /// Names that exist, with or without records.
    names: HashSet<String>,
    records: HashMap<(String, RecordType), (Vec<RData>, u32)>,
    additional: HashMap<String, Vec<(String, IpAddr)>>,
    behaviours: HashMap<String, Behaviour>,
    queries: HashMap<(String, RecordType), usize>,
}

#[allow(dead_code)]
impl DnsServer {
    /// Listens on UDP and TCP, the same port for both.
    pub async fn start() -> DnsServer {
        // A free UDP port may be taken for TCP by another test: try another.
        let (udp, tcp) = loop {
            let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            if let Ok(tcp) = tcp_listener(udp.local_addr().unwrap()) {
                break (udp, tcp);
            }
        };
        let mut server = DnsServer {
            zone: Arc::new(Mutex::new(Zone::default())),
            address: udp.local_addr().unwrap(),
            tasks: Vec::new(),
            reserved: None,
        };
        server.serve(udp, tcp);
        server
    }

    fn serve(&mut self, udp: UdpSocket, tcp: TcpListener) {
        self.tasks = vec![
            tokio::spawn(serve_udp(udp, Arc::clone(&self.zone))),
            tokio::spawn(serve_tcp(tcp, Arc::clone(&self.zone))),
        ];
    }

    /// Down: its sockets and connections are closed, so queries meet a
    /// closed port (records can still be set, for when it comes back). Its
    /// TCP port stays reserved by a socket that is bound but does not
    /// listen (connections to it are refused): otherwise an outgoing
    /// connection of this process, a kept upstream connection of the
    /// proxy under test say, could take it as its local port for as long
    /// as it lives, and the server could not come back.
    pub async fn stop(&mut self) {
        // Reserved before the listener goes, so no other socket can take
        // the port in between (both have SO_REUSEPORT).
        self.reserved =
            Some(port_socket(self.address).expect("the DNS server's TCP port, reserved"));
        for task in self.tasks.drain(..) {
            task.abort();
            // Returns once the task, and the sockets it owns, are dropped.
            let _ = task.await;
        }
    }

    /// Back on the same address, answering from the records set meanwhile.
    /// The TCP listener joins the reserving socket (both `SO_REUSEADDR` and
    /// `SO_REUSEPORT`, that one not listening), which then goes. The UDP port was not
    /// reserved (the kernel takes none for outgoing UDP of its own accord,
    /// but a resolver's query socket may hold it a moment): it is asked for
    /// again until free.
    pub async fn resume(&mut self) {
        assert!(self.tasks.is_empty(), "resume after stop");
        let tcp = tcp_listener(self.address).expect("the DNS server's TCP port again");
        self.reserved = None;
        let started = Instant::now();
        let udp = loop {
            match UdpSocket::bind(self.address).await {
                Ok(udp) => break udp,
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("the DNS server's UDP port {} again: {error}", self.address),
            }
        };
        self.serve(udp, tcp);
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The A records of `name` (replacing any), each with `ttl` seconds.
    pub fn set_a<'a>(&self, name: &str, addresses: impl IntoIterator<Item = &'a str>, ttl: u32) {
        let records = addresses
            .into_iter()
            .map(|a| RData::A(A(a.parse().expect("an IPv4 address"))))
            .collect();
        self.set(name, RecordType::A, records, ttl);
    }

    pub fn set_aaaa<'a>(&self, name: &str, addresses: impl IntoIterator<Item = &'a str>, ttl: u32) {
        let records = addresses
            .into_iter()
            .map(|a| RData::AAAA(AAAA(a.parse().expect("an IPv6 address"))))
            .collect();
        self.set(name, RecordType::AAAA, records, ttl);
    }

    /// The SRV records of `owner` (replacing any), each with `ttl` seconds.
    pub fn set_srv(&self, owner: &str, records: impl IntoIterator<Item = Srv>, ttl: u32) {
        let records = records
            .into_iter()
            .map(|r| RData::SRV(SRV::new(r.priority, r.weight, r.port, fqdn(&r.target))))
            .collect();
        self.set(owner, RecordType::SRV, records, ttl);
    }

    /// Target addresses sent in the additional section of `owner`'s SRV
    /// answers (replacing any), as `(target, address)`.
    pub fn set_additional<'a>(
        &self,
        owner: &str,
        addresses: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        let addresses = addresses
            .into_iter()
            .map(|(target, ip)| (key(target), ip.parse().expect("an IP address")))
            .collect();
        self.zone().additional.insert(key(owner), addresses);
    }

    /// `name` exists without records: every query gets an empty NOERROR.
    pub fn set_empty(&self, name: &str) {
        let mut zone = self.zone();
        let name = key(name);
        zone.records.retain(|(owner, _), _| *owner != name);
        zone.names.insert(name);
    }

    /// `name` no longer exists: NXDOMAIN.
    pub fn remove(&self, name: &str) {
        let mut zone = self.zone();
        let name = key(name);
        zone.records.retain(|(owner, _), _| *owner != name);
        zone.names.remove(&name);
    }

    pub fn set_behaviour(&self, name: &str, behaviour: Behaviour) {
        self.zone().behaviours.insert(key(name), behaviour);
    }

    /// Queries received for `name` and `kind` so far.
    pub fn queries(&self, name: &str, kind: RecordType) -> usize {
        let zone = self.zone();
        zone.queries.get(&(key(name), kind)).copied().unwrap_or(0)
    }

    fn set(&self, name: &str, kind: RecordType, records: Vec<RData>, ttl: u32) {
        let mut zone = self.zone();
        zone.names.insert(key(name));
        zone.records.insert((key(name), kind), (records, ttl));
    }

    fn zone(&self) -> std::sync::MutexGuard<'_, Zone> {
        self.zone.lock().unwrap()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn serve_udp(socket: UdpSocket, zone: Arc<Mutex<Zone>>) {
    let mut buffer = vec![0; 65_535];
    loop {
        let Ok((length, peer)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        if let Some(reply) = reply(&zone, &buffer[..length]) {
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

async fn serve_tcp(listener: TcpListener, zone: Arc<Mutex<Zone>>) {
    // Dropped with this task (a stop), the set aborts the connections.
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((stream, _)) = listener.accept().await {
        connections.spawn(serve_tcp_connection(stream, Arc::clone(&zone)));
        // Ended connections are reaped as new ones come.
        while connections.try_join_next().is_some() {}
    }
}

/// Length-prefixed messages (RFC 1035 4.2.2) until the client closes.
async fn serve_tcp_connection(mut stream: TcpStream, zone: Arc<Mutex<Zone>>) {
    loop {
        let Ok(length) = stream.read_u16().await else {
            return;
        };
        let mut message = vec![0; usize::from(length)];
        if stream.read_exact(&mut message).await.is_err() {
            return;
        }
        if let Some(reply) = reply(&zone, &message) {
            let Ok(length) = u16::try_from(reply.len()) else {
                return;
            };
            if stream.write_u16(length).await.is_err() || stream.write_all(&reply).await.is_err() {
                return;
            }
        }
    }
}

/// The encoded response to one query message; `None` for no reply.
fn reply(zone: &Mutex<Zone>, request: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(request).ok()?;
    let query = request.queries().first()?.clone();
    let name = key(&query.name().to_ascii());
    let kind = query.query_type();

    let mut zone = zone.lock().unwrap();
    *zone.queries.entry((name.clone(), kind)).or_default() += 1;

    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(request.op_code())
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .set_authoritative(true)
        .add_query(query.clone());
    if request.extensions().is_some() {
        let mut edns = Edns::new();
        edns.set_max_payload(4096);
        response.set_edns(edns);
    }
    let behaviour = zone.behaviours.get(&name).copied().unwrap_or_default();
    let code = match behaviour {
        Behaviour::NoReply => return None,
        Behaviour::NxDomain => ResponseCode::NXDomain,
        Behaviour::ServFail => ResponseCode::ServFail,
        Behaviour::Refused => ResponseCode::Refused,
        Behaviour::Answer if !zone.names.contains(&name) => ResponseCode::NXDomain,
        Behaviour::Answer => {
            if let Some((records, ttl)) = zone.records.get(&(name.clone(), kind)) {
                for data in records {
                    response.add_answer(Record::from_rdata(
                        query.name().clone(),
                        *ttl,
                        data.clone(),
                    ));
                }
            }
            if kind == RecordType::SRV {
                for (target, ip) in zone.additional.get(&name).into_iter().flatten() {
                    let data = match ip {
                        IpAddr::V4(ip) => RData::A(A(*ip)),
                        IpAddr::V6(ip) => RData::AAAA(AAAA(*ip)),
                    };
                    response.add_additional(Record::from_rdata(fqdn(target), 30, data));
                }
            }
            ResponseCode::NoError
        }
    };
    response.set_response_code(code);
    response.to_vec().ok()
}

/// Names compare without case and without the trailing dot.
fn key(name: &str) -> String {
    let name = name.to_ascii_lowercase();
    match name.strip_suffix('.') {
        Some(stripped) if !stripped.is_empty() => stripped.to_owned(),
        _ => name,
    }
}

fn fqdn(name: &str) -> Name {
    if name == "." {
        return Name::root();
    }
    let mut name = Name::from_ascii(name).expect("a DNS name");
    name.set_fqdn(true);
    name
}

/// A TCP socket bound to `address` that other such sockets may join:
/// `SO_REUSEADDR` so connections left in TIME_WAIT don't refuse the bind,
/// `SO_REUSEPORT` so the port can be reserved while the listener still
/// holds it.
fn port_socket(address: SocketAddr) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&address.into())?;
    Ok(socket)
}

/// The server's TCP listener on `address`.
fn tcp_listener(address: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = port_socket(address)?;
    socket.listen(128)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}
