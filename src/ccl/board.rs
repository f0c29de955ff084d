//! Where a CPU communicator's shared state lives: the same records between the threads of one
//! process (on the heap) and between worker processes (in an area of the session's arena),
//! so one protocol serves both.
//!
//! The one idea: everything the participants share is a fixed-size record of atomics and plain
//! bytes (no pointers, no heap strings), valid when zeroed, and a buffer is posted as its
//! offset from a base each process knows: 0 on the heap, where addresses are shared, and the
//! start of the arena's mapping in shared memory, which each process maps at its own address.
//! An area for `n` workers holds the header (broken flag and why), one waiter line per worker,
//! then the teams' slots: the session's `n`, the groups' `n`, and two for each ordered pair.

use std::cell::UnsafeCell;
#[cfg(not(loom))]
use std::ptr::NonNull;
#[cfg(not(loom))]
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::abi::DLDataType;
use crate::channel::SharedSleeper;
use crate::object::tensor::dtype_name;
use crate::object::{Error, ErrorKind, Result, Tensor};
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Dimensions a buffer of a collective may have.
pub(crate) const MAX_DIMS: usize = 8;

/// A message in fixed bytes (cut at a character boundary when too long).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct Text<const N: usize> {
    len: u32,
    bytes: [u8; N],
}

impl<const N: usize> Text<N> {
    pub fn new(text: &str) -> Self {
        let mut len = text.len().min(N);
        while !text.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0; N];
        bytes[..len].copy_from_slice(&text.as_bytes()[..len]);
        Text {
            len: len as u32,
            bytes,
        }
    }

    pub fn get(&self) -> String {
        let len = (self.len as usize).min(N);
        String::from_utf8_lossy(&self.bytes[..len]).into_owned()
    }
}

/// One buffer a participant brings to a collective: where it lies (an address in the reader's
/// process once resolved; an offset from the base while posted), its size, dtype and shape.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buf {
    pub addr: usize,
    pub nbytes: usize,
    pub dtype: DLDataType,
    ndim: u32,
    dims: [i64; MAX_DIMS],
}

impl Buf {
    /// No buffer (in a post that has none).
    pub const NONE: Buf = Buf {
        addr: 0,
        nbytes: 0,
        dtype: DLDataType {
            code: 0,
            bits: 0,
            lanes: 0,
        },
        ndim: 0,
        dims: [0; MAX_DIMS],
    };

    pub fn new(addr: usize, dtype: DLDataType, shape: &[i64], nbytes: usize) -> Result<Buf> {
        if shape.len() > MAX_DIMS {
            return Err(Error::value(format!(
                "the collectives take tensors of at most {MAX_DIMS} dimensions, not {}",
                shape.len()
            )));
        }
        let mut dims = [0; MAX_DIMS];
        dims[..shape.len()].copy_from_slice(shape);
        Ok(Buf {
            addr,
            nbytes,
            dtype,
            ndim: shape.len() as u32,
            dims,
        })
    }

    /// A compact tensor's memory as a buffer.
    pub fn of(tensor: &Tensor) -> Result<Buf> {
        Buf::new(
            tensor.data_ptr() as usize,
            tensor.dl().dtype,
            tensor.shape(),
            tensor.nbytes(),
        )
    }

    /// The same buffer at another address.
    pub fn at(&self, addr: usize) -> Buf {
        Buf { addr, ..*self }
    }

    pub fn shape(&self) -> &[i64] {
        &self.dims[..(self.ndim as usize).min(MAX_DIMS)]
    }

    pub fn describe(&self) -> String {
        format!("{:?} {}", self.shape(), dtype_name(self.dtype))
    }
}

/// A post as it lies in a slot (see `Post` for the participant's view of it).
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct PostRecord {
    pub what: u32,
    /// `FAILED`, `SEND`, `RECV`, `SEND_SHARED`, `RECV_SHARED`, `STAGED`.
    pub flags: u32,
    pub param: i64,
    /// The number of the poster's call, when that call went to every worker; 0 otherwise.
    pub call: u64,
    pub send: Buf,
    pub recv: Buf,
    pub failed: Text<240>,
}

pub(super) const FAILED: u32 = 1;
pub(super) const SEND: u32 = 2;
pub(super) const RECV: u32 = 4;
/// The buffer lies in memory every participant reaches, at its posted offset from the base.
pub(super) const SEND_SHARED: u32 = 8;
pub(super) const RECV_SHARED: u32 = 16;
/// The send buffer is a copy nobody touches until everyone has joined the next collective.
pub(super) const STAGED: u32 = 32;

/// One participant's post for collectives of one parity: its owner writes it and the others
/// read it without a lock, the collective numbers keeping the two apart (see `Slot`).
pub(super) struct PostCell(pub UnsafeCell<PostRecord>);

// SAFETY: `Slot` says when a post may be read and written: its owner writes it only while
// nobody reads it, and the others read it only after an acquire load that sees the number its
// owner published (release) after writing it.
unsafe impl Sync for PostCell {}

/// One participant's place in a team. Only its participant writes it, except that a waiter
/// may lock it out of a collective after the communicator broke.
///
/// The posts alternate by the parity of the collective's number. The owner writes post `s`
/// before it publishes `s` in `joined`; the others read it after they see `s` there, until
/// they join `s + 1`. The owner writes the same place again for `s + 2`, which it starts only
/// after everyone joined `s + 1`: by then nobody reads post `s`.
#[repr(C)]
pub(super) struct Slot {
    /// The number of the last collective it joined (its post is ready), or that number with
    /// `LOCKED` set if it was locked out of it, or with `SKIPPED` set if another participant
    /// joined it on its behalf as skipped (its worker finished the collective's call without
    /// joining; it posted nothing).
    pub joined: CachePadded<AtomicU64>,
    /// The number of the last collective it finished its work on (when others use its
    /// buffers).
    pub left: CachePadded<AtomicU64>,
    /// The CPU its participant ran on when it last posted (`u64::MAX`: unknown).
    pub cpu: CachePadded<AtomicU64>,
    pub posts: [CachePadded<PostCell>; 2],
}

impl Default for Slot {
    fn default() -> Slot {
        // SAFETY: a record of integers and bytes: all zeros is a valid one.
        let empty = || CachePadded::new(PostCell(UnsafeCell::new(unsafe { std::mem::zeroed() })));
        Slot {
            joined: CachePadded::default(),
            left: CachePadded::default(),
            cpu: CachePadded::default(),
            posts: [empty(), empty()],
        }
    }
}

/// Why the communicator broke, written once by whoever breaks it first.
#[repr(C)]
struct ErrorRecord {
    /// 0: nothing yet; 1: being written; 2: written.
    state: AtomicU32,
    kind: UnsafeCell<Text<28>>,
    message: UnsafeCell<Text<1024>>,
}

/// The communicator's own state.
#[repr(C)]
pub(super) struct Header {
    broken: CachePadded<AtomicU32>,
    why: ErrorRecord,
}

// SAFETY: the error record's bytes are written by one breaker (the one whose compare-and-swap
// took the record) before it publishes state 2 (release), and read only after an acquire load
// of that state.
unsafe impl Sync for Header {}

impl Default for Header {
    fn default() -> Header {
        Header {
            broken: CachePadded::default(),
            why: ErrorRecord {
                state: AtomicU32::new(0),
                kind: UnsafeCell::new(Text::new("")),
                message: UnsafeCell::new(Text::new("")),
            },
        }
    }
}

impl Header {
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire) != 0
    }

    /// Records `error` unless another error was recorded first, then marks the communicator
    /// broken.
    pub fn record(&self, error: &Error) {
        let why = &self.why;
        if why
            .state
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            // SAFETY: the compare-and-swap made this the one writer of the record.
            unsafe {
                *why.kind.get() = Text::new(error.kind.name());
                *why.message.get() = Text::new(&error.message);
            }
            why.state.store(2, Ordering::Release);
        }
        self.broken.store(1, Ordering::Release);
    }

    /// Why the communicator broke (a generic reason while the first breaker still writes it,
    /// or if it died doing so).
    pub fn why(&self) -> Error {
        let why = &self.why;
        if why.state.load(Ordering::Acquire) != 2 {
            return Error::runtime("the communicator is broken");
        }
        // SAFETY: state 2 (acquire) means the record is written and stays so.
        let (kind, message) = unsafe { ((*why.kind.get()).get(), (*why.message.get()).get()) };
        Error::new(ErrorKind::from_name(&kind), message)
    }
}

/// A worker as the communicator's members see it.
#[repr(C, align(128))]
pub(super) struct WaiterLine {
    /// It sleeps on this when it waits for long.
    pub sleeper: SharedSleeper,
    /// The team, collective and its number it last waited on for long, packed by
    /// [`pack_wait`] (0: none): the others look here for workers that wait for each other in
    /// different teams.
    pub waits_in: AtomicU64,
}

impl Default for WaiterLine {
    fn default() -> WaiterLine {
        WaiterLine {
            sleeper: SharedSleeper::new(),
            waits_in: AtomicU64::new(0),
        }
    }
}

const SEQ_BITS: u32 = 40;
const WHAT_BITS: u32 = 4;

/// One word for where a worker waits: team index + 1, collective code and number.
pub(super) fn pack_wait(team: usize, what: u32, seq: u64) -> u64 {
    let team = team as u64 + 1;
    if team >= 1 << (64 - SEQ_BITS - WHAT_BITS) || seq >= 1 << SEQ_BITS {
        return 0; // not recorded: too many teams or collectives to say
    }
    team << (SEQ_BITS + WHAT_BITS) | u64::from(what) << SEQ_BITS | seq
}

/// The team index, collective code and number of a word from [`pack_wait`].
pub(super) fn unpack_wait(word: u64) -> Option<(usize, u32, u64)> {
    let team = (word >> (SEQ_BITS + WHAT_BITS)).checked_sub(1)?;
    let what = (word >> SEQ_BITS) as u32 & ((1 << WHAT_BITS) - 1);
    Some((team as usize, what, word & ((1 << SEQ_BITS) - 1)))
}

/// Where a team's slots are.
pub(super) enum SlotsAt {
    Heap(Box<[Slot]>),
    #[cfg(not(loom))]
    Shared(NonNull<Slot>, usize),
}

impl SlotsAt {
    pub fn get(&self) -> &[Slot] {
        match self {
            SlotsAt::Heap(slots) => slots,
            // SAFETY: `len` slots of the area, which the board keeps mapped for as long as
            // its communicator (and its teams) live.
            #[cfg(not(loom))]
            SlotsAt::Shared(at, len) => unsafe { std::slice::from_raw_parts(at.as_ptr(), *len) },
        }
    }
}

// SAFETY: slots are atomics and cells with the protocol's own rules (see `Slot`).
unsafe impl Send for SlotsAt {}
unsafe impl Sync for SlotsAt {}

/// Where the communicator's records live.
enum Memory {
    Heap {
        header: Box<Header>,
        waiters: Box<[WaiterLine]>,
    },
    #[cfg(not(loom))]
    Shared {
        area: NonNull<u8>,
        /// Where offsets count from, and how many bytes from there every participant maps.
        base: usize,
        len: usize,
        /// Keeps the mapping.
        _mapping: Arc<dyn Send + Sync>,
    },
}

/// A communicator's shared records for `n` workers.
pub(super) struct Board {
    n: usize,
    memory: Memory,
}

// SAFETY: the records are atomics and cells with the protocol's own rules; the area pointer
// stays valid while `_mapping` lives.
unsafe impl Send for Board {}
unsafe impl Sync for Board {}

impl Board {
    /// Records on the heap, for worker threads of this process.
    pub fn heap(n: usize) -> Board {
        Board {
            n,
            memory: Memory::Heap {
                header: Box::default(),
                waiters: (0..n).map(|_| WaiterLine::default()).collect(),
            },
        }
    }

    /// Bytes an area for `n` workers takes.
    #[cfg(not(loom))]
    pub fn area_bytes(n: usize) -> Option<usize> {
        Self::slot_count(n)?
            .checked_mul(size_of::<Slot>())?
            .checked_add(Self::slots_start(n)?)
    }

    /// Where the waiter lines start: after the header, on a line of their own.
    #[cfg(not(loom))]
    const WAITERS_START: usize = size_of::<Header>().next_multiple_of(128);

    #[cfg(not(loom))]
    fn slots_start(n: usize) -> Option<usize> {
        n.checked_mul(size_of::<WaiterLine>())?
            .checked_add(Self::WAITERS_START)
    }

    /// Slots of an area: the session's `n`, the groups' `n`, two per ordered pair.
    #[cfg(not(loom))]
    fn slot_count(n: usize) -> Option<usize> {
        n.checked_mul(n)?.checked_mul(2)?.checked_add(2 * n)
    }

    /// The records in `area`, shared with other processes that map the same memory: offsets
    /// count from `base`, and `len` bytes from there are mapped in every participant.
    ///
    /// # Safety
    /// `area` holds [`Board::area_bytes`]`(n)` bytes, 128-byte aligned, zeroed when the
    /// communicator was made and used for nothing else while `mapping` lives.
    #[cfg(not(loom))]
    pub unsafe fn shared(
        n: usize,
        area: NonNull<u8>,
        base: usize,
        len: usize,
        mapping: Arc<dyn Send + Sync>,
    ) -> Board {
        Board {
            n,
            memory: Memory::Shared {
                area,
                base,
                len,
                _mapping: mapping,
            },
        }
    }

    pub fn workers(&self) -> usize {
        self.n
    }

    pub fn header(&self) -> &Header {
        match &self.memory {
            Memory::Heap { header, .. } => header,
            // SAFETY: the area starts with the header (see `Board::shared`).
            #[cfg(not(loom))]
            Memory::Shared { area, .. } => unsafe { &*area.as_ptr().cast::<Header>() },
        }
    }

    pub fn waiter(&self, worker: usize) -> &WaiterLine {
        match &self.memory {
            Memory::Heap { waiters, .. } => &waiters[worker],
            #[cfg(not(loom))]
            Memory::Shared { area, .. } => {
                assert!(worker < self.n, "worker {worker} has no waiter line");
                let lines = area.as_ptr().wrapping_add(Self::WAITERS_START);
                // SAFETY: the waiter lines follow the header (see `Board::area_bytes`).
                unsafe { &*lines.cast::<WaiterLine>().add(worker) }
            }
        }
    }

    /// The slots of the team with `index` (0: the session, `1 + g`: group `g`, then
    /// `1 + groups + from * n + to`: the transfer from `from` to `to`) and `len` members.
    pub fn slots(&self, index: usize, groups: usize, len: usize) -> SlotsAt {
        match &self.memory {
            Memory::Heap { .. } => SlotsAt::Heap((0..len).map(|_| Slot::default()).collect()),
            #[cfg(not(loom))]
            Memory::Shared { area, .. } => {
                let n = self.n;
                let first = match index {
                    0 => 0,
                    i if i <= groups => n + (i - 1) * (n / groups),
                    i => 2 * n + (i - 1 - groups) * 2,
                };
                // Both were checked when the area was sized (`area_bytes`).
                let (count, slots_start) = (Self::slot_count(n), Self::slots_start(n));
                assert!(
                    count.is_some_and(|count| first + len <= count),
                    "team {index} lies outside the communicator's area"
                );
                let start = slots_start.expect("sized") + first * size_of::<Slot>();
                // SAFETY: within the area, checked above.
                let at = unsafe { NonNull::new_unchecked(area.as_ptr().add(start).cast()) };
                SlotsAt::Shared(at, len)
            }
        }
    }

    /// `buf` as posted: its offset from the base, if every participant reaches it.
    pub fn share(&self, buf: &Buf) -> Option<Buf> {
        match &self.memory {
            Memory::Heap { .. } => Some(*buf),
            #[cfg(not(loom))]
            Memory::Shared { base, len, .. } => {
                let offset = buf.addr.checked_sub(*base)?;
                (offset.checked_add(buf.nbytes)? <= *len).then(|| buf.at(offset))
            }
        }
    }

    /// A posted buffer as an address in this process; None if it lies outside the memory
    /// everyone maps.
    pub fn resolve(&self, posted: &Buf) -> Option<Buf> {
        match &self.memory {
            Memory::Heap { .. } => Some(*posted),
            #[cfg(not(loom))]
            Memory::Shared { base, len, .. } => (posted.addr.checked_add(posted.nbytes)? <= *len)
                .then(|| posted.at(base + posted.addr)),
        }
    }

    /// Room for `nbytes` of staged copies that every participant reaches.
    pub fn staging(&self, nbytes: usize) -> Result<Staging> {
        match &self.memory {
            Memory::Heap { .. } => Ok(Staging::Heap(vec![Line([0; 64]); nbytes.div_ceil(64)])),
            #[cfg(not(loom))]
            Memory::Shared { .. } => {
                let dims = [i64::try_from(nbytes).unwrap_or(i64::MAX)];
                let u8 = DLDataType {
                    code: crate::abi::KDL_UINT,
                    bits: 8,
                    lanes: 1,
                };
                crate::worker::arena::empty(&dims, u8, crate::abi::DLDevice::cpu())?
                    .map(Staging::Shared)
                    .ok_or_else(|| {
                        Error::value(format!(
                            "no room to stage {nbytes} bytes in this worker's part of the \
                             session's shared memory"
                        ))
                    })
            }
        }
    }
}

/// A cache line of staged bytes (64-byte aligned, as tensors are).
#[derive(Clone, Copy)]
#[repr(align(64))]
pub(super) struct Line(
    #[expect(dead_code, reason = "read and written through raw pointers")] [u8; 64],
);

/// Where a participant keeps its staged copies.
pub(super) enum Staging {
    Heap(Vec<Line>),
    #[cfg(not(loom))]
    Shared(crate::object::Tensor),
}

impl Staging {
    pub fn len(&self) -> usize {
        match self {
            Staging::Heap(lines) => lines.len() * size_of::<Line>(),
            #[cfg(not(loom))]
            Staging::Shared(tensor) => tensor.nbytes(),
        }
    }

    pub fn ptr(&mut self) -> *mut u8 {
        match self {
            Staging::Heap(lines) => lines.as_mut_ptr().cast(),
            #[cfg(not(loom))]
            Staging::Shared(tensor) => tensor.data_ptr().cast(),
        }
    }
}
