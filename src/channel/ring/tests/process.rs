//! The ring between two processes: the test binary starts itself again as a child that maps
//! the parent's memfd (inherited through exec) and serves two rings in it, one each way. The
//! parent's waits watch the child with `try_wait` (waitpid with WNOHANG) in their check, and
//! the child's watch its parent, so neither waits long for a peer that is gone.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use super::{PATIENCE, deadline, fill, holds};
use crate::channel::ring::{Consumer, Producer, init_ring, ring_bytes};
use crate::channel::shm::SharedMemory;
use crate::channel::wait::SpinPolicy;
use crate::object::{Error, ErrorKind, Result};

/// Tells the child entry point below what to do: `FD:FRAMES:EXIT_CODE:PARENT_PID`.
const CHILD_ENV: &str = "DISCOVM_RING_TEST_CHILD";
/// The parent's ring to the child: small, so the parent often waits for room.
const TO_CHILD: usize = 4096;
/// The child's ring back.
const FROM_CHILD: usize = 64 << 10;
/// At most this many frames are in flight; their records fit the ring back, so the child
/// never waits for the parent while the parent waits for it.
const WINDOW: u64 = 8;
/// One frame at a time: the parent waits for each echo before it sends the next.
const PING_PONG: u64 = 1;
/// The largest frame sent.
const MAX_LEN: u64 = 1024;

fn frame_len(i: u64) -> usize {
    // Every length up to MAX_LEN, in an order that mixes short and long.
    (i.wrapping_mul(7919) % (MAX_LEN + 1)) as usize
}

/// Runs only in the child that the tests below start (the environment says so); in a normal
/// test run it returns at once.
#[test]
fn child_process_entry_point() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let fields: Vec<i64> = spec.split(':').map(|f| f.parse().unwrap()).collect();
    let [fd, frames, exit_code, parent] = fields[..] else {
        panic!("{CHILD_ENV}={spec}");
    };
    // SAFETY: the parent passed this descriptor for this process to own; nothing else in it
    // knows the number.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let memory = Arc::new(SharedMemory::from_fd(fd).unwrap());
    let mut from_parent = Consumer::attach(memory.clone(), 0).unwrap();
    let mut to_parent = Producer::attach(memory, ring_bytes(TO_CHILD).unwrap()).unwrap();
    let parent_alive = || {
        if i64::from(std::os::unix::process::parent_id()) == parent {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Worker, "the parent process is gone"))
        }
    };
    for _ in 0..frames {
        let frame = from_parent
            .recv(SpinPolicy::default(), deadline(), parent_alive)
            .unwrap();
        to_parent
            .send(&frame, SpinPolicy::default(), deadline(), parent_alive)
            .unwrap();
    }
    if exit_code != 0 {
        std::process::exit(exit_code as i32);
    }
}

/// A child process, killed and reaped if the test ends before it does.
struct Worker(Option<Child>);

impl Worker {
    fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is still ours")
    }

    /// The check the parent's waits run: the child has not exited.
    fn alive(&mut self) -> Result<()> {
        let child = self.child();
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::new(
                ErrorKind::Worker,
                format!("worker process {} ended ({status})", child.id()),
            )),
            Err(e) => Err(Error::runtime(format!("waitpid({}): {e}", child.id()))),
        }
    }

    /// Waits for the child to exit and returns its status and what it printed.
    fn finish(mut self) -> (std::process::ExitStatus, String) {
        let output = self.0.take().unwrap().wait_with_output().unwrap();
        let printed = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status, printed)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Shared memory with the two rings, the parent's ends of them, and a child serving them that
/// echoes `frames` frames and then exits with `exit_code`.
fn start(frames: u64, exit_code: i32) -> (Producer, Consumer, Worker) {
    let back = ring_bytes(TO_CHILD).unwrap();
    let mut memory =
        SharedMemory::create("ring-echo", back + ring_bytes(FROM_CHILD).unwrap()).unwrap();
    init_ring(&mut memory, 0, TO_CHILD).unwrap();
    init_ring(&mut memory, back, FROM_CHILD).unwrap();
    let memory = Arc::new(memory);
    let to_child = Producer::attach(memory.clone(), 0).unwrap();
    let from_child = Consumer::attach(memory.clone(), back).unwrap();

    let entry = concat!(module_path!(), "::child_process_entry_point");
    let entry = entry.split_once("::").unwrap().1; // without the crate's name
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([entry, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let fd = memory.share_with_child(&mut command);
    command.env(
        CHILD_ENV,
        format!("{fd}:{frames}:{exit_code}:{}", std::process::id()),
    );
    let worker = Worker(Some(command.spawn().unwrap()));
    (to_child, from_child, worker)
}

/// Streams `total` frames through the child, at most `window` in flight, and checks every
/// echo, as long as the child answers; returns how many came back, and the error that ended
/// the stream early.
fn stream(
    to_child: &mut Producer,
    from_child: &mut Consumer,
    worker: &mut Worker,
    total: u64,
    window: u64,
) -> (u64, Option<Error>) {
    let (mut sent, mut received) = (0, 0);
    while received < total {
        while sent < total && sent - received < window {
            let len = frame_len(sent);
            let seed = sent;
            let result = to_child.send_with(
                len,
                SpinPolicy::default(),
                deadline(),
                || worker.alive(),
                |buf| fill(buf, seed),
            );
            if let Err(error) = result {
                return (received, Some(error));
            }
            sent += 1;
        }
        match from_child.recv(SpinPolicy::default(), deadline(), || worker.alive()) {
            Ok(frame) => {
                assert_eq!(frame.len(), frame_len(received), "frame {received}");
                assert!(holds(&frame, received), "frame {received}'s bytes");
            }
            Err(error) => return (received, Some(error)),
        }
        received += 1;
    }
    (received, None)
}

#[test]
fn a_child_process_echoes_every_frame_in_order() {
    const FRAMES: u64 = 100_000;
    let (mut to_child, mut from_child, mut worker) = start(FRAMES, 0);
    let (received, error) = stream(&mut to_child, &mut from_child, &mut worker, FRAMES, WINDOW);
    let (status, printed) = worker.finish();
    assert_eq!(
        (received, error),
        (FRAMES, None),
        "the child printed:\n{printed}"
    );
    assert!(status.success(), "the child {status}:\n{printed}");
}

/// The child echoes a thousand frames and exits: the parent's wait for the next echo ends
/// through its check, with the child's exit status, long before its deadline. (The wait for
/// room ends the same way: the next test.)
#[test]
fn a_child_that_exits_mid_stream_ends_the_parents_wait() {
    const ECHOED: u64 = 1_000;
    let started = std::time::Instant::now();
    let (mut to_child, mut from_child, mut worker) = start(ECHOED, 3);
    let pid = worker.child().id();
    let (received, error) = stream(
        &mut to_child,
        &mut from_child,
        &mut worker,
        100_000,
        PING_PONG,
    );
    let error = error.expect("the stream ended early");
    assert_eq!(error.kind, ErrorKind::Worker);
    assert_eq!(
        error.message,
        format!("worker process {pid} ended (exit status: 3)")
    );
    assert_eq!(received, ECHOED);
    assert!(
        started.elapsed() < PATIENCE,
        "ended by the check, not the deadline"
    );
    let (status, printed) = worker.finish();
    assert_eq!(status.code(), Some(3), "{printed}");
}

/// A child that never reads: the parent fills the ring, and its wait for room ends through
/// its check once the child has exited.
#[test]
fn a_child_that_exits_ends_the_parents_wait_for_room() {
    let (mut to_child, _from_child, mut worker) = start(0, 4);
    let pid = worker.child().id();
    let mut sent = 0;
    let error = loop {
        let frame = [sent as u8; 500];
        match to_child.send(&frame, SpinPolicy::default(), deadline(), || worker.alive()) {
            Ok(()) => sent += 1,
            Err(error) => break error,
        }
        assert!(sent <= TO_CHILD, "the ring took more than it holds");
    };
    assert_eq!(
        error.message,
        format!("worker process {pid} ended (exit status: 4)")
    );
    assert_eq!(sent, TO_CHILD / 512, "the ring was full");
}
