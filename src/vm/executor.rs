//! Executors: the threads that run stream instructions. Each has a lock-free queue (its one
//! consumer spins, yields, then parks; producers wake it only when it sleeps). Several streams
//! may share one executor: their instructions then run in one FIFO, in submission order, so
//! soft syncs between them never block.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::instruction::Instruction;
use super::small_mem::SmallMemAccess;
use super::stream::StreamCore;
use crate::channel::Channel;
use crate::channel::SpinPolicy;
use crate::object::{Error, ErrorKind, Result};

/// Instructions an executor's queue holds before submitters wait for room.
pub const QUEUE_CAPACITY: usize = 4096;

pub(crate) enum Task {
    Run(Box<Instruction>),
    Access(Arc<SmallMemAccess>),
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
}

thread_local! {
    /// The executor the calling thread runs, as an address (0 off executor threads).
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

impl Executor {
    /// Starts an executor thread named `name`.
    pub fn start(name: String) -> Result<Arc<Executor>> {
        let executor = Arc::new(Executor {
            channel: Channel::new(QUEUE_CAPACITY),
            submit: Mutex::new(()),
            in_flight: AtomicUsize::new(0),
            exited: AtomicBool::new(false),
            thread: Mutex::new(None),
        });
        let me = executor.clone();
        let handle = std::thread::Builder::new()
            .name(name)
            .spawn(move || me.run())
            .map_err(|e| Error::runtime(format!("cannot start a stream thread: {e}")))?;
        *executor
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(handle);
        Ok(executor)
    }

    fn run(self: Arc<Self>) {
        CURRENT.with(|c| c.set(Arc::as_ptr(&self) as usize));
        self.channel.set_consumer(std::thread::current());
        loop {
            match self.channel.recv(SpinPolicy::default()) {
                Task::Run(instruction) => (*instruction).execute(),
                Task::Access(access) => access.execute(),
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

    /// Numbers the next instruction of `stream`, builds it with `make(seq)` and queues it.
    pub fn submit(&self, stream: &StreamCore, make: impl FnOnce(u64) -> Task) -> Result<u64> {
        let _order = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
        if stream.is_closed() {
            return Err(Error::value("the stream was freed"));
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
            .send(task, SpinPolicy::default(), None, || self.check_alive())
        {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(error);
        }
        stream.set_issued(seq);
        Ok(seq)
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
        {
            let _order = self.submit.lock().unwrap_or_else(PoisonError::into_inner);
            self.in_flight.fetch_add(1, Ordering::AcqRel);
            if self
                .channel
                .send(Task::Exit, SpinPolicy::default(), None, || {
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
