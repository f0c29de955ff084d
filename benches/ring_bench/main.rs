//! Shared-memory ring benchmark: round trips and a one-way stream over two rings, between two
//! threads and between two processes, each against the in-process channel measured in the
//! same rounds (the ring's figure divided by the channel's).
//!
//! ```sh
//! cargo bench --bench ring_bench               # 9 rounds, about 10 s on a 2-CPU machine
//! cargo bench --bench ring_bench -- --quick    # 3 short rounds, a smoke test
//! ```
//!
//! A round measures every row once, in an order that rotates from round to round; a cell is
//! the median of the round figures, with the best round in brackets. Absolute times on small
//! virtual machines drift by up to 10x between runs; compare the ratios.

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use discovm::channel::ring::{Consumer, Producer, init_ring, ring_bytes};
use discovm::channel::shm::SharedMemory;
use discovm::channel::{Channel, Deadline, SpinPolicy};

const RING: usize = 64 << 10;
/// A zero-length frame ends an echo loop.
const STOP: &[u8] = &[];

fn no_check() -> discovm::Result<()> {
    Ok(())
}

/// The two rings of one benchmark pair, in one mapping: "out" at 0, "back" after it.
fn two_rings() -> Arc<SharedMemory> {
    let bytes = ring_bytes(RING).unwrap();
    let mut memory = SharedMemory::create("ring-bench", 2 * bytes).unwrap();
    init_ring(&mut memory, 0, RING).unwrap();
    init_ring(&mut memory, bytes, RING).unwrap();
    Arc::new(memory)
}

/// Receives frames on "out" and sends each back on "back" until a zero-length one.
fn echo(memory: Arc<SharedMemory>, policy: SpinPolicy, check: impl Fn() -> discovm::Result<()>) {
    let mut from = Consumer::attach(memory.clone(), 0).unwrap();
    let mut to = Producer::attach(memory, ring_bytes(RING).unwrap()).unwrap();
    loop {
        let frame = from.recv(policy, Deadline::NEVER, &check).unwrap();
        if frame.is_empty() {
            return;
        }
        to.send(&frame, policy, Deadline::NEVER, &check).unwrap();
    }
}

/// The controller's side of a ring pair, and the echo at the other end.
struct RingPair {
    out: Producer,
    back: Consumer,
    peer: Peer,
}

enum Peer {
    Thread(thread::JoinHandle<()>),
    Process(Child),
}

impl RingPair {
    fn threads(policy: SpinPolicy) -> RingPair {
        let memory = two_rings();
        let echoed = memory.clone();
        let peer = Peer::Thread(thread::spawn(move || echo(echoed, policy, no_check)));
        RingPair::ends(memory, peer)
    }

    fn process(policy: SpinPolicy) -> RingPair {
        let memory = two_rings();
        let mut command = Command::new(std::env::current_exe().unwrap());
        let fd = memory.share_with_child(&mut command);
        command
            .args([
                "--echo-child",
                &fd.to_string(),
                &policy.budget.as_nanos().to_string(),
            ])
            .stdin(Stdio::null());
        let peer = Peer::Process(command.spawn().unwrap());
        RingPair::ends(memory, peer)
    }

    fn ends(memory: Arc<SharedMemory>, peer: Peer) -> RingPair {
        RingPair {
            out: Producer::attach(memory.clone(), 0).unwrap(),
            back: Consumer::attach(memory, ring_bytes(RING).unwrap()).unwrap(),
            peer,
        }
    }

    fn round_trip(&mut self, frame: &[u8], policy: SpinPolicy) {
        self.out
            .send(frame, policy, Deadline::NEVER, no_check)
            .unwrap();
        let echo = self.back.recv(policy, Deadline::NEVER, no_check).unwrap();
        assert_eq!(echo.len(), frame.len());
    }

    /// Sends `count` frames while receiving their echoes, `window` in flight.
    fn stream(&mut self, frame: &[u8], count: usize, window: usize, policy: SpinPolicy) {
        let (mut sent, mut received) = (0, 0);
        while received < count {
            while sent < count && sent - received < window {
                self.out
                    .send(frame, policy, Deadline::NEVER, no_check)
                    .unwrap();
                sent += 1;
            }
            drop(self.back.recv(policy, Deadline::NEVER, no_check).unwrap());
            received += 1;
        }
    }

    fn stop(mut self, policy: SpinPolicy) {
        self.out
            .send(STOP, policy, Deadline::NEVER, no_check)
            .unwrap();
        match self.peer {
            Peer::Thread(handle) => handle.join().unwrap(),
            Peer::Process(ref mut child) => assert!(child.wait().unwrap().success()),
        }
    }
}

/// The same shapes over two in-process channels of `u64`.
struct ChannelPair {
    out: Arc<Channel<u64>>,
    back: Arc<Channel<u64>>,
    peer: thread::JoinHandle<()>,
}

impl ChannelPair {
    fn new(policy: SpinPolicy) -> ChannelPair {
        let out = Arc::new(Channel::new(1024));
        let back = Arc::new(Channel::new(1024));
        back.set_consumer(thread::current());
        let (from, to) = (out.clone(), back.clone());
        let peer = thread::spawn(move || {
            from.set_consumer(thread::current());
            loop {
                let value = from.recv(policy);
                if value == u64::MAX {
                    return;
                }
                to.send(value, policy, Deadline::NEVER, no_check).unwrap();
            }
        });
        ChannelPair { out, back, peer }
    }

    fn round_trip(&self, policy: SpinPolicy) {
        self.out.send(1, policy, Deadline::NEVER, no_check).unwrap();
        assert_eq!(self.back.recv(policy), 1);
    }

    fn stream(&self, count: usize, window: usize, policy: SpinPolicy) {
        let (mut sent, mut received) = (0, 0);
        while received < count {
            while sent < count && sent - received < window {
                self.out.send(7, policy, Deadline::NEVER, no_check).unwrap();
                sent += 1;
            }
            self.back.recv(policy);
            received += 1;
        }
    }

    fn stop(self, policy: SpinPolicy) {
        self.out
            .send(u64::MAX, policy, Deadline::NEVER, no_check)
            .unwrap();
        self.peer.join().unwrap();
    }
}

/// The rows of the table, in the order printed.
#[derive(Clone, Copy, Debug)]
enum Row {
    ChannelTrip,
    ThreadTrip8,
    ProcessTrip8,
    ProcessTrip1K,
    ChannelParkTrip,
    ThreadParkTrip8,
    ProcessParkTrip8,
    ChannelStream,
    ThreadStream64,
    ProcessStream64,
}

const ROWS: [Row; 10] = [
    Row::ChannelTrip,
    Row::ThreadTrip8,
    Row::ProcessTrip8,
    Row::ProcessTrip1K,
    Row::ChannelParkTrip,
    Row::ThreadParkTrip8,
    Row::ProcessParkTrip8,
    Row::ChannelStream,
    Row::ThreadStream64,
    Row::ProcessStream64,
];

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::ChannelTrip => "round trip, channel (u64)",
            Row::ThreadTrip8 => "round trip, ring, threads, 8 B",
            Row::ProcessTrip8 => "round trip, ring, processes, 8 B",
            Row::ProcessTrip1K => "round trip, ring, processes, 1 KiB",
            Row::ChannelParkTrip => "round trip parking at once, channel",
            Row::ThreadParkTrip8 => "round trip parking at once, ring, threads",
            Row::ProcessParkTrip8 => "round trip parking at once, ring, processes",
            Row::ChannelStream => "stream, 32 in flight, channel (u64)",
            Row::ThreadStream64 => "stream, 32 in flight, ring, threads, 64 B",
            Row::ProcessStream64 => "stream, 32 in flight, ring, processes, 64 B",
        }
    }

    /// The channel row this row is divided by.
    fn baseline(self) -> Row {
        match self {
            Row::ChannelTrip | Row::ThreadTrip8 | Row::ProcessTrip8 | Row::ProcessTrip1K => {
                Row::ChannelTrip
            }
            Row::ChannelParkTrip | Row::ThreadParkTrip8 | Row::ProcessParkTrip8 => {
                Row::ChannelParkTrip
            }
            Row::ChannelStream | Row::ThreadStream64 | Row::ProcessStream64 => Row::ChannelStream,
        }
    }

    /// Nanoseconds per operation (a round trip, or a frame streamed), one figure per round.
    fn measure(self, scale: usize) -> f64 {
        let spin = SpinPolicy::default();
        let park = SpinPolicy {
            budget: Duration::ZERO,
        };
        let trips = 20_000 * scale;
        let park_trips = 2_000 * scale;
        let frames = 200_000 * scale;
        let warm = |n: usize| n / 10;
        let timed = |n: usize, mut op: Box<dyn FnMut(usize) + '_>| {
            op(warm(n));
            let start = Instant::now();
            op(n);
            start.elapsed().as_nanos() as f64 / n as f64
        };
        match self {
            Row::ChannelTrip | Row::ChannelParkTrip | Row::ChannelStream => {
                let policy = if matches!(self, Row::ChannelParkTrip) {
                    park
                } else {
                    spin
                };
                let pair = ChannelPair::new(policy);
                let ns = match self {
                    Row::ChannelTrip => timed(
                        trips,
                        Box::new(|n| (0..n).for_each(|_| pair.round_trip(policy))),
                    ),
                    Row::ChannelParkTrip => timed(
                        park_trips,
                        Box::new(|n| (0..n).for_each(|_| pair.round_trip(policy))),
                    ),
                    _ => timed(frames, Box::new(|n| pair.stream(n, 32, policy))),
                };
                pair.stop(policy);
                ns
            }
            _ => {
                let policy = if matches!(self, Row::ThreadParkTrip8 | Row::ProcessParkTrip8) {
                    park
                } else {
                    spin
                };
                let mut pair = match self {
                    Row::ThreadTrip8 | Row::ThreadParkTrip8 | Row::ThreadStream64 => {
                        RingPair::threads(policy)
                    }
                    _ => RingPair::process(policy),
                };
                let ns = match self {
                    Row::ThreadTrip8 | Row::ProcessTrip8 => timed(
                        trips,
                        Box::new(|n| (0..n).for_each(|_| pair.round_trip(&[1; 8], policy))),
                    ),
                    Row::ProcessTrip1K => timed(
                        trips,
                        Box::new(|n| (0..n).for_each(|_| pair.round_trip(&[1; 1024], policy))),
                    ),
                    Row::ThreadParkTrip8 | Row::ProcessParkTrip8 => timed(
                        park_trips,
                        Box::new(|n| (0..n).for_each(|_| pair.round_trip(&[1; 8], policy))),
                    ),
                    _ => timed(frames, Box::new(|n| pair.stream(&[1; 64], n, 32, policy))),
                };
                pair.stop(policy);
                ns
            }
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--echo-child") {
        let fd: i32 = args[at + 1].parse().unwrap();
        let budget = Duration::from_nanos(args[at + 2].parse().unwrap());
        // SAFETY: the parent passed this descriptor for this process to own.
        let memory = SharedMemory::from_fd(unsafe { OwnedFd::from_raw_fd(fd) }).unwrap();
        let parent = std::os::unix::process::parent_id();
        echo(Arc::new(memory), SpinPolicy { budget }, || {
            if std::os::unix::process::parent_id() == parent {
                Ok(())
            } else {
                Err(discovm::Error::runtime("the benchmark is gone"))
            }
        });
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let (rounds, scale) = if quick { (3, 1) } else { (9, 3) };

    let mut figures = vec![Vec::new(); ROWS.len()];
    for round in 0..rounds {
        for k in 0..ROWS.len() {
            let i = (k + round) % ROWS.len();
            figures[i].push(ROWS[i].measure(scale));
        }
    }
    let medians: Vec<f64> = figures.iter_mut().map(|f| median(&mut f.clone())).collect();
    println!(
        "{:<46} {:>12} {:>12} {:>14}",
        "ns per operation", "median", "(best)", "/ channel"
    );
    for (i, row) in ROWS.iter().enumerate() {
        let best = figures[i].iter().copied().fold(f64::INFINITY, f64::min);
        let base = medians[row.baseline() as usize];
        let ratio = medians[i] / base;
        // Ratios of each round, so that the spread shows.
        let mut per_round: Vec<f64> = figures[i]
            .iter()
            .zip(&figures[row.baseline() as usize])
            .map(|(a, b)| a / b)
            .collect();
        let ratio_median = median(&mut per_round);
        println!(
            "{:<46} {:>12.0} {:>12.0} {:>7.2}x ({:.2}x)",
            row.label(),
            medians[i],
            best,
            ratio,
            ratio_median,
        );
    }
    println!(
        "\n{rounds} rounds; ratio: median over the channel's median (in brackets: the median of \
         the per-round ratios)."
    );
}
