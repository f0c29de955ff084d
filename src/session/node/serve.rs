//! A node's side of a session across machines (`discovm-node HOST PORT WORKERS`): join the
//! controller, start the node's workers as processes, and relay frames between them until the
//! controller shuts the session down or is lost.
//!
//! The one idea: the node never reads what it relays. A frame from the controller goes, as it
//! came, into the ring of the worker it is routed to (or of every worker), and a thread per
//! worker sends that worker's replies back, routed. The one frame read is a sync of one worker,
//! which the node answers itself when it can, as a controller does for its worker processes.
//! What the node says of its own is its workers' records (the board), read from its arena.

use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use super::board::{self, Entry};
use super::trace::{self, Keeper};
use super::{BOARD_PERIOD, workers_devices};
use crate::channel::Deadline;
use crate::channel::SpinPolicy;
use crate::channel::deadline::{
    HANDSHAKE_STEP, HEARTBEAT, NODE_CONNECT, STOP_GRACE, timeout_from_ms,
};
use crate::net::auth::{self, Join, Secret};
use crate::net::routed::{self, ALL, ReadError, What};
use crate::object::{Any, Error, ErrorKind, Result};
use crate::session::options::SessionOptions;
use crate::session::process::{self, Here, ProcessLink};
use crate::session::signal::Signal;
use crate::session::state::SessionState;
use crate::session::worker_env::WorkerThreads;
use crate::sync::Mutex;
use crate::sync::time::Instant;
use crate::wire::{Frame, HEADER_SIZE, Kind, Limits, Value};
use crate::worker::activity::Snapshot;
use crate::worker::uploads::Uploads;

/// The variables a launcher gives each process its rank in (Slurm, Open MPI, PMI, torchrun).
pub(crate) const RANK_VARS: [&str; 4] =
    ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"];

/// What a node is started with.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NodeArgs {
    pub host: String,
    pub port: u16,
    pub workers: u32,
    pub rank: Option<u32>,
}

impl NodeArgs {
    /// Reads `HOST PORT WORKERS [--rank R]` (the program's arguments, without its name); the
    /// rank, when not given, comes from the launcher's environment, if any.
    pub fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<NodeArgs> {
        let usage = |why: &str| {
            Error::value(format!(
                "usage: discovm-node HOST PORT WORKERS [--rank R], in argv after the program's \
                 name ({why}; got {args:?}). The rank, when not given, is read from {}",
                RANK_VARS.join(", ")
            ))
        };
        let (host, port, workers, rest) = match args {
            [host, port, workers, rest @ ..] => (host, port, workers, rest),
            _ => return Err(usage("three arguments are needed")),
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| usage("PORT is not a port number"))?;
        let workers = workers
            .parse::<u32>()
            .ok()
            .filter(|&w| w > 0)
            .ok_or_else(|| usage("WORKERS is not a positive number"))?;
        let rank_text = match rest {
            [] => RANK_VARS.iter().find_map(|var| env(var)),
            [flag, rank] if flag == "--rank" => Some(rank.clone()),
            _ => return Err(usage("after WORKERS only `--rank R` may come")),
        };
        let rank = rank_text
            .map(|text| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| usage(&format!("the rank {text:?} is not a number")))
            })
            .transpose()?;
        Ok(NodeArgs {
            host: host.clone(),
            port,
            workers,
            rank,
        })
    }
}

/// Connects to the controller, retrying while it does not listen yet.
fn connect(args: &NodeArgs) -> Result<TcpStream> {
    let until = Deadline::after(Some(NODE_CONNECT));
    loop {
        match TcpStream::connect((args.host.as_str(), args.port)) {
            Ok(stream) => return Ok(stream),
            Err(e) if !until.passed() && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                // Not channel::wait: nothing signals that a controller began to listen.
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(Error::runtime(format!(
                    "cannot reach the controller at {}:{}: {e}",
                    args.host, args.port
                )));
            }
        }
    }
}

/// The connection to the controller, shared by the threads that write to it.
type Writer = Arc<Mutex<BufWriter<TcpStream>>>;

fn send(writer: &Writer, route: u32, what: What, frame: &[u8]) -> std::io::Result<()> {
    send_with(writer, |out| routed::write(out, route, what, frame))
}

/// Sends the message that `write` writes.
fn send_with(
    writer: &Writer,
    write: impl FnOnce(&mut BufWriter<TcpStream>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut writer = writer.lock().unwrap_or_else(PoisonError::into_inner);
    write(&mut writer)?;
    writer.flush()
}

/// What sends the node's trace messages on `writer`.
fn trace_sender(writer: &Writer) -> impl Fn(u32, u32, u64, &[u8]) -> std::io::Result<()> + '_ {
    move |what, local, stamp, body| {
        send_with(writer, |out| {
            routed::write_trace(out, what, local, stamp, body)
        })
    }
}

/// Tells the controller that the worker at `local` is gone, and why (as far as it can).
fn send_death(writer: &Writer, local: u32, error: Error) {
    let mut frame = Vec::new();
    if (Frame::<Any>::Err { request: 0, error })
        .encode(&mut frame)
        .is_ok()
    {
        let _ = send(writer, local, What::Death, &frame);
    }
}

/// Runs a node until the controller shuts the session down (Ok) or is lost (the error says
/// how). `args` are the program's arguments without its name; the node's workers run
/// `worker_program` (`None`: `$DISCOVM_WORKER`, else `discovm-worker`) with `worker_args` first
/// on their command lines.
pub(crate) fn serve(
    args: &[String],
    worker_program: Option<String>,
    worker_args: Vec<String>,
) -> Result<()> {
    let args = NodeArgs::parse(args, |var| std::env::var(var).ok())?;
    let mut stream = connect(&args)?;
    let io = |e: std::io::Error| Error::runtime(format!("the connection to the controller: {e}"));
    stream.set_nodelay(true).map_err(io)?;
    stream.set_read_timeout(Some(HANDSHAKE_STEP)).map_err(io)?;
    let join = Join {
        rank: args.rank,
        workers: args.workers,
    };
    let welcome = auth::join(&mut stream, &Secret::from_env(), join)?;
    let heartbeat = timeout_from_ms(welcome.heartbeat_ms).unwrap_or(HEARTBEAT);
    stream.set_read_timeout(Some(heartbeat)).map_err(io)?;
    let (rank, count) = (welcome.rank as usize, welcome.workers_per_node as usize);
    // A setup the node cannot follow fails its start, which the controller hears of below.
    let threads = WorkerThreads::from_value(welcome.setup.threads_per_worker.into());
    let options = SessionOptions {
        timeout: timeout_from_ms(welcome.timeout_ms),
        worker_program,
        worker_args,
        worker_imports: welcome.setup.imports,
        threads_per_worker: threads.clone().unwrap_or_default(),
        ..SessionOptions::default()
    };
    let here = Here {
        first: rank * count,
        count,
    };
    let writer: Writer = Arc::new(Mutex::new(BufWriter::new(stream.try_clone().map_err(io)?)));
    let devices = threads.and_then(|_| workers_devices(welcome.device_type, count));
    let started = devices.and_then(|devices| {
        let uploads = Uploads::create()?;
        let (links, watcher) = process::start_workers(
            welcome.num_nodes as usize * count,
            welcome.num_groups as usize,
            &options,
            &devices,
            (here, Some(uploads.dir())),
            Arc::new(SessionState::new()),
        )?;
        Ok((uploads, links, watcher))
    });
    let (uploads, links, _watcher) = match started {
        Ok(started) => started,
        Err(error) => {
            // The controller hears why, as the death of the node's first worker.
            let error = error.context(format_args!("starting the workers of node {rank}"));
            send_death(&writer, 0, error.clone());
            return Err(error);
        }
    };
    let links: Arc<Vec<ProcessLink>> = Arc::new(links);
    for local in 0..count {
        let (links, writer) = (links.clone(), writer.clone());
        std::thread::Builder::new()
            .name(format!("discovm-relay-{local}"))
            .spawn(move || relay_replies(&links[local], local as u32, &writer))
            .map_err(|e| Error::runtime(format!("cannot start a relay thread: {e}")))?;
    }
    let (reported, beats) = (links.clone(), writer.clone());
    let period = BOARD_PERIOD.min(heartbeat / 4);
    std::thread::Builder::new()
        .name("discovm-board".into())
        .spawn(move || send_boards(&reported, &beats, period))
        .map_err(|e| Error::runtime(format!("cannot start the board's thread: {e}")))?;

    let keeper = Keeper::new(links.clone());
    let relayed = relay_requests(
        &mut BufReader::new(&stream),
        &links,
        &writer,
        (&uploads, &keeper),
        heartbeat,
    );
    drop(keeper);
    // After a shutdown the workers stop on their own; a lost controller's are killed now.
    let grace = match &relayed {
        Ok(()) => options.timeout.unwrap_or(STOP_GRACE),
        Err(_) => Duration::ZERO,
    };
    let deadline = Instant::now() + grace;
    for link in links.iter() {
        let _ = link.join(deadline);
    }
    let _ = stream.shutdown(Shutdown::Both);
    relayed
}

/// Copies frames from the controller into the workers' rings until the controller's `Shutdown`
/// went to every worker, or the controller is lost. A frame for one worker goes straight from
/// the connection into its ring, part by part as it arrives; a frame for every worker is read
/// first, then copied into each ring. Uploads are stored, and trace requests answered by the
/// node's `keeper`.
fn relay_requests(
    stream: &mut impl Read,
    links: &[ProcessLink],
    writer: &Writer,
    (uploads, keeper): (&Uploads, &Keeper),
    heartbeat: Duration,
) -> Result<()> {
    let limits = Limits::default();
    let spin = SpinPolicy::default();
    let lost = |error: ReadError| match error {
        ReadError::Closed => Error::runtime("the controller closed the connection"),
        ReadError::Silent => Error::runtime(format!(
            "nothing came from the controller for {} ms (the heartbeat interval)",
            heartbeat.as_millis()
        )),
        ReadError::Bad(error) => Error::runtime(format!(
            "the controller sent a bad message: {}",
            error.message
        )),
    };
    // One buffer for every message: a large frame's pages are touched once.
    let mut buffer = Vec::new();
    loop {
        let head = routed::read_head(stream, &limits).map_err(lost)?;
        match head.what {
            What::Heartbeat => continue,
            What::Death | What::Board => {
                return Err(Error::runtime(format!(
                    "the controller sent a message only nodes send ({:?})",
                    head.what
                )));
            }
            What::Signal => {
                let message =
                    routed::read_rest(stream, head, std::mem::take(&mut buffer)).map_err(lost)?;
                let signal = Signal::read(&message.frame).map_err(|e| {
                    Error::runtime(format!("the controller sent a bad signal: {}", e.message))
                })?;
                match message.route {
                    ALL => links.iter().for_each(|link| signal.apply(link.signals())),
                    w => match links.get(w as usize) {
                        Some(link) => signal.apply(link.signals()),
                        None => {
                            return Err(Error::runtime(format!(
                                "the controller sent a signal to worker {w:#x} of {}",
                                links.len()
                            )));
                        }
                    },
                }
                buffer = message.frame;
                continue;
            }
            What::Trace => {
                let message =
                    routed::read_rest(stream, head, std::mem::take(&mut buffer)).map_err(lost)?;
                keeper
                    .take(&message.frame, &trace_sender(writer))
                    .map_err(|e| {
                        Error::runtime(format!("the controller's trace request: {}", e.message))
                    })?;
                buffer = message.frame;
                continue;
            }
            What::Upload => {
                let message =
                    routed::read_rest(stream, head, std::mem::take(&mut buffer)).map_err(lost)?;
                // A module that fails its check is not kept: loading it fails on the workers.
                if let Err(error) = uploads.store(&message.frame) {
                    eprintln!("discovm node: {}", error.message);
                }
                buffer = message.frame;
                continue;
            }
            What::Frame => {}
        }
        let Some((header, header_bytes)) = head.header else {
            return Err(Error::runtime("a routed frame came without its header"));
        };
        let shutdown = header.kind == Kind::Shutdown;
        let targets = match head.route {
            ALL => 0..links.len(),
            w if (w as usize) < links.len() => w as usize..w as usize + 1,
            w => {
                return Err(Error::runtime(format!(
                    "the controller routed a frame to worker {w:#x} of {}",
                    links.len()
                )));
            }
        };
        if head.route != ALL && !shutdown {
            let (link, route) = (&links[targets.start], head.route);
            if header.kind == Kind::Sync {
                let message =
                    routed::read_rest(stream, head, std::mem::take(&mut buffer)).map_err(lost)?;
                sync_one(link, route, &message.frame, writer, &limits, spin);
                buffer = message.frame;
            } else {
                relay_one(stream, link, &header_bytes, header.frame_len(), spin).map_err(lost)?;
            }
            continue;
        }
        let message = routed::read_rest(stream, head, std::mem::take(&mut buffer)).map_err(lost)?;
        for link in &links[targets.clone()] {
            // A worker that is gone is reported by its relay thread.
            let _ = if shutdown {
                link.send_shutdown(spin, Deadline::NEVER)
            } else {
                link.send_encoded(&message.frame, spin, Deadline::NEVER)
            };
        }
        if shutdown && targets.len() == links.len() {
            return Ok(());
        }
        buffer = message.frame;
    }
}

/// Copies a frame of `len` bytes whose `header` was read from the connection into `link`'s
/// ring, the rest as it arrives.
/// If the worker is gone (its relay thread reports it), the rest of the frame is read and
/// dropped, so the next message is read from its start.
fn relay_one(
    stream: &mut impl Read,
    link: &ProcessLink,
    header: &[u8; HEADER_SIZE],
    len: usize,
    spin: SpinPolicy,
) -> std::result::Result<(), ReadError> {
    let mut filled = 0;
    let mut failed_read = None;
    let sent = link.send_from(len, spin, Deadline::NEVER, |part| {
        // The header, already read, starts the first part (a part holds more than a header).
        let at = if filled == 0 {
            part[..HEADER_SIZE].copy_from_slice(header);
            HEADER_SIZE
        } else {
            0
        };
        if let Err(error) = routed::read_exact(stream, &mut part[at..]) {
            failed_read = Some(error);
            return Err(Error::runtime("the connection failed within a frame"));
        }
        filled += part.len();
        Ok(())
    });
    match (failed_read, sent) {
        (Some(error), _) => Err(error),
        (None, Ok(())) => Ok(()),
        (None, Err(_)) => routed::skip(stream, len - filled.max(HEADER_SIZE)),
    }
}

/// Answers the sync `frame` of the worker at `local` here when the worker has run everything
/// relayed to it and has nothing to report ([`ProcessLink::in_sync`]), saving the trip through
/// its rings; relays it otherwise.
fn sync_one(
    link: &ProcessLink,
    local: u32,
    frame: &[u8],
    writer: &Writer,
    limits: &Limits,
    spin: SpinPolicy,
) {
    if let Ok(Frame::Sync { request }) = Frame::decode(frame, limits)
        && link.in_sync()
    {
        let mut reply = Vec::new();
        let done = Frame::<Any>::Ok {
            request,
            value: Value::Plain(Any::None),
        };
        if done.encode(&mut reply).is_ok() {
            // A lost controller ends the node through its reader.
            let _ = send(writer, local, What::Frame, &reply);
            return;
        }
    }
    // A worker that is gone is reported by its relay thread.
    let _ = link.send_encoded(frame, spin, Deadline::NEVER);
}

/// Tells the controller every `period`, until it is gone, what the node's workers do: the
/// records that changed since they were last sent (the time in a state aside, which grows at
/// every look), or a heartbeat when none did.
fn send_boards(links: &[ProcessLink], writer: &Writer, period: Duration) {
    let mut sent: Vec<Option<Snapshot>> = vec![None; links.len()];
    let mut entries = Vec::new();
    loop {
        // A record its worker is changing is read at the next look.
        let changed: Vec<Entry> = links
            .iter()
            .zip(&sent)
            .enumerate()
            .filter_map(|(local, (link, last))| {
                let report = link.activity().snapshot()?;
                let same = last.as_ref().is_some_and(|last| last.same_as(&report));
                (!same).then(|| Entry {
                    local: local as u32,
                    pid: u32::try_from(link.pid()).unwrap_or_default(),
                    report,
                })
            })
            .collect();
        let told = if changed.is_empty() {
            send(writer, 0, What::Heartbeat, &[])
        } else {
            entries.clear();
            board::encode(&changed, &mut entries);
            send_with(writer, |out| routed::write_board(out, &entries))
        };
        if told.is_err() {
            return; // the controller is gone
        }
        for entry in changed {
            sent[entry.local as usize] = Some(entry.report);
        }
        // A period, not a wait: nothing is awaited between looks.
        std::thread::sleep(period);
    }
}

/// Sends the replies of the worker at `local` to the controller until it stops; a worker that
/// dies first is reported once, with why.
fn relay_replies(link: &ProcessLink, local: u32, writer: &Writer) {
    let spin = SpinPolicy::default();
    loop {
        match link.recv_raw(spin, |frame| send(writer, local, What::Frame, frame)) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return, // the controller is gone
            Err(error) => {
                if error.kind != ErrorKind::SessionClosed {
                    trace::send_last_words(link, local, &trace_sender(writer));
                    send_death(writer, local, error);
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn node_arguments_and_the_launchers_rank() {
        let none = |_: &str| None;
        assert_eq!(
            NodeArgs::parse(&args(&["10.0.0.1", "5000", "2"]), none).unwrap(),
            NodeArgs {
                host: "10.0.0.1".into(),
                port: 5000,
                workers: 2,
                rank: None
            }
        );
        let slurm = |var: &str| (var == "SLURM_PROCID").then(|| "3".to_string());
        assert_eq!(
            NodeArgs::parse(&args(&["h", "1", "1"]), slurm)
                .unwrap()
                .rank,
            Some(3)
        );
        // The argument wins over the environment.
        assert_eq!(
            NodeArgs::parse(&args(&["h", "1", "1", "--rank", "2"]), slurm)
                .unwrap()
                .rank,
            Some(2)
        );
        for (bad, why) in [
            (&["h", "1"][..], "three arguments"),
            (&["h", "port", "1"], "PORT is not a port number"),
            (&["h", "1", "0"], "WORKERS is not a positive number"),
            (&["h", "1", "1", "--rank"], "only `--rank R`"),
            (
                &["h", "1", "1", "--rank", "x"],
                "the rank \"x\" is not a number",
            ),
        ] {
            let error = NodeArgs::parse(&args(bad), none).unwrap_err();
            assert_eq!(error.kind, ErrorKind::Value);
            assert!(error.message.contains(why), "{why}: {error}");
        }
    }
}
