//! Synchronous small-memory access (`dvm_tensor_read` / `dvm_tensor_write`). When every earlier
//! use of the tensor is over, the caller does the access itself ([`access_here`],
//! [`access_directly`]); otherwise it queues one instruction on the stream that last wrote the
//! tensor, ordered after every earlier use on any stream, and waits for it.
//!
//! The one idea: the instruction is the calling thread's own and is reused, so the hot path
//! allocates nothing, and the caller waits on one state word in two phases ([`Handshake`]): it
//! may park until the executor *starts* the access (whose wake-up then overlaps the copy), then
//! spins until it is done; with nothing else queued it only spins, so the executor wakes nobody.

use std::cell::RefCell;
use std::sync::{Arc, PoisonError};

use super::dependence::{Access, TensorDeps, Waits};
use super::executor::Task;
use super::instruction::wait_all;
use super::stream::{StreamCore, check_compact, check_range, check_writable, default_stream};
use crate::abi::DLDevice;
use crate::channel::Deadline;
use crate::channel::{Sleeper, SpinPolicy};
use crate::device::cpu::current_cpu;
use crate::device::{DeviceStream, MemPtr, backend, is_host_memory};
use crate::object::{Error, Result, Tensor};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU32, Ordering};
use crate::sync::thread::{self, Thread};

const PENDING: u32 = 0;
const STARTED: u32 = 1;
const DONE: u32 = 2;

/// With at least this many instructions in flight before the access, the caller may park until
/// the executor starts it; with fewer it only spins (and the executor wakes nobody).
const SKIP_BLOCKING_THRESHOLD: usize = 1;

/// The handshake between the thread that waits for an access and the executor that runs it:
/// one state word, the waiter's sleep flag and the access's outcome. While the executor has
/// other work queued, the waiter may park until the executor starts the access (the executor
/// wakes it just before copying); then it spins until the access is done. When the executor has
/// nothing else queued, the waiter skips the first phase, so the executor finds nobody asleep.
pub(crate) struct Handshake {
    state: AtomicU32,
    waiter: Thread,
    sleeper: Sleeper,
    /// Whether the waiter may park until the access starts (the executor had other work):
    /// only then does the executor announce the start.
    waiter_may_park: bool,
    error: Mutex<Option<Error>>,
}

impl Handshake {
    /// A handshake for the calling thread to wait on.
    fn new() -> Self {
        Handshake {
            state: AtomicU32::new(DONE),
            waiter: thread::current(),
            sleeper: Sleeper::default(),
            waiter_may_park: false,
            error: Mutex::new(None),
        }
    }

    /// Readies the handshake for the next access (the waiter holds the only reference).
    fn arm(&mut self, waiter_may_park: bool) {
        self.state.store(PENDING, Ordering::Relaxed);
        self.waiter_may_park = waiter_may_park;
        *self.error.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// On the executor, before the access: wakes a waiter that may sleep until now.
    fn start(&self) {
        if self.waiter_may_park {
            self.state.store(STARTED, Ordering::Release);
            self.sleeper.wake(&self.waiter);
        }
    }

    /// On the executor, last: publishes the outcome and wakes the waiter if it sleeps.
    fn finish(&self, outcome: Result<()>) {
        if let Err(error) = outcome {
            *self.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(error);
        }
        self.state.store(DONE, Ordering::Release);
        self.sleeper.wake(&self.waiter);
    }

    /// On the waiter: the access's outcome, once the executor has finished it.
    fn wait(&self, policy: SpinPolicy) -> Result<()> {
        if self.waiter_may_park {
            // Busy: block (spin, yield, then park) until the executor starts the access.
            self.sleeper.wait(
                policy,
                Deadline::NEVER,
                String::new,
                || Ok(()),
                || (self.state.load(Ordering::Acquire) >= STARTED).then_some(()),
            )?;
        }
        self.sleeper.wait(
            policy,
            Deadline::NEVER,
            String::new,
            || Ok(()),
            || (self.state.load(Ordering::Acquire) == DONE).then_some(()),
        )?;
        match self
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Waits until `shared` has no other reference: the executor drops its own right after it
/// finished the access.
fn wait_unshared<T>(shared: &crate::sync::Arc<T>) {
    let mut spins = 0u32;
    // Not `channel::wait`: the executor lets go right after `finish` and wakes nobody for it.
    while crate::sync::Arc::strong_count(shared) > 1 {
        spins += 1;
        if spins < 64 {
            crate::sync::spin_loop();
        } else {
            thread::yield_now();
        }
    }
}

/// The calling thread's access instruction, shared with the executor while it runs.
pub(crate) type Request = crate::sync::Arc<SmallMemAccess>;

/// One thread's reusable access instruction. Its fields are set only while the caller holds
/// the sole reference (`Arc::get_mut`), so the executor sees them read-only.
pub(crate) struct SmallMemAccess {
    handshake: Handshake,
    /// The CPU the waiter ran on when it queued the access.
    waiter_cpu: Option<usize>,
    stream: Option<Arc<StreamCore>>,
    seq: u64,
    waits: Waits,
    access: Access,
    /// The caller's buffer (read) or bytes (write).
    host: *mut u8,
    /// The tensor's first byte.
    data: *mut u8,
    device: crate::abi::DLDevice,
    nbytes: usize,
    full: bool,
    /// The tensor's dependence record, for its poison state. The caller holds the tensor and
    /// blocks until the access is done, and the executor stops using this before it says so.
    deps: *const TensorDeps,
}

// SAFETY: the raw pointers are the caller's buffer, the tensor's memory and its dependence
// record; the caller holds the tensor and blocks until the executor is done with them.
unsafe impl Send for SmallMemAccess {}
// SAFETY: as above; the executor only reads the plain fields.
unsafe impl Sync for SmallMemAccess {}

impl SmallMemAccess {
    fn new() -> Self {
        SmallMemAccess {
            handshake: Handshake::new(),
            waiter_cpu: None,
            stream: None,
            seq: 0,
            waits: Waits::new(),
            access: Access::Read,
            host: std::ptr::null_mut(),
            data: std::ptr::null_mut(),
            device: DLDevice::cpu(),
            nbytes: 0,
            full: false,
            deps: std::ptr::null(),
        }
    }

    /// The CPU the waiter ran on when it queued the access.
    pub fn waiter_cpu(&self) -> Option<usize> {
        self.waiter_cpu
    }

    /// Runs on the executor.
    pub fn execute(&self) {
        let stream = self.stream.as_ref().expect("a queued access has a stream");
        let waited = wait_all(stream, &self.waits);
        self.handshake.start();
        // SAFETY: set from a live tensor the caller holds until the handshake says the access
        // is finished, below.
        let deps = unsafe { self.deps.as_ref() };
        let outcome = waited.and_then(|()| self.copy(stream, deps));
        if outcome.is_ok() && !stream.device_stream().completes_on_host() {
            // The copy synchronized the device stream: what its earlier instructions held can go.
            stream.retiring.release_through(self.seq);
        }
        stream.finish(self.seq);
        self.handshake.finish(outcome);
    }

    fn copy(&self, stream: &StreamCore, deps: Option<&TensorDeps>) -> Result<()> {
        let data = MemPtr {
            ptr: self.data,
            device: self.device,
        };
        // SAFETY: set from the caller's buffer and a live, compact tensor of at least
        // `nbytes` (checked when queued); the caller is blocked until the access finished.
        unsafe {
            copy_on(
                stream.device_stream(),
                self.access,
                self.host,
                data,
                (self.nbytes, self.full),
                deps,
            )
        }
    }
}

/// Runs `copy`, which moves the bytes of a small access (`dst`, `src`: the caller's buffer and
/// the tensor's memory, in the direction of `access`), under the tensor's poison: a read fails
/// with it, if any; a write of the whole tensor (`full`) clears it.
fn with_poison<P: Copy>(
    access: Access,
    (host, data): (P, P),
    full: bool,
    deps: Option<&TensorDeps>,
    copy: impl FnOnce(P, P) -> Result<()>,
) -> Result<()> {
    match access {
        Access::Read => {
            if let Some(cause) = deps.and_then(TensorDeps::poison) {
                return Err(poisoned(&cause));
            }
            copy(host, data)
        }
        Access::Write => {
            copy(data, host)?;
            if full && let Some(deps) = deps {
                deps.clear_poison();
            }
            Ok(())
        }
    }
}

/// A small access through `dev`, a stream of the tensor's device, waited for before it
/// returns (see [`with_poison`]).
///
/// # Safety
/// `host` is valid for `nbytes` and `data` (compact tensor memory) for at least that many;
/// nothing else uses either until this returns.
unsafe fn copy_on(
    dev: &dyn DeviceStream,
    access: Access,
    host: *mut u8,
    data: MemPtr,
    (nbytes, full): (usize, bool),
    deps: Option<&TensorDeps>,
) -> Result<()> {
    let host = MemPtr {
        ptr: host,
        device: DLDevice::cpu(),
    };
    with_poison(access, (host, data), full, deps, |dst, src| {
        // SAFETY: as the caller promises.
        unsafe { dev.copy(dst, src, nbytes) }
    })?;
    dev.synchronize()
}

/// Device streams for small accesses made on the calling thread (see [`access_directly`]),
/// each taken by one access at a time and kept for the next.
static DIRECT_STREAMS: std::sync::Mutex<Vec<(DLDevice, Box<dyn DeviceStream>)>> =
    std::sync::Mutex::new(Vec::new());

/// A small access to a device tensor whose earlier uses have all finished, on the device too
/// (the caller holds its record, so no new one is queued meanwhile): issued on the calling
/// thread on a stream of the tensor's device and waited for, without a round trip to an
/// executor, so it costs about what the device's own copy and wait do.
///
/// # Safety
/// As for [`copy_on`].
unsafe fn access_directly(
    deps: &TensorDeps,
    data: MemPtr,
    host: *mut u8,
    nbytes: (usize, bool),
    access: Access,
) -> Result<()> {
    let pool = || {
        DIRECT_STREAMS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    let taken = {
        let mut streams = pool();
        let found = streams.iter().position(|(d, _)| *d == data.device);
        found.map(|i| streams.swap_remove(i).1)
    };
    let dev = match taken {
        Some(dev) => dev,
        None => backend(data.device)?.new_stream()?,
    };
    // SAFETY: as the caller promises.
    let outcome = unsafe { copy_on(&*dev, access, host, data, nbytes, Some(deps)) };
    if outcome.is_ok() {
        pool().push((data.device, dev));
    }
    outcome
}

/// A small access on the calling thread, for a host tensor whose earlier uses have all
/// finished (the caller holds its record).
fn access_here(
    deps: &TensorDeps,
    data: *mut u8,
    host: *mut u8,
    nbytes: usize,
    full: bool,
    access: Access,
) -> Result<()> {
    with_poison(access, (host, data), full, Some(deps), |dst, src| {
        // SAFETY: the caller's buffer holds `nbytes`; the tensor (alive, compact, on the host)
        // holds at least that many (checked), and nothing else uses it now.
        unsafe { std::ptr::copy(src, dst, nbytes) };
        Ok(())
    })
}

/// The error of a read from a tensor a failed instruction should have written.
fn poisoned(cause: &Error) -> Error {
    Error::new(
        cause.kind.clone(),
        format!(
            "the tensor holds no valid value: an instruction that should have written it \
             failed: {cause}"
        ),
    )
}

thread_local! {
    static ACCESS: RefCell<Option<Request>> = const { RefCell::new(None) };
}

/// Copies the first `dst.len()` bytes of `tensor` into `dst`, after every earlier use of the
/// tensor on any stream. Errors: `ValueError` if `dst` is longer than the tensor or the tensor
/// is a strided view; the failure that poisoned the tensor, if one did.
pub fn read(tensor: &Tensor, dst: &mut [u8]) -> Result<()> {
    access(tensor, dst.as_mut_ptr(), (dst.len(), "dst"), Access::Read)
}

/// Copies `src` into the first `src.len()` bytes of `tensor`, after every earlier use of the
/// tensor on any stream. Errors as for [`read`].
pub fn write(tensor: &Tensor, src: &[u8]) -> Result<()> {
    access(
        tensor,
        src.as_ptr().cast_mut(),
        (src.len(), "src"),
        Access::Write,
    )
}

/// Checks that `nbytes` can be read from (or written to) `tensor`: a compact tensor of at
/// least that many bytes (and, to be written, not read-only). Errors call the tensor `t` and
/// the count `name`. [`read`](fn@read) and [`write`](fn@write) check this too; a caller that holds a raw buffer
/// checks it before making a slice of it.
pub fn check_access(tensor: &Tensor, (nbytes, name): (usize, &str), access: Access) -> Result<()> {
    check_compact(tensor, "t")?;
    let verb = match access {
        Access::Read => "read from",
        Access::Write => {
            check_writable(tensor, "t")?;
            "written to"
        }
    };
    check_range((nbytes, name), tensor.nbytes(), verb)
}

fn access(tensor: &Tensor, host: *mut u8, nbytes: (usize, &str), access: Access) -> Result<()> {
    check_access(tensor, nbytes, access)?;
    let nbytes = nbytes.0;
    let size = tensor.nbytes();
    if nbytes == 0 && access == Access::Write {
        // Nothing to write. (A read of 0 bytes still waits for the last writer and reports
        // its failure.)
        return Ok(());
    }
    ACCESS.with(|slot| {
        let mut slot = slot.borrow_mut();
        let request = slot.get_or_insert_with(|| Request::new(SmallMemAccess::new()));
        wait_unshared(request);
        run(request, tensor, host, nbytes, size, access)
    })
}

fn run(
    request: &mut Request,
    tensor: &Tensor,
    host: *mut u8,
    nbytes: usize,
    size: usize,
    access: Access,
) -> Result<()> {
    let deps = TensorDeps::of(tensor);
    let mut record = deps.lock();
    if record.settled(access) {
        // Every earlier use has finished, and while this thread holds the record no new one
        // can be queued: the access runs right here, without a round trip to an executor.
        let device = tensor.dl().device;
        if is_host_memory(device) {
            return access_here(
                deps,
                tensor.data_ptr(),
                host,
                nbytes,
                nbytes == size,
                access,
            );
        }
        let data = MemPtr {
            ptr: tensor.data_ptr(),
            device,
        };
        // SAFETY: the caller's buffer holds `nbytes`; the tensor (alive, compact) at least
        // that many (checked); nothing else uses it while the record is held.
        return unsafe { access_directly(deps, data, host, (nbytes, nbytes == size), access) };
    }
    // The access runs on the stream that last wrote the tensor, unless that stream takes no
    // work from this thread (an inline stream of another thread): then the device's default
    // stream runs it, after waiting for that write.
    let stream = match record.writer_stream() {
        Some(stream) if stream.executor().accepts_calling_thread() => stream.clone(),
        _ => default_stream(tensor.dl().device)?,
    };
    if stream.executor().is_current() {
        return Err(Error::runtime(
            "a synchronous tensor read or write would wait for the thread it runs on (it \
             was called from a callback running on a stream of the same executor)",
        ));
    }
    {
        let job = Request::get_mut(request).expect("the executor released the access");
        job.waits.clear();
        record.needs(&stream, access, &mut job.waits);
        job.access = access;
        job.host = host;
        job.data = tensor.data_ptr();
        job.device = tensor.dl().device;
        job.nbytes = nbytes;
        job.full = nbytes == size;
        job.waiter_cpu = current_cpu();
        job.deps = deps;
        // The executor's queue before this access: with nothing else on it, the caller only
        // spins, so the executor finds nobody asleep.
        job.handshake
            .arm(stream.executor().in_flight() >= SKIP_BLOCKING_THRESHOLD);
        match &job.stream {
            Some(s) if Arc::ptr_eq(s, &stream) => {}
            _ => job.stream = Some(stream.clone()),
        }
    }
    let executor = stream.executor().clone();
    let (seq, inline) = executor.submit(&stream, |seq| {
        Request::get_mut(request)
            .expect("the executor released the access")
            .seq = seq;
        Task::Access(request.clone())
    })?;
    record.record(&stream, seq, access);
    drop(record);
    if let Some(run) = inline {
        run.run();
    }

    request.handshake.wait(SpinPolicy::default())
}

/// A model of the access handshake and of the reuse of one thread's access instruction.
#[cfg(all(test, loom))]
mod loom_model {
    use std::time::Duration;

    use loom::thread::spawn;

    use super::{Handshake, wait_unshared};
    use crate::channel::SpinPolicy;
    use crate::object::Error;
    use crate::sync::{Arc, explore};

    /// Two accesses in a row through one handshake, as one thread's reads make them. An
    /// executor thread starts and finishes each and lets go of it afterwards; the waiter parks
    /// until the start (when it may) and until the end, then waits until it holds the only
    /// reference before arming the handshake again. A lost wake-up would leave the waiter
    /// parked for good (a deadlock in the model); the second access must report the failure
    /// its executor published, and the first none.
    fn two_accesses(first_may_park: bool, policy: SpinPolicy) {
        let mut request = Arc::new(Handshake::new());
        let mut executors = Vec::new();
        for (failed, waiter_may_park) in [(false, first_may_park), (true, !first_may_park)] {
            wait_unshared(&request);
            Arc::get_mut(&mut request)
                .expect("the executor let go")
                .arm(waiter_may_park);
            let running = request.clone();
            executors.push(spawn(move || {
                running.start();
                running.finish(if failed {
                    Err(Error::runtime("the copy failed"))
                } else {
                    Ok(())
                });
            }));
            let outcome = request.wait(policy).map_err(|e| e.message);
            let expected = if failed {
                Err("the copy failed".to_string())
            } else {
                Ok(())
            };
            assert_eq!(outcome, expected);
        }
        for executor in executors {
            executor.join().unwrap();
        }
    }

    /// The waiter parks as soon as its poll fails: the model then explores every point at
    /// which it may fall asleep (a spinning waiter yields, and the model runs the executor
    /// first).
    const PARK_AT_ONCE: SpinPolicy = SpinPolicy {
        budget: Duration::ZERO,
    };

    #[test]
    fn a_waiter_that_parks_then_spins_sees_both_outcomes() {
        explore(
            "small-memory access: parking, then spinning waiter",
            Some(5),
            || two_accesses(true, PARK_AT_ONCE),
        );
    }

    #[test]
    fn a_waiter_that_spins_then_parks_sees_both_outcomes() {
        explore(
            "small-memory access: spinning, then parking waiter",
            Some(5),
            || two_accesses(false, PARK_AT_ONCE),
        );
    }

    #[test]
    fn a_waiter_with_the_default_spin_sees_both_outcomes() {
        explore("small-memory access: default spin", None, || {
            two_accesses(true, SpinPolicy::default())
        });
    }
}
