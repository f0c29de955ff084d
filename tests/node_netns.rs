//! Sessions across machines over a real interface: each test makes a network namespace joined
//! to this one by a veth pair, with 1 ms of delay and 1% loss on the link where the kernel has
//! netem, and runs the node inside the namespace, so its traffic crosses the pair rather than
//! loopback. A node outside loopback joins only with the secret; a link taken down loses the
//! node within the heartbeat interval. Tests skip, saying why, where the kernel refuses
//! namespaces (they need root).

#[path = "support/built_library.rs"]
mod built_library;
#[path = "support/c_build.rs"]
mod c_build;
#[path = "support/errors.rs"]
mod errors;
#[path = "support/netns.rs"]
mod netns;
#[path = "support/ports.rs"]
mod ports;
#[path = "support/session_calls.rs"]
mod session_calls;
#[path = "support/worker_programs.rs"]
mod worker_programs;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use discovm::ErrorKind;
use discovm::session::{Session, SessionOptions};
use errors::assert_error;
use netns::{Namespace, run};
use ports::free_port;
use session_calls::{call, int};
use worker_programs::{node_program, test_worker_program};

const TOKEN: &str = "the namespaced tests' secret";

/// `discovm-node HOST PORT WORKERS` inside `ns`, with `token`.
fn node(ns: &Namespace, port: u16, workers: u32, token: Option<&str>) -> Child {
    let mut command = ns.command(node_program());
    command
        .args([&ns.host_ip, &port.to_string(), &workers.to_string()])
        .env("DISCOVM_WORKER", test_worker_program())
        .env_remove("DISCOVM_SESSION_TOKEN")
        .stderr(Stdio::piped());
    if let Some(token) = token {
        command.env("DISCOVM_SESSION_TOKEN", token);
    }
    command.spawn().expect("ip netns exec runs")
}

fn options(token: Option<&str>, heartbeat_ms: u64, timeout_ms: u64) -> SessionOptions {
    SessionOptions {
        timeout: Some(Duration::from_millis(timeout_ms)),
        worker_program: Some(test_worker_program().to_str().unwrap().to_string()),
        session_token: token.map(str::to_string),
        heartbeat: Some(Duration::from_millis(heartbeat_ms)),
        ..SessionOptions::default()
    }
}

fn wait_for(mut child: Child, within: Duration) -> Option<i32> {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node did not end within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_node_across_a_veth_pair_joins_with_the_secret_and_is_lost_when_its_link_goes_down() {
    let Some(ns) = Namespace::new() else { return };
    let port = free_port(&ns.host_ip);
    let node = node(&ns, port, 2, Some(TOKEN));
    let s = Session::new_socket(
        2,
        2,
        1,
        &ns.host_ip,
        port.into(),
        options(Some(TOKEN), 1000, 30_000),
    )
    .expect("the node joins across the pair");
    let add = s.get_global_func("proc.add").unwrap();
    let mut total = call(&s, &add, &[0.into(), 0.into()]);
    for _ in 0..200 {
        let args = [discovm::Any::from(total.clone()), 1.into()];
        let views: Vec<_> = args.iter().map(discovm::Any::view).collect();
        total = s.call(discovm::session::Target::All, &add, &views).unwrap();
    }
    for w in 0..4 {
        assert_eq!(int(s.get_register(total.reg(), w).unwrap()), 200);
    }
    // The link goes down: nothing more comes from the node.
    run("ip", &["link", "set", &ns.host_link, "down"]).unwrap();
    let started = Instant::now();
    let err = s.sync_worker(3).unwrap_err();
    assert_error(&err, ErrorKind::Worker, "node 1 (workers 2 and 3");
    assert_error(&err, ErrorKind::Worker, "nothing came from it for 1000 ms");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    s.shutdown().unwrap();
    // Its controller silent too, the node gives up and exits.
    assert_eq!(wait_for(node, Duration::from_secs(10)), Some(1));
}

#[test]
fn without_a_secret_a_node_off_loopback_is_turned_away() {
    let Some(ns) = Namespace::new() else { return };
    let port = free_port(&ns.host_ip);
    let node = node(&ns, port, 1, None);
    let mut opts = options(None, 2000, 1500);
    opts.session_token = None;
    // SAFETY: no other thread of this test binary reads the variable.
    unsafe { std::env::remove_var("DISCOVM_SESSION_TOKEN") };
    let err = Session::new_socket(2, 1, 1, &ns.host_ip, port.into(), opts)
        .err()
        .expect("nobody may join");
    assert_error(&err, ErrorKind::Timeout, "node(s) 1 of 2 did not join");
    let code = wait_for(node, Duration::from_secs(10));
    assert_ne!(code, Some(0));
}
