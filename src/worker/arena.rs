//! The session's arena: one shared memory that the controller and every worker process map.
//! Tensors that `runtime.disco.empty` makes on a worker process live in that worker's region of
//! it, so a copy to or from worker 0 is one memcpy, done by the controller in place.
//!
//! The one idea: worker 0 lends the tensor. Asked for a copy, it answers with where the tensor
//! lies and then runs nothing else until the controller, done copying, gives it back through a
//! word of the arena; the copy keeps its place among the worker's requests as it would on a
//! thread, and only one side touches the bytes at a time. [`Layout`] says what lies where.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock, PoisonError};

use super::activity::{Activity, Record};
use super::events::Ring;
use super::runtime::Signals;
use crate::abi::{DLDataType, DLDevice, KDL_CPU};
use crate::channel::Deadline;
use crate::channel::shm::SharedMemory;
use crate::channel::{SharedSleeper, SpinPolicy};
use crate::object::tensor::{check_new, release_with};
use crate::object::{Error, Result, Tensor};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::wire::ArenaTensor;

/// Bytes of each worker's region. The memory is reserved, not committed: pages cost only once
/// a tensor touches them.
pub(crate) const REGION_BYTES: usize = 256 << 20;
/// Where allocations start, and what their sizes are rounded up to.
const ALIGN: usize = 64;
/// A region's freed top is given back to the system once it spans this much.
const GIVE_BACK_BYTES: usize = 1 << 20;

/// One worker's line, on cache lines of its own.
#[repr(C, align(128))]
struct WorkerLine {
    /// The request whose lent tensor the controller gave back last. Written by the controller.
    returned: AtomicU64,
    /// The lending worker sleeps on this while it waits.
    sleeper: SharedSleeper,
    /// What the controller tells the worker outside its queue.
    signals: Signals,
    /// Written by the worker, on a line of its own.
    handled: Handled,
    life: Life,
    /// What the worker is doing: written by the worker, read by the controller (after its
    /// death too).
    activity: Activity,
    /// Its last events: written by the worker, read by the controller (after its death too).
    events: Ring,
    /// The last instructions of the streams its functions made, written by their threads.
    stream_events: Ring,
}

/// A robust, process-shared mutex that the worker process locks when it attaches and holds
/// until it ends. The kernel marks it when its owner dies, however it dies, so the controller
/// learns of a death from memory, before any watcher did, without a system call.
#[repr(C, align(128))]
struct Life(UnsafeCell<libc::pthread_mutex_t>);

/// What a worker process has handled: written by the worker after each frame, read by a sync,
/// which needs no message once the worker handled every frame sent to it and is settled.
#[repr(C, align(128))]
pub(crate) struct Handled(AtomicU64);

impl Handled {
    /// Records that the worker handled `frames` frames in all, and whether it is settled then
    /// (a sync would neither wait for nor report anything).
    pub fn publish(&self, frames: u64, settled: bool) {
        self.0
            .store((frames << 1) | u64::from(settled), Ordering::Release);
    }

    /// Whether the worker handled the first `sent` frames and was settled after them.
    fn covers(&self, sent: u64) -> bool {
        let word = self.0.load(Ordering::Acquire);
        word & 1 == 1 && word >> 1 >= sent
    }
}

/// The arena as one process maps it.
pub(crate) struct Arena {
    memory: SharedMemory,
    workers: usize,
    /// Bytes of one communicator area, whole pages.
    ccl_area_bytes: usize,
    /// The workers this process saw dead through their life mutex.
    lost: Box<[AtomicBool]>,
}

/// How many communicator areas the arena has.
pub(crate) const CCL_AREAS: usize = 2;

/// A communicator area of an arena: where it lies, the base and length of the mapping that
/// offsets of buffers count in, and the mapping, which stays while this value lives.
pub(crate) struct CclArea {
    /// Which of the arena's [`CCL_AREAS`] this is.
    pub index: usize,
    pub at: NonNull<u8>,
    pub base: usize,
    pub len: usize,
    /// How many workers share the arena.
    pub workers: usize,
    pub mapping: Arc<dyn Send + Sync>,
}

/// The sizes of an arena's parts, from its workers and the bytes of one communicator's records
/// (the caller's, so that the collectives' layout stays theirs).
///
/// In order: one [`WorkerLine`] per worker, [`CCL_AREAS`] areas for the records of CPU
/// communicators (used in turn, so that a new one is laid out while the workers still hold the
/// last), then one region per worker, which only that worker allocates from. Memory past a
/// region's highest allocation is untouched and reads as zeros.
#[derive(Clone, Copy)]
struct Layout {
    workers: usize,
    ccl_area_bytes: usize,
}

impl Layout {
    fn new(workers: usize, ccl_bytes: usize) -> Option<Layout> {
        let ccl_area_bytes = ccl_bytes.checked_next_multiple_of(page_size())?;
        Some(Layout {
            workers,
            ccl_area_bytes,
        })
    }

    fn bytes(self) -> Option<usize> {
        let regions = REGION_BYTES.checked_mul(self.workers)?;
        regions.checked_add(self.regions_start()?)
    }

    fn ccl_areas_start(self) -> Option<usize> {
        self.workers
            .checked_mul(size_of::<WorkerLine>())?
            .checked_next_multiple_of(page_size())
    }

    fn regions_start(self) -> Option<usize> {
        self.ccl_area_bytes
            .checked_mul(CCL_AREAS)?
            .checked_add(self.ccl_areas_start()?)
    }
}

impl Arena {
    fn layout(&self) -> Layout {
        Layout {
            workers: self.workers,
            ccl_area_bytes: self.ccl_area_bytes,
        }
    }

    fn sized(workers: usize, ccl_bytes: usize) -> Result<(Layout, usize)> {
        let too_large = || Error::value(format!("an arena for {workers} workers is too large"));
        let layout = Layout::new(workers, ccl_bytes).ok_or_else(too_large)?;
        Ok((layout, layout.bytes().ok_or_else(too_large)?))
    }

    fn mapped(memory: SharedMemory, layout: Layout) -> Arena {
        Arena {
            memory,
            workers: layout.workers,
            ccl_area_bytes: layout.ccl_area_bytes,
            lost: (0..layout.workers)
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    /// A new arena for `workers` workers whose communicators take `ccl_bytes` each (the
    /// controller's).
    pub fn create(workers: usize, ccl_bytes: usize) -> Result<Arena> {
        let (layout, len) = Self::sized(workers, ccl_bytes)?;
        let arena = Arena::mapped(SharedMemory::create("discovm-arena", len)?, layout);
        (0..workers).try_for_each(|worker| arena.init_life(worker))?;
        Ok(arena)
    }

    /// Makes `worker`'s life mutex, before any process shares the arena.
    fn init_life(&self, worker: usize) -> Result<()> {
        let failed = |what: &str, code: i32| {
            Error::runtime(format!(
                "the arena's mutex for worker {worker}: {what} failed: {}",
                std::io::Error::from_raw_os_error(code)
            ))
        };
        let mut attr = std::mem::MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: `attr` is initialised by the first call and destroyed by the last; the mutex
        // lies in this arena's line for `worker`, which no other process maps yet.
        unsafe {
            let code = libc::pthread_mutexattr_init(attr.as_mut_ptr());
            if code != 0 {
                return Err(failed("pthread_mutexattr_init", code));
            }
            let made = [
                libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED),
                libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST),
                libc::pthread_mutex_init(self.line(worker).life.0.get(), attr.as_ptr()),
            ];
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            match made.iter().find(|&&code| code != 0) {
                Some(&code) => Err(failed("making a robust shared mutex", code)),
                None => Ok(()),
            }
        }
    }

    /// The arena the controller passed this worker process as `fd`, made by `create` with the
    /// same `workers` and `ccl_bytes`.
    pub fn attach(fd: OwnedFd, workers: usize, ccl_bytes: usize) -> Result<Arena> {
        let memory = SharedMemory::from_fd(fd)?;
        let (layout, len) = Self::sized(workers, ccl_bytes)?;
        if memory.len() != len {
            return Err(Error::value(format!(
                "the session's arena has {} bytes, not what {workers} workers need",
                memory.len()
            )));
        }
        Ok(Arena::mapped(memory, layout))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.memory.fd()
    }

    fn line(&self, worker: usize) -> &WorkerLine {
        assert!(worker < self.workers, "worker {worker} has no line");
        // SAFETY: the lines start the mapping, which is page-aligned and outlives `self`; all
        // zeros (fresh memory) is a valid line but for the life mutex, which `create` makes
        // before anyone uses it; every access to a line is atomic or through pthread calls.
        unsafe { &*self.memory.as_ptr().cast::<WorkerLine>().add(worker) }
    }

    /// What the controller tells `worker` outside its queue.
    pub fn signals(&self, worker: usize) -> &Signals {
        &self.line(worker).signals
    }

    /// What `worker` is doing.
    pub fn activity(&self, worker: usize) -> &Activity {
        &self.line(worker).activity
    }

    /// The ring of `worker`'s last events.
    pub fn events(&self, worker: usize) -> &Ring {
        &self.line(worker).events
    }

    /// The ring of the last instructions of the streams `worker`'s functions made.
    pub fn stream_events(&self, worker: usize) -> &Ring {
        &self.line(worker).stream_events
    }

    /// What `worker` has handled.
    pub fn handled(&self, worker: usize) -> &Handled {
        &self.line(worker).handled
    }

    /// Whether `worker` handled the first `sent` frames, was settled after them and still
    /// lives (its life mutex is held, not marked by the kernel as its owner's death).
    pub fn in_sync(&self, worker: usize, sent: u64) -> bool {
        // The worker recorded progress only after it locked its life mutex, so the lock below
        // can take it only from a dead owner.
        if !self.handled(worker).covers(sent) {
            return false;
        }
        if self.lost[worker].load(Ordering::Acquire) {
            return false;
        }
        let life = self.line(worker).life.0.get();
        // SAFETY: the mutex was made in `create` and lies in the mapping while `self` lives.
        match unsafe { libc::pthread_mutex_trylock(life) } {
            libc::EBUSY => return true,
            // Taken (from a dead owner): let go at once without making it consistent, so that
            // no thread's list of held robust mutexes points into the arena once it is gone.
            // SAFETY: this thread holds it.
            0 | libc::EOWNERDEAD => unsafe {
                libc::pthread_mutex_unlock(life);
            },
            _ => {}
        }
        // The mutex tells of the death once: remembered here.
        self.lost[worker].store(true, Ordering::Release);
        false
    }

    /// Where `worker`'s region starts, in bytes from the start of the arena.
    fn region_start(&self, worker: usize) -> usize {
        self.layout().regions_start().expect("checked when mapped") + worker * REGION_BYTES
    }

    /// Communicator area `area`, as it is.
    fn ccl_area(self: &Arc<Self>, area: usize) -> Result<CclArea> {
        if area >= CCL_AREAS {
            return Err(Error::index(format!(
                "communicator area {area} out of range (the arena has {CCL_AREAS})"
            )));
        }
        let start = self
            .layout()
            .ccl_areas_start()
            .expect("checked when mapped")
            + area * self.ccl_area_bytes;
        let base = self.memory.as_ptr();
        // SAFETY: within the mapping (`Layout::bytes` counts the areas).
        let at = unsafe { NonNull::new_unchecked(base.add(start)) };
        Ok(CclArea {
            index: area,
            at,
            base: base as usize,
            len: self.memory.len(),
            workers: self.workers,
            mapping: self.clone(),
        })
    }

    /// Communicator area `area`, zeroed, for a new communicator (the side that lays it out;
    /// no worker may use the area meanwhile).
    pub fn fresh_ccl_area(self: &Arc<Self>, area: usize) -> Result<CclArea> {
        let place = self.ccl_area(area)?;
        let bytes = self.ccl_area_bytes;
        // SAFETY: whole pages of the area, which nobody uses: removing them makes them read
        // as zeros.
        let rc = unsafe { libc::madvise(place.at.as_ptr().cast(), bytes, libc::MADV_REMOVE) };
        if rc != 0 {
            // SAFETY: as above; zeroing by hand where the system would not.
            unsafe { place.at.as_ptr().write_bytes(0, bytes) };
        }
        Ok(place)
    }

    /// The compact bytes of `tensor`, if they lie within `worker`'s region (a reply from a
    /// worker is checked before the controller touches the memory it names).
    pub fn bytes_of(&self, worker: usize, tensor: &ArenaTensor) -> Result<NonNull<u8>> {
        let span = tensor.span()?;
        let region =
            self.region_start(worker) as u64..(self.region_start(worker) + REGION_BYTES) as u64;
        if tensor.segment != 0 || span.start < region.start || span.end > region.end {
            return Err(Error::runtime(format!(
                "worker {worker} lent bytes {span:?} of arena segment {}, outside its region \
                 {region:?}",
                tensor.segment
            )));
        }
        // SAFETY: within the mapping, checked above.
        Ok(unsafe { NonNull::new_unchecked(self.memory.as_ptr().add(span.start as usize)) })
    }

    /// Gives `worker` back the tensor it lent for `request` (the controller's side).
    pub fn give_back(&self, worker: usize, request: u64) {
        let line = self.line(worker);
        line.returned.store(request, Ordering::Release);
        line.sleeper.wake();
    }

    /// Waits until the controller gave back the tensor lent for `request` (the worker's side).
    /// A controller that dies takes this worker with it, so the wait has no deadline.
    fn wait_given_back(&self, worker: usize, request: u64, spin: SpinPolicy) -> Result<()> {
        let line = self.line(worker);
        line.sleeper.wait(
            spin,
            crate::channel::PARK_SLICE,
            Deadline::NEVER,
            || format!("worker {worker} waiting for its lent tensor"),
            || Ok(()),
            || (line.returned.load(Ordering::Acquire) == request).then_some(()),
        )
    }
}

/// The free blocks of one region, by offset from the region's start, and its highest
/// allocation's end (`top`): blocks are reused, so their memory is zeroed again.
#[derive(Default)]
struct Blocks {
    free: BTreeMap<usize, usize>,
    top: usize,
}

impl Blocks {
    /// An offset for `size` bytes (a multiple of [`ALIGN`]) and whether it must be zeroed.
    fn take(&mut self, size: usize) -> Option<(usize, bool)> {
        let found = self
            .free
            .iter()
            .find(|&(_, &len)| len >= size)
            .map(|(&at, &len)| (at, len));
        if let Some((at, len)) = found {
            self.free.remove(&at);
            if len > size {
                self.free.insert(at + size, len - size);
            }
            return Some((at, true));
        }
        let end = self
            .top
            .checked_add(size)
            .filter(|&end| end <= REGION_BYTES)?;
        let at = self.top;
        self.top = end;
        Some((at, false))
    }

    /// Frees `size` bytes at `at`; returns the range past the new top that the region no
    /// longer uses, when it is worth giving back to the system.
    fn put(&mut self, mut at: usize, mut size: usize) -> Option<std::ops::Range<usize>> {
        if let Some((&before, &len)) = self.free.range(..at).next_back()
            && before + len == at
        {
            self.free.remove(&before);
            at = before;
            size += len;
        }
        if let Some(len) = self.free.remove(&(at + size)) {
            size += len;
        }
        if at + size != self.top {
            self.free.insert(at, size);
            return None;
        }
        let old_top = std::mem::replace(&mut self.top, at);
        (old_top - at >= GIVE_BACK_BYTES).then_some(at..old_top)
    }
}

/// This worker process's region of the arena.
struct Region {
    arena: Arc<Arena>,
    worker: usize,
    blocks: Mutex<Blocks>,
}

/// The region of the worker process this is, once it attached its session's arena.
static REGION: OnceLock<Region> = OnceLock::new();

/// Makes this worker process allocate in its region of `arena` from now on, and holds its life
/// mutex until it ends (the calling thread serves the controller for the rest of the process).
pub(crate) fn attach(arena: Arena, worker: usize) -> Result<()> {
    // SAFETY: the controller made the mutex before it started this process.
    let held = unsafe { libc::pthread_mutex_lock(arena.line(worker).life.0.get()) };
    if held != 0 {
        return Err(Error::runtime(format!(
            "worker {worker} cannot hold its mutex in the session's arena: {}",
            std::io::Error::from_raw_os_error(held)
        )));
    }
    let region = Region {
        arena: Arc::new(arena),
        worker,
        blocks: Mutex::new(Blocks::default()),
    };
    REGION
        .set(region)
        .map_err(|_| Error::runtime("this worker process attached an arena already"))
}

/// What the controller tells this worker process outside its queue, in its line of the arena
/// (mapped for the rest of the process).
pub(crate) fn signals() -> Result<&'static Signals> {
    let region = own_region()?;
    Ok(region.arena.signals(region.worker))
}

/// Where this worker process records what it is doing, in its line of the arena.
pub(crate) fn activity() -> Result<&'static Activity> {
    let region = own_region()?;
    Ok(region.arena.activity(region.worker))
}

/// This worker process's ring of events, in its line of the arena.
pub(crate) fn events() -> Result<&'static Ring> {
    let region = own_region()?;
    Ok(region.arena.events(region.worker))
}

/// This worker process's ring of its streams' instructions, in its line of the arena.
pub(crate) fn stream_events() -> Result<&'static Ring> {
    let region = own_region()?;
    Ok(region.arena.stream_events(region.worker))
}

/// The records of what every worker of this worker process's arena is doing, by their place in
/// it.
pub(crate) fn records() -> Result<Vec<Record>> {
    let region = own_region()?;
    let arena: &'static Arena = &region.arena;
    Ok((0..arena.workers)
        .map(|worker| Record::Mapped(arena.activity(worker)))
        .collect())
}

/// Where this worker process records what it has handled, in its line of the arena.
pub(crate) fn handled() -> Result<&'static Handled> {
    let region = own_region()?;
    Ok(region.arena.handled(region.worker))
}

fn own_region() -> Result<&'static Region> {
    REGION
        .get()
        .ok_or_else(|| Error::runtime("this worker process has no arena"))
}

/// This worker process's region, for a communicator in its arena.
fn region_for_ccl() -> Result<&'static Region> {
    REGION.get().ok_or_else(|| {
        Error::runtime("a communicator in the session's arena reached a worker without one")
    })
}

/// Communicator area `area` of this worker process's arena, as the controller laid it out.
pub(crate) fn ccl_area(area: usize) -> Result<CclArea> {
    region_for_ccl()?.arena.ccl_area(area)
}

/// Communicator area `area` of this worker process's arena, zeroed by this worker for a new
/// communicator, for a session whose controller is on another machine (the other workers here
/// take it with [`ccl_area`] once the communicator is made).
pub(crate) fn fresh_ccl_area(area: usize) -> Result<CclArea> {
    region_for_ccl()?.arena.fresh_ccl_area(area)
}

/// How many workers share this worker process's arena (its machine's); `None` for a worker
/// without an arena (a thread).
pub(crate) fn workers_in_arena() -> Option<usize> {
    REGION.get().map(|region| region.arena.workers)
}

/// A zeroed host tensor in this worker process's region of the arena; `None` when this process
/// has no arena, the device is not the host, or the region has no room (the caller allocates
/// elsewhere then).
pub(crate) fn empty(dims: &[i64], dtype: DLDataType, device: DLDevice) -> Result<Option<Tensor>> {
    let Some(region) = REGION.get() else {
        return Ok(None);
    };
    if device.device_type != KDL_CPU || device.device_id != 0 {
        return Ok(None);
    }
    let nbytes = check_new(dims, dtype)?;
    let Some(size) = nbytes.max(1).checked_next_multiple_of(ALIGN) else {
        return Ok(None);
    };
    let taken = region
        .blocks
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take(size);
    let Some((at, dirty)) = taken else {
        return Ok(None);
    };
    let start = region.arena.region_start(region.worker) + at;
    // SAFETY: `start .. start + size` lies in this worker's region (`take` keeps within it),
    // which only this process allocates from, and the block is nobody's until the tensor
    // below owns it.
    let data = unsafe { NonNull::new_unchecked(region.arena.memory.as_ptr().add(start)) };
    if dirty {
        // SAFETY: the block's `size` bytes, as above.
        unsafe { data.as_ptr().write_bytes(0, size) };
    }
    let release = release_with(data, move |_| {
        let unused = region
            .blocks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .put(at, size);
        if let Some(unused) = unused {
            let first = unused.start.next_multiple_of(page_size());
            let end = unused.end - unused.end % page_size();
            if first < end {
                let base = region.arena.region_start(region.worker);
                // SAFETY: whole pages of this worker's region that no tensor uses; removing
                // them only makes them read as zeros again.
                unsafe {
                    libc::madvise(
                        region.arena.memory.as_ptr().add(base + first).cast(),
                        end - first,
                        libc::MADV_REMOVE,
                    );
                }
            }
        }
    });
    // SAFETY: `nbytes` (checked by `check_new`) fit in the block, owned by the tensor now.
    Ok(Some(unsafe {
        Tensor::from_memory(dims, dtype, device, data, release)
    }))
}

fn page_size() -> usize {
    // SAFETY: a plain query.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// Where `tensor` lies in this worker process's region, if it does (compact host tensors
/// only).
fn locate(tensor: &Tensor) -> Option<ArenaTensor> {
    let region = REGION.get()?;
    let dl = tensor.dl();
    if dl.device.device_type != KDL_CPU || !tensor.is_contiguous() {
        return None;
    }
    let base = region.arena.memory.as_ptr() as usize;
    let start = region.arena.region_start(region.worker);
    let offset = (dl.data as usize).checked_sub(base)?;
    let end = offset
        .checked_add(usize::try_from(dl.byte_offset).ok()?)?
        .checked_add(tensor.nbytes())?;
    (offset >= start && end <= start + REGION_BYTES).then(|| ArenaTensor {
        segment: 0,
        offset: offset as u64,
        byte_offset: dl.byte_offset,
        dtype: dl.dtype,
        shape: tensor.shape().to_vec(),
    })
}

/// Lends `tensor` for the copy `request` asks for, if it lies in this worker's region: `reply`
/// sends where it lies, and the call returns once the controller gave it back. Returns false,
/// sending nothing, for a tensor outside the arena.
pub(crate) fn lend(
    tensor: &Tensor,
    request: u64,
    spin: SpinPolicy,
    reply: impl FnOnce(ArenaTensor) -> Result<()>,
) -> Result<bool> {
    let (Some(region), Some(place)) = (REGION.get(), locate(tensor)) else {
        return Ok(false);
    };
    reply(place)?;
    region.arena.wait_given_back(region.worker, request, spin)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_signals_set_by_the_controller_reach_its_mapping() {
        // Any size of communicator records will do here.
        let controller = Arena::create(2, 4096).unwrap();
        let fd = controller.fd().try_clone_to_owned().unwrap();
        let worker = Arena::attach(fd, 2, 4096).unwrap();
        let seen = worker.signals(1);
        assert!(!seen.stopping.load(Ordering::SeqCst));
        assert_eq!(seen.ccl_generation.load(Ordering::SeqCst), 0);
        controller.signals(1).stopping.store(true, Ordering::SeqCst);
        controller
            .signals(1)
            .ccl_generation
            .fetch_add(2, Ordering::SeqCst);
        assert!(seen.stopping.load(Ordering::SeqCst));
        assert_eq!(seen.ccl_generation.load(Ordering::SeqCst), 2);
        // Worker 0's line is its own.
        assert!(!worker.signals(0).stopping.load(Ordering::SeqCst));
        assert_eq!(worker.signals(0).ccl_generation.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn blocks_reuse_freed_space_first_fit_and_lower_the_top() {
        let mut blocks = Blocks::default();
        assert_eq!(blocks.take(64), Some((0, false)));
        assert_eq!(blocks.take(128), Some((64, false)));
        assert_eq!(blocks.take(64), Some((192, false)));
        assert_eq!(blocks.put(64, 128), None);
        // A freed block is reused, and zeroed again (dirty).
        assert_eq!(blocks.take(64), Some((64, true)));
        assert_eq!(blocks.free.get(&128), Some(&64));
        // Freeing next to a free block merges them; freeing the top lowers it.
        assert_eq!(blocks.put(64, 64), None);
        assert_eq!(blocks.free.get(&64), Some(&128));
        assert_eq!(blocks.put(192, 64), None);
        assert_eq!(blocks.top, 64);
        assert!(blocks.free.is_empty());
        assert_eq!(blocks.put(0, 64), None);
        assert_eq!(blocks.top, 0);
    }

    #[test]
    fn a_region_never_hands_out_more_than_it_has() {
        let mut blocks = Blocks::default();
        assert_eq!(blocks.take(REGION_BYTES + 64), None);
        assert_eq!(blocks.take(REGION_BYTES), Some((0, false)));
        assert_eq!(blocks.take(64), None);
        // A large top freed is given back to the system.
        assert_eq!(blocks.put(0, REGION_BYTES), Some(0..REGION_BYTES));
    }
}
