//! Executors: the threads that run stream instructions. Each has a lock-free queue (its one
//! consumer spins, yields, then parks; producers wake it only when it sleeps). Several streams
//! may share one executor: their instructions then run in one FIFO, in submission order, so
//! soft syncs between them never block. An inline executor has no thread: the one thread
//! that may submit to it runs each task itself, before the submission returns.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, ThreadId};

use super::instruction::Instruction;
use super::small_mem::Request;
use super::stream::StreamCore;
use crate::abi::DLDevice;
use crate::channel::Channel;
use crate::channel::Deadline;
use crate::channel::SpinPolicy;
use crate::device::cpu::SharedCpuWatch;
use crate::object::{Error, ErrorKind, Result};

/// Instructions an executor's queue holds before submitters wait for room.
pub const QUEUE_CAPACITY: usize = 4096;

pub(crate) enum Task {
    Run(Box<Instruction>),
    Access(Request),
    Exit,
}

pub(crate) struct Executor {
    channel: Channel<Task>,
    /// Held while a stream numbers an instruction and queues it, so queue order is number
    /// order for every stream this executor runs.
    submit: Mutex<()>,
    /// Instructions queued and not yet finished.
    in_flight: AtomicUsize,
    exited: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Runs each task on the thread that submits it instead of a thread of its own; only the
    /// thread that made it may submit (so no other thread ever waits for its order lock while
    /// its tasks, which may take tensor records, run).
    inline: Option<ThreadId>,
}

/// A task an inline executor runs on the submitting thread, once the submitter has recorded
/// it and let go of the tensors' records. It holds the executor's order until it has run, so
/// tasks run in number order.
pub(crate) struct InlineRun<'a> {
    executor: &'a Executor,
    task: Task,
    _order: MutexGuard<'a, ()>,
}

impl InlineRun<'_> {
    pub fn run(self) {
        let previous = CURRENT.with(|c| c.replace(std::ptr::from_ref(self.executor) as usize));
        match self.task {
            Task::Run(instruction) => (*instruction).execute(),
            Task::Access(access) => access.execute(),
            Task::Exit => {}
        }
        CURRENT.with(|c| c.set(previous));
    }
}

thread_local! {
    /// The executor the calling thread runs, as an address (0 off executor threads).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

impl Executor {
    fn new(capacity: usize, inline: Option<ThreadId>) -> Executor {
        Executor {
            channel: Channel::new(capacity),
            submit: Mutex::new(()),
            in_flight: AtomicUsize::new(0),
            exited: AtomicBool::new(false),
            thread: Mutex::new(None),
            inline,
        }
    }

    /// An executor without a thread: each task runs on the calling thread, the only one that
    /// may submit to it.
    pub fn inline() -> Arc<Executor> {
        Arc::new(Self::new(1, Some(std::thread::current().id())))
    }

    /// Whether the calling thread may submit tasks here.
    pub fn accepts_calling_thread(&self) -> bool {
        self.inline
            .is_none_or(|owner| owner == std::thread::current().id())
    }

    /// Starts an executor thread named `name`, for streams of `device`.
    pub fn start(name: String, device: DLDevice) -> Result<Arc<Executor>> {
        let executor = Arc::new(Self::new(QUEUE_CAPACITY, None));
        let me = executor.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                // A GPU's context is current on the thread, for the callbacks it runs (the
                // stream was made on the device, so its backend is there).
                if let Ok(backend) = crate::device::backend(device) {
                    let _ = backend.bind_thread();
                }
                me.run()
            })
            .map_err(|e| Error::runtime(format!("cannot start a stream thread: {e}")))?;
        *executor
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(handle);
        Ok(executor)
    }

    fn run(self: Arc<Self>) {
        CURRENT.with(|c| c.set(Arc::as_ptr(&self) as usize));
        self.channel.set_consumer(crate::sync::thread::current());
        // A thread reading small amounts spins while it waits: keep off its CPU.
        let mut shared_cpu = SharedCpuWatch::default();
        loop {
            match self.channel.recv(SpinPolicy::default()) {
                Task::Run(instruction) => (*instruction).execute(),
                Task::Access(access) => {
                    shared_cpu.note(access.waiter_cpu());
                    access.execute();
                }
                Task::Exit => break,
            }
            self.in_flight.fetch_sub(1, Ordering::Release);
        }
        self.exited.store(true, Ordering::Release);
    }

    /// Whether the calling thread is this executor's.
    pub fn is_current(&self) -> bool {
        CURRENT.with(|c| c.get()) == std::ptr::from_ref(self) as usize
    }

    /// Instructions queued and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Numbers the next instruction of `stream`, builds it with `make(seq)` and queues it. An
    /// inline executor hands the task back instead, to be run once the caller has recorded it
    /// and released the tensors' records.
    pub fn submit(
        &self,
        stream: &StreamCore,
        make: impl FnOnce(u64) -> Task,
    ) -> Result<(u64, Option<InlineRun<'_>>)> {
        if self.inline.is_some() {
            if !self.accepts_calling_thread() {
                return Err(Error::runtime(
                    "an inline stream takes work only from the thread that made it",
                ));
            }
            if self.is_current() {
                return Err(Error::runtime(
                    "a callback running on an inline stream cannot queue work on it (the \
                     stream runs one instruction at a time, on the thread that submits it)",
                ));
            }
        }
        let order = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
        if stream.is_closed() {
            return Err(Error::value("the stream was freed"));
        }
        if self.inline.is_some() {
            let seq = stream.issued() + 1;
            let task = make(seq);
            stream.set_issued(seq);
            let run = InlineRun {
                executor: self,
                task,
                _order: order,
            };
            return Ok((seq, Some(run)));
        }
        // A callback that queues onto its own executor must not wait for room: only it could
        // make some.
        if self.is_current() && self.in_flight() > QUEUE_CAPACITY {
            return Err(Error::runtime(format!(
                "the stream queue is full ({QUEUE_CAPACITY} instructions) and a callback running \
                 on its executor cannot wait for room"
            )));
        }
        let seq = stream.issued() + 1;
        let task = make(seq);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err(error) = self
            .channel
            .send(task, SpinPolicy::default(), Deadline::NEVER, || {
                self.check_alive()
            })
        {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(error);
        }
        stream.set_issued(seq);
        Ok((seq, None))
    }

    fn check_alive(&self) -> Result<()> {
        if self.exited.load(Ordering::Acquire) {
            Err(Error::new(
                ErrorKind::Runtime,
                "the stream thread has exited",
            ))
        } else {
            Ok(())
        }
    }

    /// Stops the thread after the work queued so far and joins it (unless called from it).
    pub fn stop(&self) {
        if self.inline.is_some() {
            return; // nothing queued, no thread
        }
        {
            let _order = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            if self
                .channel
                .send(Task::Exit, SpinPolicy::default(), Deadline::NEVER, || {
                    self.check_alive()
                })
                .is_err()
            {
                return;
            }
        }
        if self.is_current() {
            return;
        }
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}
