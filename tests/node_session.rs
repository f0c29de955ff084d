//! Sessions across machines, on one machine: nodes are `discovm-node` processes joining over
//! loopback TCP, each with worker processes running the tests' worker program. Calls, order,
//! errors as values and values on remote workers; the handshake (a wrong secret, garbage from a
//! stranger, a rank taken); and the faults: a node killed or stopped during a call or a
//! collective, a worker of a node killed during a collective, a controller that goes away.

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/errors.rs"]
mod errors;
#[path = "support/gloo.rs"]
mod gloo;
#[path = "../src/device/nccl/stub.rs"]
mod nccl_stub;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
#[path = "support/worker_processes.rs"]
mod worker_processes;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use discovm::net::auth::{self, Secret, Welcome};
use discovm::object::Shape;
use discovm::session::{Session, SessionOptions, Target};
use discovm::{Any, ErrorKind};
use errors::assert_error;
use ports::free_port;
use session_calls::{call, int};
use worker_processes::{Stopped, exists, stop};
use worker_programs::{node_program, test_worker_program};

const TOKEN: &str = "the tests' secret";

/// A port nothing listens on now.
/// Starts `discovm-node 127.0.0.1 PORT WORKERS` with `token` and the extra arguments `more`.
fn node(port: u16, workers: u32, token: &str, more: &[&str]) -> Child {
    node_with(port, workers, token, more, &[])
}

/// [`node`] with the extra environment variables `env`.
fn node_with(port: u16, workers: u32, token: &str, more: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(node_program())
        .args(["127.0.0.1", &port.to_string(), &workers.to_string()])
        .args(more)
        .env("DISCOVM_SESSION_TOKEN", token)
        .env("DISCOVM_WORKER", test_worker_program())
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the node program starts")
}

fn options(timeout_ms: u64) -> SessionOptions {
    SessionOptions {
        timeout: Some(Duration::from_millis(timeout_ms)),
        worker_program: Some(test_worker_program().to_str().unwrap().to_string()),
        session_token: Some(TOKEN.to_string()),
        ..SessionOptions::default()
    }
}

/// A session of `nodes` nodes of `per_node` workers: node 0 here, the others `discovm-node`
/// processes, returned with it.
fn session_of(nodes: usize, per_node: u32, options: SessionOptions) -> (Arc<Session>, Vec<Child>) {
    let port = free_port("127.0.0.1");
    let children: Vec<Child> = (1..nodes)
        .map(|_| node(port, per_node, TOKEN, &[]))
        .collect();
    let s = Session::new_socket(
        nodes as i64,
        per_node.into(),
        1,
        "127.0.0.1",
        port.into(),
        options,
    )
    .expect("the session forms");
    (s, children)
}

/// Waits for a node program to end; its exit status and what it said on stderr.
fn ended(mut child: Child, within: Duration) -> (Option<i32>, String) {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut said = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut said)
                .unwrap();
            return (status.code(), said);
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("node {} did not end within {within:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A controller of our own on a fresh port: starts a node of `workers` workers, lets it join
/// (rank 1 of 2, heartbeat `heartbeat_ms`) and returns it with the connection.
fn fake_controller(workers: u32, heartbeat_ms: u64) -> (Child, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let node = node(port, workers, TOKEN, &[]);
    let (mut stream, _) = listener.accept().unwrap();
    let (_, answer) = auth::authenticate(&mut stream, &Secret::new(TOKEN.as_bytes())).unwrap();
    let welcome = Welcome {
        rank: 1,
        num_nodes: 2,
        workers_per_node: workers,
        num_groups: 1,
        device_type: discovm::abi::KDL_CPU,
        timeout_ms: 0,
        heartbeat_ms,
        setup: auth::WorkerSetup::default(),
    };
    answer.welcome(&mut stream, &welcome).unwrap();
    (node, stream)
}

/// Connects to the controller at `port`, retrying for 10 s while it does not listen yet.
fn connect_retrying(port: u16) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => return stream,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{e}"),
        }
    }
}

/// A connection that joined as a node of `workers` workers, for a test to play the node.
fn joined_as_a_node(port: u16, workers: u32) -> TcpStream {
    let mut stream = connect_retrying(port);
    let join = auth::Join {
        rank: None,
        workers,
    };
    auth::join(&mut stream, &Secret::new(TOKEN.as_bytes()), join).unwrap();
    stream
}

/// The next frame the controller sends a node played by a test (heartbeats and uploads
/// skipped).
fn next_frame(stream: &mut TcpStream) -> discovm::wire::Frame {
    next_routed_frame(stream).1
}

/// [`next_frame`], with its route.
fn next_routed_frame(stream: &mut TcpStream) -> (u32, discovm::wire::Frame) {
    let limits = discovm::wire::Limits::default();
    loop {
        let message = discovm::net::routed::read(stream, &limits, Vec::new()).unwrap();
        if message.what == discovm::net::routed::What::Frame {
            let frame = discovm::wire::Frame::decode(&message.frame, &limits).unwrap();
            return (message.route, frame);
        }
    }
}

/// A node played by a thread, which returns the frames it kept.
type PlayedNode = std::thread::JoinHandle<Vec<(u32, discovm::wire::Frame)>>;

/// Node 1 of `workers` workers, played by a thread: it joins the session listening on `port`,
/// answers every sync and lookup with None on the route it came by, and returns the other
/// frames it got, with their routes, once the session shuts down.
fn play_node(port: u16, workers: u32) -> PlayedNode {
    play_node_held(port, workers, None)
}

/// [`play_node`]; with `hold` `Some((n, go))`, once it has answered `n` requests it reads
/// nothing more until `go` says so.
fn play_node_held(
    port: u16,
    workers: u32,
    mut hold: Option<(usize, mpsc::Receiver<()>)>,
) -> PlayedNode {
    use discovm::net::routed::{self, What};
    use discovm::wire::Frame;
    std::thread::spawn(move || {
        let mut stream = joined_as_a_node(port, workers);
        let mut kept = Vec::new();
        let mut answered = 0;
        loop {
            if let Some((_, go)) = hold.take_if(|(n, _)| *n == answered) {
                go.recv().unwrap();
            }
            let (route, request) = match next_routed_frame(&mut stream) {
                (_, Frame::Shutdown) => return kept,
                (route, Frame::Sync { request } | Frame::GetGlobalFunc { request, .. }) => {
                    (route, request)
                }
                other => {
                    kept.push(other);
                    continue;
                }
            };
            routed::write(&mut stream, route, What::Frame, &none_reply(request)).unwrap();
            stream.flush().unwrap();
            answered += 1;
        }
    })
}

/// A session of two nodes of one worker: node 0's a thread, node 1 played by a thread that
/// answers the session's first sync and one lookup, then reads nothing until told on the
/// sender returned; with `runtime.disco.worker_id` looked up.
fn session_with_a_held_node() -> (
    Arc<Session>,
    discovm::session::DRef,
    mpsc::Sender<()>,
    PlayedNode,
) {
    let port = free_port("127.0.0.1");
    let (go, held) = mpsc::channel();
    let fake = play_node_held(port, 1, Some((2, held)));
    let opts = SessionOptions {
        local_threads: true,
        heartbeat: Some(Duration::from_secs(30)),
        ..options(30_000)
    };
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), opts).unwrap();
    let rank = s.get_global_func("runtime.disco.worker_id").unwrap();
    (s, rank, go, fake)
}

/// The reply `Ok(None)` to request `request`, encoded.
fn none_reply(request: u64) -> Vec<u8> {
    let mut reply = Vec::new();
    discovm::wire::Frame::<Any>::Ok {
        request,
        value: discovm::wire::Value::Plain(Any::None),
    }
    .encode(&mut reply)
    .unwrap();
    reply
}

fn pids_of(s: &Arc<Session>) -> Vec<i64> {
    let pid = s.get_global_func("proc.pid").unwrap();
    let pids = call(s, &pid, &[]);
    (0..s.num_workers())
        .map(|w| int(s.get_register(pids.reg(), w).unwrap()))
        .collect()
}

#[test]
fn workers_on_another_node_run_calls_in_order_with_errors_as_values() {
    let (s, mut nodes) = session_of(2, 2, options(30_000));
    assert_eq!(s.num_workers(), 4);
    let pids = pids_of(&s);
    let mut distinct = pids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        4,
        "each worker a process of its own: {pids:?}"
    );

    let id = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ids = call(&s, &id, &[]);
    let add = s.get_global_func("proc.add").unwrap();
    let mut total = call(&s, &add, &[Any::Int(0), Any::Int(0)]);
    for _ in 0..500 {
        let args = [Any::from(total.clone()), Any::Int(1)];
        let views: Vec<_> = args.iter().map(Any::view).collect();
        total = s.call(Target::All, &add, &views).unwrap();
    }
    for w in 0..4 {
        assert_eq!(int(s.get_register(ids.reg(), w).unwrap()), w as i64);
        assert_eq!(int(s.get_register(total.reg(), w).unwrap()), 500);
    }

    // A failure on a remote worker is a value: its sync reports it, the others go on.
    let fail_on = s.get_global_func("proc.fail_on").unwrap();
    let failed = call(&s, &fail_on, &[Any::Int(3), Any::Int(1)]);
    let err = s.sync_worker(3).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "worker 3");
    s.sync_worker(2).unwrap();
    assert_eq!(int(s.get_register(failed.reg(), 2).unwrap()), 1);

    // Values set on a remote worker come back equal.
    let shape = Any::from(Shape::new(&[2, 3]));
    s.set_register(failed.reg(), 3, shape).unwrap();
    let back = s.get_register(failed.reg(), 3).unwrap();
    assert_eq!(back.view().as_shape().unwrap().as_slice(), &[2, 3]);
    s.set_register(failed.reg(), 2, Any::from("on node 1"))
        .unwrap();
    assert_eq!(
        s.get_register(failed.reg(), 2)
            .unwrap()
            .view()
            .as_str()
            .unwrap(),
        "on node 1"
    );

    // A dropped DRef's register is empty on every worker once the next call ran there.
    let freed = ids.reg();
    drop(ids);
    let after = call(&s, &id, &[]);
    for w in 0..4 {
        let err = s.get_register(freed, w).unwrap_err();
        assert_error(&err, ErrorKind::Worker, &format!("is empty on worker {w}"));
    }

    drop((after, total, failed, id, add, fail_on));
    s.sync_all().unwrap();
    for w in 0..4 {
        assert_eq!(
            s.live_registers(w).unwrap(),
            0,
            "registers freed on worker {w}"
        );
    }
    // NCCL takes GPU workers, on every node.
    let err = s.init_ccl("nccl", &[]).unwrap_err();
    assert!(err.message.contains("the nccl backend needs"), "{err}");

    s.shutdown().unwrap();
    let (status, said) = ended(nodes.remove(0), Duration::from_secs(10));
    assert_eq!(status, Some(0), "the node stops after the shutdown: {said}");
    for pid in &pids[2..] {
        assert!(!exists(*pid as i32), "the node's worker {pid} is gone");
    }
}

#[test]
fn a_node_without_gloo_makes_the_cpu_backend_unavailable_naming_the_package() {
    // Node 0's worker has the plugin; node 1's is sent looking where there is none.
    if gloo::plugin().is_none() {
        return;
    }
    let port = free_port("127.0.0.1");
    let missing = [("DISCOVM_GLOO_PLUGIN", "/nonexistent/libdiscovm_gloo.so")];
    let node = node_with(port, 1, TOKEN, &[], &missing);
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(20_000)).unwrap();
    let err = s.init_ccl("cpu", &[]).unwrap_err();
    assert_error(&err, ErrorKind::DeviceUnavailable, "worker 1");
    assert_error(
        &err,
        ErrorKind::DeviceUnavailable,
        "apt-get install libgloo-dev",
    );
    assert_error(
        &err,
        ErrorKind::DeviceUnavailable,
        "/nonexistent/libdiscovm_gloo.so",
    );
    s.shutdown().unwrap();
    let (status, said) = ended(node, Duration::from_secs(10));
    assert_eq!(status, Some(0), "{said}");
}

#[test]
fn a_node_s_workers_are_asked_for_the_controller_s_python_modules() {
    // This machine's workers are threads, which import nothing: only the node's are asked.
    let port = free_port("127.0.0.1");
    let child = node(port, 1, TOKEN, &[]);
    let options = SessionOptions {
        local_threads: true,
        worker_imports: vec!["tvm.exec.disco_worker?".into(), "my.functions".into()],
        ..options(20_000)
    };
    let err = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options)
        .err()
        .expect("the node's workers cannot import Python modules");
    assert_error(
        &err,
        ErrorKind::Runtime,
        "worker 1: the session asks its workers to import the Python modules `my.functions`",
    );
    let _ = ended(child, Duration::from_secs(20));
}

#[test]
fn a_node_with_a_rank_from_its_launcher_takes_that_place() {
    let port = free_port("127.0.0.1");
    // Ranks 2 and 1 join in that order; worker ids follow the ranks, not the order.
    let two = node_with(port, 1, TOKEN, &[], &[("SLURM_PROCID", "2")]);
    std::thread::sleep(Duration::from_millis(100));
    let one = node(port, 1, TOKEN, &["--rank", "1"]);
    let s = Session::new_socket(3, 1, 1, "127.0.0.1", port.into(), options(30_000)).unwrap();
    let pids = pids_of(&s);
    let (two_pid, one_pid) = (two.id() as i64, one.id() as i64);
    // Each node's worker is a child of that node.
    let parent = |pid: i64| -> i64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        after.split(' ').nth(1).unwrap().parse().unwrap()
    };
    assert_eq!(parent(pids[1]), one_pid);
    assert_eq!(parent(pids[2]), two_pid);
    s.shutdown().unwrap();
    for child in [one, two] {
        assert_eq!(ended(child, Duration::from_secs(10)).0, Some(0));
    }
}

#[test]
fn a_killed_node_fails_the_wait_in_progress_naming_it() {
    let (s, mut nodes) = session_of(2, 2, options(30_000));
    let sleep = s.get_global_func("proc.sleep_ms").unwrap();
    let _busy = s
        .call(Target::One(3), &sleep, &[Any::Int(60_000).view()])
        .unwrap();
    let mut node = nodes.remove(0);
    let killer = std::thread::spawn({
        let pid = node.id();
        move || {
            std::thread::sleep(Duration::from_millis(200));
            // SAFETY: signals the node process this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            Instant::now()
        }
    });
    let err = s.sync_worker(3).unwrap_err();
    let noticed = Instant::now().duration_since(killer.join().unwrap());
    assert_error(&err, ErrorKind::Worker, "node 1 (workers 2 and 3");
    assert_error(&err, ErrorKind::Worker, "its connection closed");
    assert!(
        noticed < Duration::from_millis(500),
        "noticed after {noticed:?}"
    );
    // The session is broken: every call fails at once with the cause, local workers too.
    let err = s.sync_worker(0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "node 1");
    s.shutdown().unwrap();
    let _ = node.wait();
}

#[test]
fn a_stopped_node_is_lost_after_the_heartbeat_interval() {
    let options = SessionOptions {
        heartbeat: Some(Duration::from_millis(400)),
        ..options(30_000)
    };
    let (s, mut nodes) = session_of(2, 1, options);
    let add = s.get_global_func("proc.add").unwrap();
    let node = nodes.remove(0);
    let _stopped = stop(node.id() as i32);
    // A call the stopped node never answers: the sync after it must reach the node.
    let sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    let started = Instant::now();
    let err = s.sync_worker(1).unwrap_err();
    let took = started.elapsed();
    assert_error(&err, ErrorKind::Worker, "nothing came from it for 400 ms");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    drop((sum, add));
    s.shutdown().unwrap();
    // SAFETY: a signal to the node process this test started.
    unsafe { libc::kill(node.id() as i32, libc::SIGKILL) };
    let _ = ended(node, Duration::from_secs(5));
}

#[test]
fn a_wrong_secret_and_a_strangers_garbage_are_turned_away() {
    let port = free_port("127.0.0.1");
    let wrong = node(port, 1, "a guess", &[]);
    // A stranger that sends garbage, and one that connects and says nothing.
    let stranger = std::thread::spawn(move || {
        let mut stream = connect_retrying(port);
        let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: discovm\r\n\r\n");
        let _ = stream.write_all(&[0xff; 4096]);
        // The rightful node joins once the controller turned the wrong one away.
        let turned_away = ended(wrong, Duration::from_secs(10));
        let good = node(port, 1, TOKEN, &[]);
        (good, silent, turned_away)
    });
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(20_000))
        .expect("the rightful node joins");
    let (good, _silent, (status, said)) = stranger.join().unwrap();
    assert_ne!(status, Some(0));
    assert!(said.contains("the controller's MAC is wrong"), "{said}");
    assert_eq!(pids_of(&s).len(), 2);
    s.shutdown().unwrap();
    assert_eq!(ended(good, Duration::from_secs(10)).0, Some(0));

    // Without the rightful node the controller gives up at its timeout, naming who is missing.
    let port = free_port("127.0.0.1");
    let wrong = node(port, 1, "a guess", &[]);
    let err = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(1500))
        .err()
        .expect("nobody joins");
    assert_error(&err, ErrorKind::Timeout, "node(s) 1 of 2 did not join");
    let _ = ended(wrong, Duration::from_secs(10));
}

/// A node's first board holds every worker as it started (idle, no call yet, with its pid);
/// while nothing changes, only heartbeats follow.
#[test]
fn a_node_reports_its_workers_once_then_only_beats_while_nothing_changes() {
    use discovm::net::routed::{self, ALL, What};
    use discovm::session::node_board as board;
    use discovm::worker::activity::State;
    let (node, mut stream) = fake_controller(2, 30_000);
    let limits = discovm::wire::Limits::default();
    let first = routed::read(&mut stream, &limits, Vec::new()).unwrap();
    assert_eq!((first.route, first.what), (ALL, What::Board));
    let entries = board::decode(&first.frame).unwrap();
    assert_eq!(entries.iter().map(|e| e.local).collect::<Vec<_>>(), [0, 1]);
    for entry in &entries {
        assert!(exists(entry.pid as i32), "{entry:?}");
        assert_eq!((entry.report.state, entry.report.call), (State::Idle, 0));
    }
    // A node looks every 100 ms: a few looks find nothing changed.
    let until = Instant::now() + Duration::from_millis(500);
    let mut beats = 0;
    while Instant::now() < until {
        let message = routed::read(&mut stream, &limits, Vec::new()).unwrap();
        assert_eq!(message.what, What::Heartbeat, "nothing changed");
        beats += 1;
    }
    assert!(beats >= 3, "{beats} heartbeats in 500 ms");
    drop(stream);
    let _ = ended(node, Duration::from_secs(10));
}

#[test]
fn a_node_whose_controller_goes_away_stops_its_workers_and_exits() {
    let (node, _stream) = fake_controller(2, 300);
    // The controller says nothing more: the node gives up after its heartbeat interval.
    let started = Instant::now();
    let (status, said) = ended(node, Duration::from_secs(10));
    assert_eq!(status, Some(1), "{said}");
    assert!(
        said.contains("nothing came from the controller for 300 ms"),
        "{said}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn bad_shapes_of_a_session_across_machines_are_refused() {
    let cases: [(i64, i64, i64, &str); 4] = [
        (0, 1, 1, "num_nodes 0 is out of range"),
        (2, 0, 1, "workers_per_node 0 is out of range"),
        (2, 1, 70000, "port 70000 is out of range"),
        (2, 1, -1, "port -1 is out of range"),
    ];
    for (nodes, per_node, port, expected) in cases {
        let err = Session::new_socket(nodes, per_node, 1, "127.0.0.1", port, options(1000))
            .err()
            .expect("refused");
        assert_error(&err, ErrorKind::Value, expected);
    }
    let err = Session::new_socket(2, 1, 1, "256.0.0.1", 0, options(1000))
        .err()
        .expect("refused");
    assert_error(
        &err,
        ErrorKind::Value,
        "cannot listen for nodes on 256.0.0.1:0",
    );
    // Another node's workers run on the CPU or each on the GPU of its index on the node.
    let cuda = |id| discovm::abi::DLDevice {
        device_type: discovm::abi::KDL_CUDA,
        device_id: id,
    };
    let cpu = discovm::abi::DLDevice::cpu();
    for (devices, expected) in [
        (vec![cpu, cpu, cuda(1), cuda(0)], "devices[2] is (2, 1)"),
        (vec![cpu, cpu, cuda(0), cpu], "devices[3] is (1, 0)"),
        (vec![cpu, cpu, cpu, cuda(1)], "devices[3] is (2, 1)"),
    ] {
        let options = SessionOptions {
            devices,
            ..options(1000)
        };
        let err = Session::new_socket(2, 2, 1, "127.0.0.1", 0, options)
            .err()
            .expect("refused");
        assert_error(&err, ErrorKind::Value, expected);
        assert!(err.message.contains("node 1"), "{err}");
    }
}

/// A deterministic stream of bytes for fuzzed messages (xorshift).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `message` with a few bytes changed, cut short or run on, or, one time in four, noise.
    fn mutate(&mut self, message: &[u8]) -> Vec<u8> {
        let mut out = message.to_vec();
        match self.next() % 4 {
            0 => out = (0..self.next() % 96).map(|_| self.next() as u8).collect(),
            1 => out.truncate((self.next() as usize) % (out.len() + 1)),
            2 => out.extend((0..self.next() % 32).map(|_| self.next() as u8)),
            _ => {}
        }
        for _ in 0..1 + self.next() % 4 {
            if !out.is_empty() {
                let at = (self.next() as usize) % out.len();
                out[at] ^= 1 << (self.next() % 8);
            }
        }
        out
    }
}

/// A `Hello` as a node sends it (rank any, one worker).
fn hello() -> Vec<u8> {
    let mut hello = b"DVMH\x01\x02\x00\x00".to_vec();
    hello.extend_from_slice(&u32::MAX.to_le_bytes());
    hello.extend_from_slice(&1u32.to_le_bytes());
    hello.extend_from_slice(&[7u8; 32]);
    hello.push(discovm::wire::VERSION_MINOR);
    hello.extend_from_slice(&[0u8; 15]);
    hello
}

/// Routed messages as a controller sends them: a heartbeat, a sync to worker 0 and to every
/// worker.
fn routed_messages() -> Vec<Vec<u8>> {
    let sync = |request: u64| {
        let mut frame = Vec::new();
        discovm::wire::Frame::<Any>::Sync { request }
            .encode(&mut frame)
            .unwrap();
        frame
    };
    let routed = |route: u32, what: u32, frame: &[u8]| {
        let mut out = route.to_le_bytes().to_vec();
        out.extend_from_slice(&what.to_le_bytes());
        out.extend_from_slice(frame);
        out
    };
    vec![
        routed(0, 1, &[]),
        routed(0, 0, &sync(1)),
        routed(u32::MAX, 0, &sync(2)),
    ]
}

#[test]
fn a_thousand_fuzzed_handshake_messages_are_dropped_and_the_session_forms() {
    let port = free_port("127.0.0.1");
    let strangers = std::thread::spawn(move || {
        let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
        let mut sent = 0;
        // 50 connections of 20 messages each.
        while sent < 1000 {
            let mut stream = connect_retrying(port);
            for _ in 0..20 {
                let _ = stream.write_all(&noise.mutate(&hello()));
                sent += 1;
            }
        }
        node(port, 1, TOKEN, &[])
    });
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(30_000))
        .expect("the rightful node joins after the strangers");
    let good = strangers.join().unwrap();
    assert_eq!(pids_of(&s).len(), 2);
    s.shutdown().unwrap();
    assert_eq!(ended(good, Duration::from_secs(10)).0, Some(0));
}

#[test]
fn a_node_fed_a_thousand_fuzzed_messages_by_its_controller_ends_without_crashing() {
    let (node, mut stream) = fake_controller(1, 2000);
    let mut noise = Noise(0x2545_f491_4f6c_dd1d);
    let messages = routed_messages();
    for i in 0..1000 {
        let message = &messages[i % messages.len()];
        // The node may have hung up already: what it read so far ended it.
        if stream.write_all(&noise.mutate(message)).is_err() {
            break;
        }
    }
    let (status, said) = ended(node, Duration::from_secs(10));
    assert_eq!(
        status,
        Some(1),
        "the node exits with a status, not a signal: {said}"
    );
    assert!(said.contains("discovm node: RuntimeError"), "{said}");
}

#[test]
fn a_joined_node_that_sends_garbage_is_dropped_naming_it() {
    let port = free_port("127.0.0.1");
    let fake = std::thread::spawn(move || {
        let mut stream = joined_as_a_node(port, 1);
        // Answers the session's first sync as a node would, then sends garbage.
        let discovm::wire::Frame::Sync { request } = next_frame(&mut stream) else {
            panic!("the session starts with a sync");
        };
        let reply = none_reply(request);
        discovm::net::routed::write(&mut stream, 0, discovm::net::routed::What::Frame, &reply)
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let mut noise = Noise(0x1234_5678_9abc_def1);
        for _ in 0..1000 {
            if stream.write_all(&noise.mutate(&reply)).is_err() {
                break;
            }
        }
        stream
    });
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(30_000))
        .expect("the node joins");
    let _stream = fake.join().unwrap();
    // Nothing was sent to worker 1 since its sync: a sync needs no message until the
    // controller has read the garbage, which it does at once.
    let err = first_failed_sync(&s, 1, "the garbage never broke the session");
    assert_error(&err, ErrorKind::Worker, "node 1 (worker 1, at 127.0.0.1:");
    assert!(
        err.message.contains("sent a bad message") || err.message.contains("replied to request"),
        "{err}"
    );
    // Worker 0, on this machine, reports the broken session too; shutdown completes.
    assert_error(&s.sync_worker(0).unwrap_err(), ErrorKind::Worker, "node 1");
    s.shutdown().unwrap();
}

#[test]
fn a_dropped_drefs_free_rides_in_the_frame_of_the_next_call_to_every_worker() {
    use discovm::wire::Frame;
    let port = free_port("127.0.0.1");
    let fake = play_node(port, 1);
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(30_000)).unwrap();
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let first = call(&s, &rank, &[]);
    let freed = first.reg();
    drop(first);
    let second = call(&s, &rank, &[]);
    s.sync_worker(1).unwrap();
    s.shutdown().unwrap();
    let kept = fake.join().unwrap();
    // A node of one worker is sent that worker's messages, which it relays as they arrive.
    assert!(kept.iter().all(|(route, _)| *route == 0), "{kept:?}");
    let kept: Vec<Frame> = kept.into_iter().map(|(_, frame)| frame).collect();
    let calls: Vec<(Vec<u32>, u32)> = kept
        .iter()
        .filter_map(|frame| match frame {
            Frame::Call { frees, out, .. } => Some((frees.clone(), *out)),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [(vec![], freed), (vec![freed], second.reg())],
        "the second call carries the first one's free"
    );
    assert!(
        !kept.iter().any(|frame| matches!(frame, Frame::Free { .. })),
        "a free went as a frame of its own: {kept:?}"
    );
}

/// A call whose function differs by machine (a module loaded from its upload on other nodes)
/// reaches a node as one message for all of its workers, as any call to every worker does.
#[test]
fn a_call_that_differs_by_machine_reaches_a_node_as_one_message() {
    use discovm::net::routed::ALL;
    use discovm::wire::Frame;
    let port = free_port("127.0.0.1");
    let fake = play_node(port, 2);
    // Node 0's workers are threads: the session forms at once.
    let with_upload = SessionOptions {
        upload_modules: true,
        local_threads: true,
        ..options(30_000)
    };
    let s = Session::new_socket(2, 2, 1, "127.0.0.1", port.into(), with_upload).unwrap();
    let module = s.load_module(upload_module().to_str().unwrap()).unwrap();
    s.sync_worker(2).unwrap();
    s.shutdown().unwrap();
    let kept = fake.join().unwrap();
    let calls: Vec<(u32, u32)> = kept
        .iter()
        .filter_map(|(route, frame)| match frame {
            Frame::Call { out, .. } => Some((*route, *out)),
            _ => None,
        })
        .collect();
    assert_eq!(calls, [(ALL, module.reg())], "{kept:?}");
}

#[test]
fn a_call_to_a_node_does_not_wait_for_a_store_to_it_still_being_sent() {
    use discovm::abi::{DLDataType, DLDevice, KDL_FLOAT};
    use discovm::object::Tensor;
    use discovm::wire::Frame;
    let (s, rank, go, fake) = session_with_a_held_node();
    let held = s.call(Target::All, &rank, &[]).unwrap();
    // 64 MiB: more than the connection's buffers hold, so the store is still being sent.
    let f32 = DLDataType::new(KDL_FLOAT, 32, 1);
    let tensor = Tensor::empty(&[16 << 20], f32, DLDevice::cpu()).unwrap();
    let storing = {
        let (s, reg) = (s.clone(), held.reg());
        std::thread::spawn(move || s.set_register(reg, 1, Any::from(tensor)))
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !storing.is_finished(),
        "the store went before the node read it"
    );
    let (called, was_called) = mpsc::channel();
    let calling = {
        let (s, rank) = (s.clone(), rank.clone());
        std::thread::spawn(move || {
            let result = s.call(Target::One(1), &rank, &[]);
            let _ = called.send(());
            result
        })
    };
    let waited = was_called.recv_timeout(Duration::from_secs(5));
    go.send(()).unwrap();
    assert!(waited.is_ok(), "the call waited for the store to be sent");
    storing.join().unwrap().unwrap();
    let call = calling.join().unwrap().unwrap();
    s.sync_worker(1).unwrap();
    s.shutdown().unwrap();
    // The node got the store, then the call.
    let kept: Vec<&'static str> = fake
        .join()
        .unwrap()
        .iter()
        .filter_map(|(_, frame)| match frame {
            Frame::Store { .. } => Some("store"),
            Frame::Call { out, .. } if *out == call.reg() => Some("call"),
            _ => None,
        })
        .collect();
    assert_eq!(kept, ["store", "call"]);
}

#[test]
fn calls_to_a_node_that_reads_nothing_wait_once_a_bounded_amount_waits_to_be_sent() {
    use discovm::wire::Frame;
    const CALLS: usize = 200_000;
    let (s, rank, go, fake) = session_with_a_held_node();
    // Megabytes of calls: far more than the controller buffers and the connection holds.
    let calling = {
        let (s, rank) = (s.clone(), rank.clone());
        std::thread::spawn(move || {
            for _ in 0..CALLS {
                drop(s.call(Target::One(1), &rank, &[])?);
            }
            Ok::<_, discovm::Error>(())
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let finished = calling.is_finished();
    go.send(()).unwrap();
    assert!(
        !finished,
        "{CALLS} calls to a node that read nothing all returned"
    );
    calling.join().unwrap().unwrap();
    s.sync_worker(1).unwrap();
    s.shutdown().unwrap();
    let calls = fake
        .join()
        .unwrap()
        .iter()
        .filter(|(_, frame)| matches!(frame, Frame::Call { .. }))
        .count();
    assert_eq!(calls, CALLS);
}

#[test]
fn a_call_nobody_waits_for_reaches_its_node_at_once() {
    let (s, mut nodes) = session_of(2, 1, options(30_000));
    let exit = s.get_global_func("proc.exit").unwrap();
    // Nothing waits on worker 1 after this call: it must still run there.
    let _gone = s
        .call(Target::One(1), &exit, &[Any::Int(3).view()])
        .unwrap();
    // A wait on this machine's worker, which writes nothing to the node.
    let err = first_failed_sync(&s, 0, "the call never ran on node 1");
    assert_error(&err, ErrorKind::Worker, "exited with status 3");
    s.shutdown().unwrap();
    let _ = ended(nodes.remove(0), Duration::from_secs(10));
}

/// The error of the first of repeated syncs of `worker` that fails, within 5 s; `never` says
/// what it means when none does.
fn first_failed_sync(s: &Arc<Session>, worker: usize, never: &str) -> discovm::Error {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match s.sync_worker(worker) {
            Err(err) => return err,
            Ok(()) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            Ok(()) => panic!("{never}"),
        }
    }
}

/// Checks that a sync of `worker` still waits 200 ms after it started, while the `stopped`
/// process holds it up, and that it succeeds once the process continues.
fn sync_waits_until_continued(s: &Arc<Session>, worker: usize, stopped: Stopped) {
    std::thread::scope(|scope| {
        let synced = scope.spawn(|| s.sync_worker(worker));
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            !synced.is_finished(),
            "the sync waits for the stopped process"
        );
        stopped.resume();
        synced.join().unwrap().unwrap();
    });
}

/// A sync of a worker on another node that has run everything relayed to it is answered by its
/// node: it returns while the worker is stopped. One with a call still to run waits for it.
#[test]
fn a_node_answers_the_sync_of_a_worker_with_nothing_outstanding() {
    let (s, mut nodes) = session_of(2, 1, options(30_000));
    let pid = pids_of(&s)[1] as i32;
    let add = s.get_global_func("proc.add").unwrap();
    let first = call(&s, &add, &[Any::Int(0), Any::Int(1)]);
    // The worker ran the call, but no sync found it so: the next sync goes to the node.
    assert_eq!(int(s.get_register(first.reg(), 1).unwrap()), 1);
    let stopped = stop(pid);
    s.sync_worker(1).unwrap();
    let sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    // A sync with a call to run waits for it.
    sync_waits_until_continued(&s, 1, stopped);
    assert_eq!(int(s.get_register(sum.reg(), 1).unwrap()), 3);
    drop((first, sum, add));
    s.shutdown().unwrap();
    let _ = ended(nodes.remove(0), Duration::from_secs(10));
}

/// A sync of a worker on another node needs no message when a sync found it with everything
/// run and nothing to report and nothing went to it since: it returns while the whole node is
/// stopped, and so does a sync of all that asks the other workers. Anything sent since makes
/// the next sync ask the node, and a failure is reported once.
#[test]
fn a_sync_with_nothing_sent_since_a_successful_one_needs_no_message() {
    let options = SessionOptions {
        heartbeat: Some(Duration::from_secs(10)),
        ..options(30_000)
    };
    let (s, mut nodes) = session_of(2, 1, options);
    let node = nodes.remove(0);
    let node_pid = node.id() as i32;
    let add = s.get_global_func("proc.add").unwrap();
    let sleep = s.get_global_func("proc.sleep_ms").unwrap();
    let sum = call(&s, &add, &[Any::Int(1), Any::Int(2)]);
    s.sync_all().unwrap();
    let stopped = stop(node_pid);
    s.sync_worker(1).unwrap();
    s.sync_all().unwrap();

    let again = call(&s, &add, &[Any::Int(3), Any::Int(4)]);
    // A sync after a call asks the node, which is stopped.
    sync_waits_until_continued(&s, 1, stopped);
    assert_eq!(int(s.get_register(again.reg(), 1).unwrap()), 7);

    let fail = s.get_global_func("proc.fail").unwrap();
    drop(call(&s, &fail, &[]));
    s.sync_worker(0).unwrap_err();
    let err = s.sync_worker(1).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "proc.fail was asked to fail");
    // Reported once: the next sync finds nothing to report, and the one after needs no message.
    s.sync_worker(1).unwrap();
    let stopped = stop(node_pid);
    s.sync_worker(1).unwrap();
    stopped.resume();
    // A sync that sends a dropped DRef's free first covers it too.
    drop(call(&s, &add, &[Any::Int(5), Any::Int(6)]));
    s.sync_worker(1).unwrap();
    let stopped = stop(node_pid);
    s.sync_worker(1).unwrap();
    // A sync of all asks only the workers not in sync: here node 0's, still sleeping.
    let slept = s
        .call(Target::One(0), &sleep, &[Any::Int(100).view()])
        .unwrap();
    s.sync_all().unwrap();
    stopped.resume();
    drop((sum, again, add, fail, sleep, slept));
    s.shutdown().unwrap();
    let _ = ended(node, Duration::from_secs(10));
}

/// The tests' module (`support/upload_module.c`), built once.
fn upload_module() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let library = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("upload_module_{}.so", std::process::id()));
            let include = concat!(env!("CARGO_MANIFEST_DIR"), "/include");
            nccl_stub::build_shared(
                "tests/support/upload_module.c",
                &library,
                &["-I", include, "-ldl"],
            );
            library
        })
        .clone()
}

/// A module function is looked up on the workers of every node at once: one the module lacks,
/// or one of a module whose load failed, fails the lookup, and an earlier failed call is left
/// for the next sync.
#[test]
fn module_functions_fail_at_lookup_on_every_node() {
    let (s, _nodes) = session_of(2, 1, options(30_000));
    let baseline: Vec<usize> = (0..2).map(|w| s.live_registers(w).unwrap()).collect();
    let path = upload_module();
    let path = path.to_str().unwrap();
    let module = s.load_module(path).unwrap();
    let err = s.module_func(&module, "no_such_function").unwrap_err();
    assert_error(&err, ErrorKind::Key, "has no function `no_such_function`");
    assert!(err.message.contains(path), "{}", err.message);

    let fail = s.get_global_func("proc.fail_on").unwrap();
    let failed = call(&s, &fail, &[Any::Int(1), Any::Int(7)]);
    let from_upload = s.module_func(&module, "upload_from_upload_dir").unwrap();
    assert_error(
        &s.sync_all().unwrap_err(),
        ErrorKind::Worker,
        "worker 1: `proc.fail_on` failed: ValueError: boom on purpose",
    );
    let answers = call(&s, &from_upload, &[]);
    assert_eq!(int(s.get_register(answers.reg(), 1).unwrap()), 0);

    let text = std::env::temp_dir().join(format!("discovm-no-library-{}", std::process::id()));
    std::fs::write(&text, "not a shared library\n").unwrap();
    let bad = s.load_module(text.to_str().unwrap()).unwrap();
    let err = s.module_func(&bad, "upload_from_upload_dir").unwrap_err();
    assert_error(&err, ErrorKind::Worker, "cannot load module");
    assert!(err.message.contains("worker 1: "), "{}", err.message);
    assert_error(
        &s.sync_all().unwrap_err(),
        ErrorKind::Worker,
        "cannot load module",
    );
    std::fs::remove_file(&text).unwrap();

    drop((module, fail, failed, from_upload, answers, bad));
    let live: Vec<usize> = (0..2).map(|w| s.live_registers(w).unwrap()).collect();
    assert_eq!(live, baseline, "every register is free again");
    s.shutdown().unwrap();
}

#[test]
fn uploaded_modules_load_from_each_nodes_own_copy_which_goes_with_the_node() {
    let module_file = upload_module();
    let path = module_file.to_str().unwrap();
    let with_upload = SessionOptions {
        upload_modules: true,
        ..options(30_000)
    };
    let (s, mut nodes) = session_of(2, 2, with_upload);
    let node_pid = nodes[0].id();
    let module = s.load_module(path).unwrap();
    let from_upload = s.module_func(&module, "upload_from_upload_dir").unwrap();
    let answers = call(&s, &from_upload, &[]);
    let answers: Vec<i64> = (0..4)
        .map(|w| int(s.get_register(answers.reg(), w).unwrap()))
        .collect();
    assert_eq!(
        answers,
        [0, 0, 1, 1],
        "node 1's workers load the node's own copy"
    );
    // The copy lies under its hash in the node's private directory.
    let dir = std::env::temp_dir().join(format!("discovm-uploads-{node_pid}-0"));
    let kept: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].len() == 67 && kept[0].ends_with(".so"), "{kept:?}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    drop((module, from_upload));
    s.shutdown().unwrap();
    assert_eq!(ended(nodes.remove(0), Duration::from_secs(10)).0, Some(0));
    assert!(!dir.exists(), "the node removed its uploads");

    // Without uploads, every node loads the path it is given.
    let (s, mut nodes) = session_of(2, 1, options(30_000));
    let module = s.load_module(path).unwrap();
    let from_upload = s.module_func(&module, "upload_from_upload_dir").unwrap();
    let answers = call(&s, &from_upload, &[]);
    assert_eq!(int(s.get_register(answers.reg(), 1).unwrap()), 0);
    // A hash that was never uploaded, or that is no hash, fails on the worker.
    let load = s.get_global_func("discovm.load_uploaded_module").unwrap();
    let _missing = s
        .call(
            Target::One(1),
            &load,
            &[Any::from("ab".repeat(32).as_str()).view()],
        )
        .unwrap();
    assert_error(
        &s.sync_worker(1).unwrap_err(),
        ErrorKind::Worker,
        "was uploaded to this node",
    );
    let _path = s
        .call(
            Target::One(1),
            &load,
            &[Any::from("../../etc/passwd").view()],
        )
        .unwrap();
    assert_error(
        &s.sync_worker(1).unwrap_err(),
        ErrorKind::Worker,
        "64 digits",
    );
    s.shutdown().unwrap();
    assert_eq!(ended(nodes.remove(0), Duration::from_secs(10)).0, Some(0));
}

#[test]
fn a_tensor_larger_than_a_ring_crosses_to_and_from_a_worker_on_another_node() {
    let (s, mut nodes) = session_of(2, 1, options(60_000));
    let elements: usize = 5 << 20; // 20 MiB of float32: more than the 8 MiB ring to the worker
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let held = call(&s, &rank, &[]);
    s.set_register(held.reg(), 1, Any::from(floats(elements, 0.0)))
        .unwrap();
    let back = s.get_register(held.reg(), 1).unwrap();
    assert!(
        holds_floats(&back, elements, 0.0),
        "the tensor came back as it went"
    );
    drop((held, rank));
    s.shutdown().unwrap();
    assert_eq!(ended(nodes.remove(0), Duration::from_secs(10)).0, Some(0));
}

/// A float32 host tensor of `elements` elements, element `i` holding `i + seed`.
fn floats(elements: usize, seed: f32) -> discovm::object::Tensor {
    let values: Vec<f32> = (0..elements).map(|i| i as f32 + seed).collect();
    let tensor = discovm::object::Tensor::empty(
        &[elements as i64],
        session_calls::F32,
        discovm::abi::DLDevice::cpu(),
    )
    .unwrap();
    // SAFETY: a compact float32 host tensor of `elements` elements, ours alone.
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), tensor.data_ptr().cast(), elements) };
    tensor
}

/// Whether `value` is the tensor [`floats`] made with `elements` and `seed`.
fn holds_floats(value: &Any, elements: usize, seed: f32) -> bool {
    let tensor = value.view().as_tensor().unwrap();
    // SAFETY: a compact float32 host tensor of `elements` elements (its size is checked).
    tensor.nbytes() == elements * 4
        && unsafe { std::slice::from_raw_parts(tensor.data_ptr().cast::<f32>(), elements) }
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as f32 + seed)
}

#[test]
fn large_values_for_one_worker_and_for_every_worker_of_a_node_arrive_whole_and_in_order() {
    // Node 1 runs workers 2 and 3: a frame for one of them streams into its ring as it
    // arrives, a frame for both is read first; calls between them keep their order.
    let (s, mut nodes) = session_of(2, 2, options(60_000));
    let elements = 3 << 20; // 12 MiB: more than a ring to a worker holds
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let echo = s.get_global_func("proc.echo").unwrap();
    let held = call(&s, &rank, &[]);
    for round in 0..3 {
        let seed = round as f32 * 10.0;
        s.set_register(held.reg(), 2, Any::from(floats(elements, seed)))
            .unwrap();
        let everywhere = Any::from(floats(elements, seed + 1.0));
        let echoed = s.call(Target::All, &echo, &[everywhere.view()]).unwrap();
        s.set_register(held.reg(), 3, Any::from(floats(elements, seed + 2.0)))
            .unwrap();
        for w in 0..4 {
            let back = s.get_register(echoed.reg(), w).unwrap();
            assert!(
                holds_floats(&back, elements, seed + 1.0),
                "round {round}, worker {w}"
            );
        }
        for (w, offset) in [(2, 0.0), (3, 2.0)] {
            let back = s.get_register(held.reg(), w).unwrap();
            assert!(
                holds_floats(&back, elements, seed + offset),
                "round {round}, worker {w}"
            );
        }
    }
    drop((held, rank, echo));
    s.shutdown().unwrap();
    assert_eq!(ended(nodes.remove(0), Duration::from_secs(10)).0, Some(0));
}

#[test]
fn node_zero_runs_worker_threads_on_request_and_a_lost_node_breaks_them_too() {
    let port = free_port("127.0.0.1");
    let mut remote = node(port, 1, TOKEN, &[]);
    let threads = SessionOptions {
        local_threads: true,
        ..options(30_000)
    };
    let s = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), threads).unwrap();
    // This machine's workers are threads here (`proc.pid` as the tests' worker program has
    // it); the other node's, processes there.
    let here = discovm::object::Function::from_closure(|_| Ok(Any::Int(std::process::id().into())));
    discovm::object::registry::register_global("proc.pid", here, true).unwrap();
    let pids = pids_of(&s);
    assert_eq!(pids[0], i64::from(std::process::id()));
    assert_ne!(pids[1], i64::from(std::process::id()));
    let rank = s.get_global_func("runtime.disco.worker_rank").unwrap();
    let ranks = call(&s, &rank, &[]);
    let ranks: Vec<i64> = (0..2)
        .map(|w| int(s.get_register(ranks.reg(), w).unwrap()))
        .collect();
    assert_eq!(ranks, [0, 1]);
    // The node dies: the threads here fail at once too, with its cause.
    remote.kill().unwrap();
    let err = s.sync_worker(1).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "node 1 (worker 1");
    let err = s.sync_worker(0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "node 1 (worker 1");
    s.shutdown().unwrap();
    let _ = remote.wait();
}

#[test]
fn a_node_killed_during_a_collective_fails_the_wait_at_once_and_shutdown_completes() {
    let Some((s, mut nodes)) = with_gloo(1, 60_000) else {
        return;
    };
    // Worker 0 waits in a barrier that worker 1, on node 1, never joins.
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    drop(s.call(Target::One(0), &barrier, &[]).unwrap());
    std::thread::sleep(Duration::from_millis(300));
    let mut node = nodes.remove(0);
    node.kill().unwrap();
    let killed = Instant::now();
    let err = s.sync_worker(0).unwrap_err();
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "noticed after {:?}",
        killed.elapsed()
    );
    // The node's lost connection to the controller and its closed Gloo connection to worker 0
    // race: either may end the wait first, and either says why.
    assert_eq!(err.kind, ErrorKind::Worker, "{err:?}");
    assert!(
        err.message.contains("node 1") || err.message.contains("Connection closed by peer"),
        "{err:?}"
    );
    s.shutdown().unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(15),
        "shutdown ended {:?} after the kill",
        killed.elapsed()
    );
    let _ = node.wait();
}

/// A float32 tensor of `len` elements on every worker.
fn remote_floats(s: &Arc<Session>, len: i64) -> discovm::session::DRef {
    let empty = s.get_global_func("runtime.disco.empty").unwrap();
    call(
        s,
        &empty,
        &[Shape::new(&[len]).into(), Any::DataType(session_calls::F32)],
    )
}

/// Floats 0 to 7 on worker 0 (`whole`), and room for 2 on every worker (`part`).
fn whole_and_part(s: &Arc<Session>) -> (discovm::session::DRef, discovm::session::DRef) {
    let whole = remote_floats(s, 8);
    let part = remote_floats(s, 2);
    let mut data: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let mut shape = [8i64];
    let host = session_calls::host_tensor(&mut data, &mut shape);
    s.copy_worker0(
        host,
        &whole,
        "whole",
        discovm::session::CopyDirection::ToWorker,
    )
    .unwrap();
    (whole, part)
}

/// The float32 values of the host tensor `dref` holds on worker `w`.
fn floats_on(s: &Arc<Session>, w: usize, dref: &discovm::session::DRef) -> Vec<f32> {
    let got = s.get_register(dref.reg(), w).unwrap();
    let tensor = got.view().as_tensor().unwrap();
    let len = tensor.shape().iter().product::<i64>() as usize;
    // SAFETY: a host tensor of `len` float32 that came back with the value.
    unsafe { std::slice::from_raw_parts(tensor.data_ptr() as *const f32, len) }.to_vec()
}

/// A session of 2 nodes of `per_node` workers with Gloo between them (`init_ccl("cpu")`) and
/// its node processes; `None`, having said why, where Gloo cannot be had.
fn with_gloo(per_node: u32, timeout_ms: u64) -> Option<(Arc<Session>, Vec<Child>)> {
    gloo::plugin()?;
    let (s, nodes) = session_of(2, per_node, options(timeout_ms));
    s.init_ccl("cpu", &[]).unwrap();
    Some((s, nodes))
}

/// Calls `func` with `args` on `worker` alone.
fn on(s: &Arc<Session>, worker: usize, func: &discovm::session::DRef, args: &[Any]) {
    let views: Vec<_> = args.iter().map(Any::view).collect();
    drop(s.call(Target::One(worker), func, &views).unwrap());
}

#[test]
fn workers_of_two_nodes_that_disagree_all_fail_and_the_communicator_goes_on() {
    // 2 nodes of 2 worker processes: within a node they meet in shared memory.
    let Some((s, _nodes)) = with_gloo(2, 60_000) else {
        return;
    };
    let part = remote_floats(&s, 4);
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    let sum = Any::from(Shape::new(&[0]));
    let args = [
        part.clone().into(),
        sum,
        Any::Bool(false),
        part.clone().into(),
    ];
    // Worker 1 calls a barrier where its node's other worker and node 1 call an allreduce.
    for w in [0, 2, 3] {
        on(&s, w, &allreduce, &args);
    }
    on(&s, 1, &barrier, &[]);
    let started = Instant::now();
    for w in 0..4 {
        let err = s.sync_worker(w).unwrap_err();
        assert_error(&err, ErrorKind::Worker, &format!("worker {w}"));
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Every worker failed alike: the next collective meets.
    drop(call(&s, &allreduce, &args));
    s.sync_all().unwrap();
}

#[test]
fn collectives_that_never_meet_on_nodes_end_in_the_timeout_and_init_ccl_starts_over() {
    let Some((s, _nodes)) = with_gloo(2, 3000) else {
        return;
    };
    let part = remote_floats(&s, 4);
    let all = remote_floats(&s, 16);
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let allgather = s.get_global_func("runtime.disco.allgather").unwrap();
    let sum = Any::from(Shape::new(&[0]));
    // An allreduce meets within each node first; an allgather meets across nodes at once.
    for w in 0..3 {
        on(
            &s,
            w,
            &allreduce,
            &[
                part.clone().into(),
                sum.clone(),
                Any::Bool(false),
                part.clone().into(),
            ],
        );
    }
    on(
        &s,
        3,
        &allgather,
        &[part.clone().into(), Any::Bool(false), all.clone().into()],
    );
    let started = Instant::now();
    assert!(s.sync_all().is_err());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Once the workers gave up too (their failures come with the syncs after), a new
    // communicator works.
    let until = Instant::now() + Duration::from_secs(30);
    while s.sync_all().is_err() {
        assert!(Instant::now() < until, "the workers never gave up");
        std::thread::sleep(Duration::from_millis(200));
    }
    s.init_ccl("cpu", &[]).unwrap();
    let args = [
        part.clone().into(),
        sum,
        Any::Bool(false),
        part.clone().into(),
    ];
    drop(call(&s, &allreduce, &args));
    s.sync_all().unwrap();
}

/// The inodes of the sockets in the listening state, from the kernel's tables.
fn listening_socket_inodes() -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // "sl local rem st ... uid timeout inode": state 0A is LISTEN.
            if fields.get(3) == Some(&"0A") {
                inodes.extend(fields.get(9).and_then(|i| i.parse::<u64>().ok()));
            }
        }
    }
    inodes
}

/// The inodes of the sockets process `pid` holds.
fn socket_inodes_of(pid: i64) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| {
        let target = std::fs::read_link(fd.ok()?.path()).ok()?;
        let target = target.to_str()?;
        target
            .strip_prefix("socket:[")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
    .collect()
}

#[test]
fn once_init_ccl_connected_gloo_nothing_of_the_session_listens() {
    let Some((s, nodes)) = with_gloo(2, 30_000) else {
        return;
    };
    let listening = listening_socket_inodes();
    // The workers and the node (this process, the controller, runs other tests' listeners).
    let mut pids = pids_of(&s);
    pids.extend(nodes.iter().map(|n| i64::from(n.id())));
    for pid in pids {
        let open: Vec<u64> = socket_inodes_of(pid)
            .into_iter()
            .filter(|inode| listening.contains(inode))
            .collect();
        assert!(open.is_empty(), "process {pid} listens on sockets {open:?}");
    }
}

#[test]
fn hierarchical_collectives_take_in_group_of_one_group_and_refuse_bad_arguments_at_once() {
    let Some((s, _nodes)) = with_gloo(2, 60_000) else {
        return;
    };
    let (whole, part) = whole_and_part(&s);
    // With one group, in_group is the whole session.
    let scatter = s
        .get_global_func("runtime.disco.scatter_from_worker0")
        .unwrap();
    let args = [whole.clone().into(), Any::Bool(true), part.clone().into()];
    drop(call(&s, &scatter, &args));
    s.sync_all().unwrap();
    for w in 0..4 {
        assert_eq!(
            floats_on(&s, w, &part),
            [2.0 * w as f32, 2.0 * w as f32 + 1.0],
            "worker {w}'s part"
        );
    }
    // Every worker passes None where a tensor belongs: all fail at once, and the next
    // collective meets.
    let allgather = s.get_global_func("runtime.disco.allgather").unwrap();
    let bad = [Any::None, Any::Bool(false), whole.clone().into()];
    drop(call(&s, &allgather, &bad));
    let started = Instant::now();
    let err = s.sync_all().unwrap_err();
    assert_error(&err, ErrorKind::Worker, "argument 0 (send)");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let good = [part.clone().into(), Any::Bool(false), whole.clone().into()];
    drop(call(&s, &allgather, &good));
    s.sync_all().unwrap();
}

#[test]
fn a_node_whose_workers_have_no_gpu_fails_the_session_naming_the_worker_and_why() {
    if discovm::device::cuda::device_count() > 0 {
        eprintln!("skipped: this machine has a GPU, so node 1's worker would start on it");
        return;
    }
    let port = free_port("127.0.0.1");
    let mut nodes = vec![node(port, 1, TOKEN, &[])];
    let gpu = discovm::abi::DLDevice {
        device_type: discovm::abi::KDL_CUDA,
        device_id: 0,
    };
    let options = SessionOptions {
        devices: vec![discovm::abi::DLDevice::cpu(), gpu],
        ..options(20_000)
    };
    let err = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options)
        .err()
        .expect("no session without the GPU");
    assert_error(
        &err,
        ErrorKind::DeviceUnavailable,
        "worker 1: CUDA device 0",
    );
    // The node stops with the session that did not form.
    ended(nodes.remove(0), Duration::from_secs(10));
}

#[test]
fn a_node_that_cannot_start_its_workers_says_why_and_the_session_does_not_form() {
    let port = free_port("127.0.0.1");
    let missing = "/nonexistent/discovm-worker";
    let node = node_with(port, 1, TOKEN, &[], &[("DISCOVM_WORKER", missing)]);
    let err = Session::new_socket(2, 1, 1, "127.0.0.1", port.into(), options(20_000))
        .err()
        .expect("no session without node 1's workers");
    assert_error(&err, ErrorKind::Value, "starting the workers of node 1");
    assert!(err.message.contains(missing), "{err}");
    let (status, _) = ended(node, Duration::from_secs(10));
    assert_ne!(status, Some(0));
}

#[test]
fn a_worker_killed_on_a_node_releases_its_node_mates_from_a_collective_at_once() {
    // 2 nodes of 2 worker processes: workers 2 and 3 meet in node 1's shared memory, and
    // worker 2 meets node 0 through Gloo. Kill a member, then the node's leader.
    for victim in [3, 2] {
        if !killed_during_a_barrier(victim) {
            return;
        }
    }
}

/// Workers other than `victim` wait in a barrier that `victim` never joins: it is killed.
/// Every wait fails at once, the session names the victim, and shutdown does not wait for the
/// survivors. False
/// where Gloo cannot be had.
fn killed_during_a_barrier(victim: usize) -> bool {
    let Some((s, _nodes)) = with_gloo(2, 60_000) else {
        return false;
    };
    let pids = pids_of(&s);
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    let survivors: Vec<usize> = (0..4).filter(|&w| w != victim).collect();
    for &w in &survivors {
        on(&s, w, &barrier, &[]);
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: a plain kill of a worker process the session started.
    unsafe { libc::kill(pids[victim] as i32, libc::SIGKILL) };
    let killed = Instant::now();
    // Each wait fails: naming the victim, or, on a worker whose Gloo pair to it closed
    // first, with that; then the session names the victim on every call.
    for &w in &survivors {
        let err = s.sync_worker(w).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Worker, "{err}");
    }
    let named = format!("worker {victim}");
    while !s.sync_worker(0).is_err_and(|e| e.message.contains(&named)) {
        std::thread::sleep(Duration::from_millis(10));
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "{named} is not named"
        );
    }
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "worker {victim}'s death noticed after {:?}",
        killed.elapsed()
    );
    s.shutdown().unwrap();
    // The survivors left the barrier: shutdown waited out neither the timeout nor a grace.
    assert!(
        killed.elapsed() < Duration::from_secs(8),
        "shutdown ended {:?} after worker {victim} was killed",
        killed.elapsed()
    );
    for &w in &survivors {
        assert!(!exists(pids[w] as i32), "worker {w} is gone");
    }
    true
}

#[test]
fn worker_threads_of_node_zero_meet_in_this_process_before_the_nodes_meet() {
    if gloo::plugin().is_none() {
        return;
    }
    let port = free_port("127.0.0.1");
    let mut remote = node(port, 2, TOKEN, &[]);
    let threads = SessionOptions {
        local_threads: true,
        ..options(60_000)
    };
    let s = Session::new_socket(2, 2, 1, "127.0.0.1", port.into(), threads).unwrap();
    s.init_ccl("cpu", &[]).unwrap();
    let (whole, part) = whole_and_part(&s);
    // Scatter; worker 1 passes its part to worker 0 within node 0, where a mismatch is
    // reported by the node's own meeting; then the sum of every worker's part on every worker.
    let scatter = s
        .get_global_func("runtime.disco.scatter_from_worker0")
        .unwrap();
    drop(call(
        &s,
        &scatter,
        &[whole.clone().into(), Any::Bool(false), part.clone().into()],
    ));
    let send = s.get_global_func("runtime.disco.send_to_worker").unwrap();
    let recv = s.get_global_func("runtime.disco.recv_from_worker").unwrap();
    on(&s, 1, &send, &[part.clone().into(), Any::Int(0)]);
    on(&s, 0, &recv, &[part.clone().into(), Any::Int(1)]);
    s.sync_all().unwrap();
    assert_eq!(
        floats_on(&s, 0, &part),
        [2.0, 3.0],
        "worker 1's part on worker 0"
    );
    on(&s, 1, &send, &[part.clone().into(), Any::Int(0)]);
    on(&s, 0, &recv, &[whole.clone().into(), Any::Int(1)]);
    let err = s.sync_worker(0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "among the workers of this node");
    assert!(s.sync_worker(1).is_err(), "the sender fails too");
    let allreduce = s.get_global_func("runtime.disco.allreduce").unwrap();
    let sum = Any::from(Shape::new(&[0]));
    let args = [
        part.clone().into(),
        sum.clone(),
        Any::Bool(false),
        part.clone().into(),
    ];
    drop(call(&s, &allreduce, &args));
    s.sync_all().unwrap();
    for w in 0..4 {
        assert_eq!(floats_on(&s, w, &part), [14.0, 18.0], "worker {w}'s sum");
    }
    // Node 0's threads disagree: they fail in their own meeting, and the others with them.
    let barrier = s.get_global_func("runtime.disco.barrier").unwrap();
    for w in [0, 2, 3] {
        on(&s, w, &allreduce, &args);
    }
    on(&s, 1, &barrier, &[]);
    let err = s.sync_worker(0).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "among the workers of this node");
    for w in 1..4 {
        assert!(s.sync_worker(w).is_err(), "worker {w} fails too");
    }
    // The communicator goes on (what a failed collective left in its buffers is undefined).
    drop(call(
        &s,
        &scatter,
        &[whole.clone().into(), Any::Bool(false), part.clone().into()],
    ));
    drop(call(&s, &allreduce, &args));
    s.sync_all().unwrap();
    assert_eq!(floats_on(&s, 3, &part), [12.0, 16.0]);
    s.shutdown().unwrap();
    let _ = remote.wait();
}
