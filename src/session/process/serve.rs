//! The worker's side of a worker process: the main loop of `discovm-worker` and of any program
//! that calls `dvm_worker_main`. It maps the rings its controller passed it, and runs each
//! request frame through the same worker a thread of a threaded session runs its messages
//! through, answering the requests that wait for a reply.
//!
//! The one idea: a frame becomes the in-process messages it was encoded from (a call that
//! carries frees, the frees first), with a reply slot the worker fills as it would for a
//! waiting thread; the loop then sends what it holds back as a reply frame. Nothing of the
//! worker itself knows it is in a process of its own.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::abi::DLDevice;
use crate::channel::Deadline;
use crate::channel::SpinPolicy;
use crate::channel::deadline::{timeout_from_ms, timeout_ms};
use crate::channel::ring::{Consumer, MAX_GATHERED, Producer, ring_bytes};
use crate::channel::shm::SharedMemory;
use crate::device::cpu::{HostTensor, pin_current_thread};
use crate::object::{Any, Error, Result, Tensor};
use crate::os::FIRST_INHERITED_FD;
use crate::os::exit_with_parent;
use crate::session::worker_env::IMPORTS_VAR;
use crate::wire::{ArenaTensor, Frame, Limits, Value};
use crate::worker::arena::{self, Arena};
use crate::worker::completion::Completion;
use crate::worker::message::{
    Arg, CopyDirection, GlobalLookup, HostCopy, Message, ModuleLookup, Reply, Store,
};
use crate::worker::{Exited, Placed, Worker, WorkerInfo, WorkerShared};

/// The first argument of a worker process, naming the layout of the arguments after it.
pub(crate) const ARGS_VERSION: &str = "--discovm-worker-v4";

/// Where a worker process finds its place in the session: what the controller passes it.
#[derive(Clone, Debug)]
pub(crate) struct WorkerArgs {
    pub info: WorkerInfo,
    /// How long it spins and yields before parking while it waits for requests.
    pub spin: SpinPolicy,
    /// The CPU to pin itself to, if any.
    pub cpu: Option<usize>,
    /// The bound on its waits in collectives; none without a session timeout.
    pub timeout: Option<Duration>,
    /// The data bytes of each of its two rings (requests to it, then replies from it, one
    /// after the other at the start of the shared memory it inherited first).
    pub ring_capacity: usize,
    /// The workers of its machine, whose arena it shares: the first one's id and how many.
    pub here: Here,
    /// Where its node keeps the modules uploaded to it (sessions across machines).
    pub uploads: Option<String>,
}

/// The workers of one machine of a session: worker ids `first .. first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Here {
    pub first: usize,
    pub count: usize,
}

impl WorkerArgs {
    /// The arguments that say all this, after the program's name.
    pub fn to_args(&self) -> Vec<String> {
        let WorkerInfo {
            id,
            num_workers,
            num_groups,
            device,
        } = self.info;
        vec![
            ARGS_VERSION.to_string(),
            id.to_string(),
            num_workers.to_string(),
            num_groups.to_string(),
            device.device_type.to_string(),
            device.device_id.to_string(),
            self.spin.budget.as_micros().to_string(),
            self.cpu.map_or(-1, |cpu| cpu as i64).to_string(),
            timeout_ms(self.timeout).to_string(),
            self.ring_capacity.to_string(),
            self.here.first.to_string(),
            self.here.count.to_string(),
            self.uploads.clone().unwrap_or_default(),
        ]
    }

    /// Reads what [`WorkerArgs::to_args`] wrote (`args` without the program's name).
    pub fn parse(args: &[String]) -> Result<WorkerArgs> {
        let usage = || {
            Error::value(format!(
                "a worker program is started by its controller (a process session), which \
                 passes it the arguments (argv after the program's name) `{ARGS_VERSION} ID \
                 WORKERS GROUPS DEVICE_TYPE DEVICE_ID SPIN_US CPU TIMEOUT_MS RING_BYTES FIRST_HERE \
                 WORKERS_HERE UPLOADS` (UPLOADS empty but on a node), with \
                 the shared memory of its rings as descriptor 3 and the session's arena as \
                 descriptor 4; got {args:?}"
            ))
        };
        let [
            version,
            id,
            workers,
            groups,
            device_type,
            device_id,
            spin_us,
            cpu,
            timeout,
            ring,
            first_here,
            workers_here,
            uploads,
        ] = args
        else {
            return Err(usage());
        };
        if version != ARGS_VERSION {
            return Err(usage());
        }
        let number = |text: &String| text.parse::<i64>().map_err(|_| usage());
        let count = |text: &String| usize::try_from(number(text)?).map_err(|_| usage());
        let info = WorkerInfo {
            id: count(id)?,
            num_workers: count(workers)?,
            num_groups: count(groups)?,
            device: DLDevice {
                device_type: i32::try_from(number(device_type)?).map_err(|_| usage())?,
                device_id: i32::try_from(number(device_id)?).map_err(|_| usage())?,
            },
        };
        let here = Here {
            first: count(first_here)?,
            count: count(workers_here)?,
        };
        if info.id >= info.num_workers
            || info.num_groups == 0
            || !info.num_workers.is_multiple_of(info.num_groups)
            || info.id < here.first
            || info.id - here.first >= here.count
            || here.first + here.count > info.num_workers
        {
            return Err(usage());
        }
        Ok(WorkerArgs {
            info,
            spin: SpinPolicy {
                budget: Duration::from_micros(
                    u64::try_from(number(spin_us)?).map_err(|_| usage())?,
                ),
            },
            cpu: match number(cpu)? {
                -1 => None,
                cpu => Some(usize::try_from(cpu).map_err(|_| usage())?),
            },
            timeout: timeout_from_ms(u64::try_from(number(timeout)?).map_err(|_| usage())?),
            ring_capacity: count(ring)?,
            here,
            uploads: (!uploads.is_empty()).then(|| uploads.clone()),
        })
    }
}

/// Serves the controller that started this process, until it sends `Shutdown`; the exit status
/// of the program (0 after a shutdown). `args` are the process's arguments without the
/// program's name. `unready` is why the worker could not become what the session asked for
/// (a Python module it could not import), which its first sync reports, failing the
/// session's start; a worker program that leaves the session's imports to nobody fails so too.
pub(crate) fn serve(args: &[String], unready: Option<Error>) -> Result<()> {
    let args = WorkerArgs::parse(args)?;
    let unready = unready.or_else(imports_left_undone);
    exit_with_parent()?;
    // SAFETY: the controller placed the shared memory of this worker's rings at this
    // descriptor before starting the program; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(FIRST_INHERITED_FD) };
    let memory = Arc::new(SharedMemory::from_fd(fd)?);
    let mut requests = Consumer::attach(memory.clone(), 0)?;
    let mut replies = Producer::attach(memory, ring_bytes(args.ring_capacity)?)?;
    // SAFETY: the controller placed the session's arena at the next descriptor; nothing else
    // in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(FIRST_INHERITED_FD + 1) };
    let here = args.here;
    let arena = Arena::attach(fd, here.count, super::ccl_bytes(here.count)?)?;
    arena::attach(arena, args.info.id - here.first)?;
    if let Some(uploads) = args.uploads {
        crate::session::node::keep_uploads_at(uploads.into());
    }
    if let Some(cpu) = args.cpu {
        pin_current_thread(cpu)?;
    }
    crate::session::register_builtins();
    let shared = Arc::new(WorkerShared {
        exited: Exited::default(),
        signals: Placed::Shared(arena::signals()?),
        activity: Placed::Shared(arena::activity()?),
        events: Placed::Shared(arena::events()?),
        stream_events: Placed::Shared(arena::stream_events()?),
        timeout: args.timeout,
        session: OnceLock::new(),
    });
    let mut worker = Worker::start(shared, args.info, args.cpu.is_some());
    if let Some(error) = unready {
        worker.note_failure(&error.context(format_args!("worker {}", args.info.id)));
    }
    let limits = Limits::default();
    let mut out = Vec::new();
    let handled = arena::handled()?;
    let mut frames = 0;
    loop {
        // A large frame is gathered so that its large tensor's data can stay where it lands.
        let placement = |first: &[u8]| Frame::placement(first, &limits);
        let idle = || {
            worker.note_idle();
            Ok(())
        };
        // A call taken at once follows the last one without a wait; see `Worker::call`.
        if !requests.has_pending() {
            worker.record_last_call();
        }
        let mut frame = requests.recv_placed(args.spin, Deadline::NEVER, idle, placement)?;
        let decoded = match frame.take_placed() {
            Some((block, range)) => Frame::decode_in_block(&Arc::new(block), range, &limits),
            None => Frame::decode(&frame, &limits),
        };
        drop(frame);
        let decoded = decoded?;
        if !matches!(decoded, Frame::Call { .. }) {
            worker.record_last_call();
        }
        let (go_on, answer) = match decoded {
            // Answered by the worker directly: nothing waits on this thread for the reply.
            Frame::Sync { request } => (
                true,
                Some(Answer::Now(request, worker.sync().map(|()| Any::None))),
            ),
            Frame::Lend { request, reg } => {
                // The answer goes before the wait for the tensor to come back.
                let lent = worker.lend(reg).and_then(|tensor| {
                    arena::lend(&tensor, request, args.spin, |place| {
                        let answer = Answer::Lent(request, place);
                        reply(&mut replies, &mut out, answer, args.spin)
                    })
                });
                match lent {
                    Ok(true) => (true, None),
                    // Not in the arena: nothing lent, and the controller sends the copy.
                    Ok(false) => (true, Some(Answer::Now(request, Ok(Any::None)))),
                    Err(error) => (true, Some(Answer::Now(request, Err(error)))),
                }
            }
            Frame::CopyFromWorker0 { request, reg, into } => {
                if into.is_some() {
                    return Err(Error::value(
                        "a copy into the session's arena reached a worker without one",
                    ));
                }
                (true, Some(copy_from(&mut worker, request, reg)))
            }
            Frame::Call {
                call: number,
                frees,
                func,
                out,
                args,
            } => {
                for reg in frees {
                    worker.handle(Message::Free(reg));
                }
                (worker.handle(call(number, func, out, args)?), None)
            }
            frame => {
                // `_source` holds the memory a copy to worker 0 reads until the copy ran.
                let (message, answer, _source) = request(frame)?;
                (worker.handle(message), answer)
            }
        };
        // Recorded before the answer goes: whoever has the answer finds the frame handled.
        frames += 1;
        handled.publish(frames, worker.is_settled());
        if let Some(answer) = answer {
            reply(&mut replies, &mut out, answer, args.spin)?;
        }
        if !go_on {
            break;
        }
    }
    worker.finish();
    Ok(())
}

/// Why this program cannot serve the session: the Python modules the session asks its workers
/// to import are still in the environment (a Python worker takes them out once imported), and
/// one of them is not optional.
fn imports_left_undone() -> Option<Error> {
    let imports = std::env::var(IMPORTS_VAR).ok()?;
    let required: Vec<&str> = imports.split(',').filter(|m| !m.ends_with('?')).collect();
    (!required.is_empty()).then(|| {
        Error::runtime(format!(
            "the session asks its workers to import the Python modules `{}`, which only a \
             Python worker program (`python -m discovm.worker`) can",
            required.join("`, `")
        ))
    })
}

/// Sends `answer` to the controller, encoded in `out` (a buffer kept between replies).
fn reply(
    replies: &mut Producer,
    out: &mut Vec<u8>,
    answer: Answer,
    spin: SpinPolicy,
) -> Result<()> {
    let request = answer.request();
    out.clear();
    answer.encode(out)?;
    if out.len() > MAX_GATHERED {
        // What cannot cross fails its request, not the worker.
        let error = Error::value(format!(
            "the reply of {} bytes is longer than a ring to the controller carries \
             ({MAX_GATHERED} bytes)",
            out.len()
        ));
        out.clear();
        Frame::<Any>::Err { request, error }.encode(out)?;
    }
    replies.send(out, spin, Deadline::NEVER, || Ok(()))?;
    out.shrink_to(1 << 16);
    Ok(())
}

/// A request the loop answers once the worker ran it.
enum Answer {
    /// With None, or the failure.
    Unit(u64, Reply<()>),
    /// With the value.
    Value(u64, Reply<Any>),
    /// With the count.
    Count(u64, Reply<usize>),
    /// With the tensor the copy wrote, or the failure.
    Tensor(u64, Reply<()>, Tensor),
    /// With a result the loop already has (the request became no message, or failed first).
    Now(u64, Result<Any>),
    /// With where the tensor lent for a copy lies in the session's arena.
    Lent(u64, ArenaTensor),
}

impl Answer {
    /// The request it answers.
    fn request(&self) -> u64 {
        match *self {
            Answer::Unit(request, _)
            | Answer::Value(request, _)
            | Answer::Count(request, _)
            | Answer::Tensor(request, _, _)
            | Answer::Now(request, _)
            | Answer::Lent(request, _) => request,
        }
    }

    /// Encodes the reply into `out`.
    fn encode(self, out: &mut Vec<u8>) -> Result<()> {
        let plain = |result: Result<Any>| result.map(Value::Plain);
        let (request, result) = match self {
            Answer::Unit(request, reply) => (request, plain(taken(&reply).map(|()| Any::None))),
            Answer::Value(request, reply) => (request, plain(taken(&reply))),
            Answer::Count(request, reply) => {
                (request, plain(taken(&reply).map(|n| Any::Int(n as i64))))
            }
            Answer::Tensor(request, reply, tensor) => {
                (request, plain(taken(&reply).map(|()| Any::from(tensor))))
            }
            Answer::Now(request, result) => (request, plain(result)),
            Answer::Lent(request, place) => (request, Ok(Value::Arena(place))),
        };
        let frame = match result {
            Ok(value) => Frame::Ok { request, value },
            Err(error) => Frame::Err { request, error },
        };
        match frame.encode(out) {
            Ok(_) => Ok(()),
            // A value that cannot cross still answers the request, with why.
            Err(error) => {
                out.clear();
                Frame::<Any>::Err { request, error }.encode(out).map(drop)
            }
        }
    }
}

/// The reply the worker left in a slot it was given.
fn taken<T>(reply: &Reply<T>) -> Result<T> {
    reply
        .try_take()
        .unwrap_or_else(|| Err(Error::runtime("the worker left a request unanswered")))
}

fn slot<T>() -> Reply<T> {
    Reply::new(Completion::for_peer())
}

/// The message a request frame encodes, how to answer it, and the tensor a copy to worker 0
/// reads (kept until the message ran).
fn request(frame: Frame) -> Result<(Message, Option<Answer>, Option<Tensor>)> {
    Ok(match frame {
        Frame::Store { reg, name, value } => {
            let value = match argument(value)? {
                Arg::Value(value) => value,
                Arg::Register(_) => {
                    return Err(Error::value("a Store frame holds a register, not a value"));
                }
            };
            (
                Message::Store(Arc::new(Store { reg, value, name })),
                None,
                None,
            )
        }
        Frame::Free { reg } => (Message::Free(reg), None, None),
        Frame::Get { request, reg } => {
            let reply = slot();
            let answer = Answer::Value(request, reply.clone());
            (Message::Get { reg, reply }, Some(answer), None)
        }
        Frame::CountLive { request } => {
            let reply = slot();
            let answer = Answer::Count(request, reply.clone());
            (Message::CountLive(reply), Some(answer), None)
        }
        Frame::GetGlobalFunc { request, reg, name } => {
            let reply = slot();
            let answer = Answer::Unit(request, reply.clone());
            let lookup = GlobalLookup { reg, name, reply };
            (Message::GetGlobalFunc(Box::new(lookup)), Some(answer), None)
        }
        Frame::GetModuleFunc {
            request,
            reg,
            module,
            name,
        } => {
            let reply = slot();
            let answer = Answer::Unit(request, reply.clone());
            let lookup = ModuleLookup {
                reg,
                module,
                name,
                reply,
            };
            (Message::GetModuleFunc(Box::new(lookup)), Some(answer), None)
        }
        Frame::CopyToWorker0 {
            request,
            reg,
            source,
        } => {
            let source = match argument(source)? {
                Arg::Value(value) => value.view().as_tensor()?,
                Arg::Register(_) => {
                    return Err(Error::value("a copy's source is a register, not a tensor"));
                }
            };
            let reply = slot();
            let answer = Answer::Unit(request, reply.clone());
            let message = copy(reg, &source, CopyDirection::ToWorker, reply)?;
            (message, Some(answer), Some(source))
        }
        Frame::Shutdown => (Message::Shutdown, None, None),
        other => {
            return Err(Error::value(format!(
                "a worker received a {} frame, which it does not serve",
                other.kind().name()
            )));
        }
    })
}

/// The message of a call frame; `number` is the call's (0 for a frame that carries none).
fn call(number: Option<u32>, func: u32, out: u32, args: Vec<Value>) -> Result<Message> {
    let args: Vec<Arg> = args.into_iter().map(argument).collect::<Result<_>>()?;
    let args = (!args.is_empty()).then(|| args.into());
    Ok(Message::Call {
        call: number.unwrap_or(0),
        func,
        out,
        args,
    })
}

/// A decoded value as the argument of a message.
fn argument(value: Value) -> Result<Arg> {
    match value {
        Value::Plain(value) => Ok(Arg::Value(value)),
        Value::Register(reg) => Ok(Arg::Register(reg)),
        Value::Arena(_) => Err(Error::value(
            "a tensor in the session's arena reached a worker without one",
        )),
    }
}

/// The copy message between the tensor in `reg` and a host tensor of this process.
fn copy(reg: u32, tensor: &Tensor, direction: CopyDirection, reply: Reply<()>) -> Result<Message> {
    // SAFETY: the tensor is this process's own host tensor, which the caller keeps until the
    // message ran.
    let host = unsafe { HostTensor::new(tensor.dl()) }?;
    Ok(Message::Copy {
        reg,
        host: Box::new(HostCopy {
            host,
            name: crate::session::requests::COPIED_AS,
        }),
        direction,
        reply,
    })
}

/// A copy from worker 0, in two steps on the worker: reading the tensor in `reg` (which
/// reports the failures since the last sync, as a copy does first), then copying it into a
/// host tensor of its shape, which the reply carries.
fn copy_from(worker: &mut Worker, request: u64, reg: u32) -> Answer {
    let got = slot();
    worker.handle(Message::Get {
        reg,
        reply: got.clone(),
    });
    let host = taken(&got).and_then(|value| {
        let remote = value.view().as_tensor()?;
        Tensor::empty(remote.shape(), remote.dl().dtype, DLDevice::cpu())
    });
    let host = match host {
        Ok(host) => host,
        Err(error) => return Answer::Now(request, Err(error)),
    };
    let reply = slot();
    match copy(reg, &host, CopyDirection::FromWorker, reply.clone()) {
        Ok(message) => {
            worker.handle(message);
            Answer::Tensor(request, reply, host)
        }
        Err(error) => Answer::Now(request, Err(error)),
    }
}
