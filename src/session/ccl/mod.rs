//! Collectives between a session's workers. The CPU backend is shared memory between the
//! worker threads of one process: each participant posts the addresses of its buffers in its
//! slot of the team and publishes the collective's number there; the others spin on that
//! number (no lock, no shared counter), then each does its share of the work directly on the
//! others' memory: no copies through the controller, nothing serialised.
//!
//! Two ways to meet:
//! - Shared: participants read and write each other's buffers, so each also publishes when it
//!   is done with them, and nobody returns before everyone is. Reductions are split: worker
//!   `r` reduces slice `r` of every input and writes it into every output, a reduce-scatter
//!   and an all-gather in one pass.
//! - Staged (barriers, and small buffers when the team has more workers than CPUs): each
//!   participant first copies what the others read into its slot, and afterwards writes only
//!   its own outputs (an allreduce reduces the whole buffer on every worker). One meeting per
//!   collective: nobody waits for the others to finish, as they read only the staged copies,
//!   which stay untouched until everyone has joined the next collective (posts and copies
//!   alternate between two places by the collective's parity). When every worker has a CPU, a
//!   second meeting costs less than the copy and the others' reading it from this CPU's cache.
//!
//! Waiting: a waiter spins for the session's spin budget, then parks (the poster wakes
//! sleepers), as the awaited worker runs on another CPU and yielding would hand this CPU to
//! other processes. When the team has more workers than there are CPUs, or an awaited worker
//! last ran on this CPU, it yields a few times instead of spinning; and a worker that keeps
//! sharing its CPU with another member moves itself to another CPU.
//!
//! Errors. A worker whose own arguments are rejected still joins, with a post that says so,
//! and every participant fails. A worker whose arguments do not say whom to meet (a wrong
//! `in_group` type, a bad peer) breaks the communicator, as nobody could tell it will not
//! come. Workers that wait for each other in different teams (they disagree on `in_group` or
//! on which collective comes next) are found by the waiters, which break the communicator.
//! A worker that never joins: every join waits at most the session's timeout, then breaks the
//! communicator. Without a timeout, a join waits until the session shuts down, which breaks
//! the communicator and releases the waiters. A broken communicator fails every later
//! collective at once until `init_ccl` is called again.
//!
//! Breaking is safe with participants mid-way: a participant posts by moving its slot's number
//! forward with a compare-and-swap, and a waiter that sees the communicator broken locks every
//! slot still behind out of the collective with the same compare-and-swap. Each slot thus
//! either joined or was locked out, for good, and every participant reaches the same verdict:
//! all joined (everyone works, whatever broke meanwhile) or not (nobody works).

mod builtins;
#[cfg(all(test, loom))]
mod loom_model;
pub(crate) mod nccl;
mod reduce;

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ops::Index;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use crossbeam_utils::CachePadded;

pub use builtins::{register, stage, unstage};
pub use reduce::{ReduceOp, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

use crate::abi::DLDataType;
use crate::channel::{Sleeper, SpinPolicy};
use crate::device::cpu::{SharedCpuWatch, available_cpus, current_cpu};
use crate::object::tensor::dtype_name;
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use crate::sync::thread::{self, Thread};
use crate::sync::time::Instant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many times a spinning waiter polls between looks at the clock: about 5 µs (a PAUSE takes
/// about 25 ns on the 2-vCPU machines).
const SPINS: usize = 200;

/// How many times a waiter that yields does so before it parks. Enough for the other workers
/// sharing its CPU to take a turn; more would hurt when other processes run too, as each yield
/// puts this thread behind them for longer (the scheduler moves its deadline back a slice).
const YIELDS: usize = 16;

/// Collectives on buffers up to this size are staged when the team has more participants than
/// there are CPUs: each meeting then waits for threads to get a CPU, which costs more than a
/// copy. Otherwise a meeting costs less than staging (copying, and the others reading the
/// freshly written copy from this CPU's cache).
const STAGED_BYTES: usize = 16 << 10;

/// Set in a slot's number when its participant was locked out of that collective.
const LOCKED: u64 = 1 << 63;

/// One buffer a participant brings to a collective.
#[derive(Clone, Debug)]
pub(crate) struct Buf {
    pub addr: usize,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub nbytes: usize,
}

impl Buf {
    pub fn describe(&self) -> String {
        format!("{:?} {}", self.shape, dtype_name(self.dtype))
    }
}

/// A cache line of staged bytes (64-byte aligned, as tensors are).
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line(#[expect(dead_code, reason = "read and written through raw pointers")] [u8; 64]);

/// What a participant posts: which collective, its parameter, and its buffers.
#[derive(Default)]
pub(crate) struct Post {
    /// Why this participant cannot take part (its arguments were rejected); the others fail.
    pub failed: Option<String>,
    pub what: &'static str,
    pub param: i64,
    pub send: Option<Buf>,
    pub recv: Option<Buf>,
    /// The staged copy of `send`, kept from one collective to the next.
    staging: Vec<Line>,
}

impl Post {
    pub fn new(what: &'static str, param: i64, send: Option<Buf>, recv: Option<Buf>) -> Post {
        Post {
            what,
            param,
            send,
            recv,
            ..Post::default()
        }
    }

    pub fn failed(what: &'static str, why: String) -> Post {
        Post {
            failed: Some(why),
            what,
            ..Post::default()
        }
    }

    /// Copies `send` into the staging area and points `send` there.
    fn stage(&mut self) {
        let Some(send) = &mut self.send else {
            return;
        };
        let lines = send.nbytes.div_ceil(size_of::<Line>());
        if self.staging.len() < lines {
            self.staging.resize(lines, Line([0; 64]));
        }
        let staging = self.staging.as_mut_ptr().cast::<u8>();
        // SAFETY: `send` describes `nbytes` readable bytes of a tensor its owner holds for
        // the whole collective; the staging area holds at least `nbytes` bytes and is this
        // participant's alone until it publishes the post.
        unsafe { std::ptr::copy_nonoverlapping(send.addr as *const u8, staging, send.nbytes) };
        send.addr = staging as usize;
    }
}

/// One participant's post for collectives of one parity. Its owner writes it and the others
/// read it without a lock: the collective numbers keep the two apart (see `Slot`).
#[derive(Default)]
struct PostCell(UnsafeCell<Post>);

// SAFETY: `Slot` says when a post may be read and written: its owner writes it only while
// nobody reads it, and the others read it only after an acquire load that sees the number its
// owner published (release) after writing it.
unsafe impl Sync for PostCell {}

/// Everyone's posts for the collective under way, by rank.
pub(crate) struct Posts<'a> {
    team: &'a Team,
    parity: usize,
}

impl Posts<'_> {
    pub fn len(&self) -> usize {
        self.team.slots.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Post> {
        (0..self.len()).map(|r| &self[r])
    }
}

impl Index<usize> for Posts<'_> {
    type Output = Post;
    fn index(&self, rank: usize) -> &Post {
        // SAFETY: `Posts` exists only while its collective is under way, after everyone
        // joined it: nobody writes these posts until everyone has joined the next collective,
        // which the holder of this value has not.
        unsafe { &*self.team.slots[rank].posts[self.parity].0.get() }
    }
}

/// One participant's place in a team. Only its participant writes it, except that a waiter
/// may lock it out of a collective after the communicator broke.
///
/// The posts alternate by the parity of the collective's number. The owner writes post `s`
/// before it publishes `s` in `joined`; the others read it after they see `s` there, until
/// they join `s + 1`. The owner writes the same place again for `s + 2`, which it starts only
/// after everyone joined `s + 1`: by then nobody reads post `s`.
#[derive(Default)]
struct Slot {
    /// The number of the last collective it joined (its post is ready), or that number with
    /// `LOCKED` set if it was locked out of it.
    joined: CachePadded<AtomicU64>,
    /// The number of the last shared collective it finished its work on.
    left: CachePadded<AtomicU64>,
    /// The CPU its participant ran on when it last posted (`usize::MAX`: unknown).
    cpu: CachePadded<AtomicUsize>,
    /// Its posts, by the parity of the collective's number.
    posts: [CachePadded<PostCell>; 2],
}

/// The participants of a collective: the whole session, one group, or a pair.
pub(crate) struct Team {
    /// Global worker ids, by rank.
    pub members: Vec<usize>,
    /// How messages name the team.
    name: String,
    slots: Vec<Slot>,
    /// More participants than CPUs: they take turns on the CPUs.
    crowded: bool,
}

impl Team {
    fn new(members: Vec<usize>, name: String) -> Arc<Team> {
        Arc::new(Team {
            crowded: members.len() > available_cpus(),
            slots: members.iter().map(|_| Slot::default()).collect(),
            members,
            name,
        })
    }

    /// Whether a collective on buffers of `nbytes` is staged (see `STAGED_BYTES`).
    pub fn staged(&self, nbytes: usize) -> bool {
        self.crowded && nbytes <= STAGED_BYTES
    }

    fn rank_of(&self, worker: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == worker)
    }

    /// The ranks that have not joined collective `seq` (nor been locked out of it).
    fn missing(&self, seq: u64) -> impl Iterator<Item = usize> {
        (0..self.slots.len()).filter(move |&r| self.slots[r].joined.load(Ordering::Acquire) < seq)
    }
}

/// A worker as the communicator knows it.
#[derive(Default)]
struct Waiter {
    sleeper: Sleeper,
    thread: OnceLock<Thread>,
    /// The team, number and name of the collective it last waited on for long: the others
    /// look here for workers that wait for each other in different teams.
    waits_in: Mutex<Option<(Arc<Team>, u64, &'static str)>>,
    /// Moves it off a CPU it keeps sharing with another member (only it locks this).
    shared_cpu: Mutex<SharedCpuWatch>,
}

/// The in-process communicator of one session: the whole session, each group, and pairs for
/// point-to-point transfers (made when first used).
pub struct CpuCcl {
    num_workers: usize,
    world: Arc<Team>,
    groups: Vec<Arc<Team>>,
    pairs: Mutex<HashMap<(usize, usize), Arc<Team>>>,
    waiters: Vec<Waiter>,
    broken: AtomicBool,
    /// Why the communicator broke (set before `broken`).
    why: Mutex<Option<Error>>,
    timeout: Option<Duration>,
    spin: SpinPolicy,
}

impl CpuCcl {
    pub fn new(
        num_workers: usize,
        num_groups: usize,
        timeout: Option<Duration>,
        spin: SpinPolicy,
    ) -> CpuCcl {
        let per_group = num_workers / num_groups;
        CpuCcl {
            num_workers,
            world: Team::new((0..num_workers).collect(), "the session".into()),
            groups: (0..num_groups)
                .map(|g| {
                    let members: Vec<usize> = (g * per_group..(g + 1) * per_group).collect();
                    let name = format!("group {g} (workers {members:?})");
                    Team::new(members, name)
                })
                .collect(),
            pairs: Mutex::new(HashMap::new()),
            waiters: (0..num_workers).map(|_| Waiter::default()).collect(),
            broken: AtomicBool::new(false),
            why: Mutex::new(None),
            timeout,
            spin,
        }
    }

    pub fn num_workers(&self) -> usize {
        self.num_workers
    }

    /// Records the calling thread as worker `id`'s, so that posts can wake it.
    pub(crate) fn adopt(&self, id: usize) {
        let _ = self.waiters[id].thread.set(thread::current());
    }

    /// The team of worker `id`: the session, or its group.
    pub(crate) fn team(&self, id: usize, in_group: bool) -> (&Arc<Team>, usize) {
        if in_group {
            let per_group = self.num_workers / self.groups.len();
            (&self.groups[id / per_group], id % per_group)
        } else {
            (&self.world, id)
        }
    }

    /// The pair team for transfers from `from` to `to` (rank 0 sends, rank 1 receives).
    pub(crate) fn pair(&self, from: usize, to: usize) -> Arc<Team> {
        lock(&self.pairs)
            .entry((from, to))
            .or_insert_with(|| {
                Team::new(
                    vec![from, to],
                    format!("the transfer from worker {from} to worker {to}"),
                )
            })
            .clone()
    }

    /// Breaks the communicator: waiting workers fail with `error` (unless their collective
    /// was complete), later collectives at once. The first error stays.
    pub fn abort(&self, error: &Error) {
        lock(&self.why).get_or_insert_with(|| error.clone());
        self.broken.store(true, Ordering::Release);
        fence(Ordering::SeqCst);
        for waiter in &self.waiters {
            if let Some(thread) = waiter.thread.get() {
                waiter.sleeper.wake_fenced(thread);
            }
        }
    }

    fn why(&self) -> Error {
        lock(&self.why)
            .clone()
            .unwrap_or_else(|| Error::runtime("the communicator is broken"))
    }

    /// Wakes the other members of `team` that sleep (after this thread published progress).
    fn wake(&self, team: &Team, me: usize) {
        fence(Ordering::SeqCst);
        for &m in team.members.iter().filter(|&&m| m != me) {
            let waiter = &self.waiters[m];
            if let Some(thread) = waiter.thread.get() {
                waiter.sleeper.wake_fenced(thread);
            }
        }
    }

    /// Runs one collective as participant `rank` of `team`: posts (staging `send` first when
    /// `staged`), waits until everyone joined, checks everyone's posts with `check` (the same
    /// verdict on every participant), runs `work` if they agree, and, unless `staged`, waits
    /// until everyone is done with everyone's buffers.
    pub(crate) fn run(
        &self,
        team: &Arc<Team>,
        rank: usize,
        mut post: Post,
        staged: bool,
        check: impl FnOnce(&Posts) -> Result<()>,
        work: impl FnOnce(&Posts),
    ) -> Result<()> {
        let slot = &team.slots[rank];
        let last = slot.joined.load(Ordering::Relaxed);
        if self.broken.load(Ordering::Acquire) || last & LOCKED != 0 {
            return Err(self.why());
        }
        let seq = last + 1;
        let what = post.what;
        let parity = (seq % 2) as usize;
        // SAFETY: nobody reads this post: everyone joined collective `seq - 1` (this
        // participant saw them), so everyone is done with `seq - 2`, the last to use it.
        let mine = unsafe { &mut *slot.posts[parity].0.get() };
        post.staging = std::mem::take(&mut mine.staging);
        if staged {
            post.stage();
        }
        *mine = post;
        slot.cpu
            .store(current_cpu().unwrap_or(usize::MAX), Ordering::Relaxed);
        if slot
            .joined
            .compare_exchange(last, seq, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(self.why()); // locked out meanwhile
        }
        let me = team.members[rank];
        self.wake(team, me);
        self.join(team, rank, seq, what)?;
        let posts = Posts { team, parity };
        let verdict = match posts.iter().position(|p| p.failed.is_some()) {
            Some(r) => Err(Error::value(format!(
                "{what}: worker {} could not take part ({})",
                team.members[r],
                posts[r].failed.as_deref().unwrap_or_default()
            ))),
            None => check(&posts),
        };
        if verdict.is_ok() {
            work(&posts);
        }
        if verdict.is_ok() && !staged {
            // Nobody may return (and free or reuse a buffer) until everyone is done with it.
            slot.left.store(seq, Ordering::Release);
            self.wake(team, me);
            let done = || {
                team.slots
                    .iter()
                    .all(|s| s.left.load(Ordering::Acquire) >= seq)
                    .then_some(())
            };
            self.wait(team, me, None, what, || Ok(()), done)?;
        }
        verdict
    }

    /// Waits until every participant joined collective `seq`, the deadline passes, or the
    /// communicator breaks; then every slot has joined or was locked out, and the verdict is
    /// the same on every participant.
    fn join(&self, team: &Arc<Team>, rank: usize, seq: u64, what: &'static str) -> Result<()> {
        let me = team.members[rank];
        let joined = || {
            let mut pending = false;
            for slot in &team.slots {
                let n = slot.joined.load(Ordering::Acquire);
                if n & LOCKED != 0 {
                    return Some(Err(self.why()));
                }
                pending |= n < seq;
            }
            if !pending {
                Some(Ok(()))
            } else if self.broken.load(Ordering::Acquire) {
                Some(self.lock_out(team, seq))
            } else {
                None
            }
        };
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let waited = self.wait(
            team,
            me,
            deadline,
            what,
            || {
                *lock(&self.waiters[me].waits_in) = Some((team.clone(), seq, what));
                if let Some(error) = self.crossed(team, rank, seq, what) {
                    self.abort(&error);
                }
                Ok(())
            },
            joined,
        );
        match waited {
            Ok(verdict) => verdict,
            Err(_) => {
                let missing: Vec<String> = team
                    .missing(seq)
                    .map(|r| team.members[r].to_string())
                    .collect();
                self.abort(&Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{what}: not every worker of {:?} joined within the session's \
                         timeout (the communicator is now broken; call init_ccl again){}",
                        team.members,
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!("; missing: worker {}", missing.join(", "))
                        }
                    ),
                ));
                self.lock_out(team, seq)
            }
        }
    }

    /// Worker `me` (the calling thread) waits until `poll` gives a value, then parks (`slow`
    /// runs before it parks and whenever a park ends). Before parking it spins for the
    /// session's spin budget, as the awaited worker runs on another CPU (yielding would hand
    /// this CPU to other processes for a while); but when the team is crowded, or an awaited
    /// worker last ran on this CPU, it yields `YIELDS` times instead. A worker that keeps
    /// sharing its CPU with a member of lower id moves to another CPU.
    fn wait<T>(
        &self,
        team: &Team,
        me: usize,
        deadline: Option<Instant>,
        what: &str,
        mut slow: impl FnMut() -> Result<()>,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        if let Some(value) = poll() {
            return Ok(value);
        }
        let waiter = &self.waiters[me];
        let share = team.crowded || {
            let cpu = current_cpu();
            let (mut below, mut above) = (false, false);
            for (slot, &m) in team.slots.iter().zip(&team.members) {
                if m != me && cpu == Some(slot.cpu.load(Ordering::Relaxed)) {
                    below |= m < me;
                    above |= m > me;
                }
            }
            lock(&waiter.shared_cpu).note(if below { cpu } else { None });
            below || above
        };
        if self.spin.budget.is_zero() {
            // Parks at once, as the session asks.
        } else if share {
            for _ in 0..YIELDS {
                if let Some(value) = poll() {
                    return Ok(value);
                }
                thread::yield_now();
            }
        } else {
            let end = Instant::now() + self.spin.budget;
            while Instant::now() < end {
                for _ in 0..SPINS {
                    if let Some(value) = poll() {
                        return Ok(value);
                    }
                    crate::sync::spin_loop();
                }
            }
        }
        slow()?;
        let park = SpinPolicy {
            budget: Duration::ZERO,
        };
        waiter.sleeper.wait(
            park,
            deadline,
            || format!("{what} in {}", team.name),
            slow,
            poll,
        )
    }

    /// Locks every participant that has not joined collective `seq` out of it; Ok if nobody
    /// had to be (the collective is complete).
    fn lock_out(&self, team: &Team, seq: u64) -> Result<()> {
        let mut complete = true;
        for slot in &team.slots {
            let mut n = slot.joined.load(Ordering::Acquire);
            while n & LOCKED == 0 && n < seq {
                match slot.joined.compare_exchange(
                    n,
                    LOCKED | seq,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => n = LOCKED | seq,
                    Err(now) => n = now,
                }
            }
            complete &= n & LOCKED == 0;
        }
        if complete { Ok(()) } else { Err(self.why()) }
    }

    /// Whether a worker this one waits for in `team` itself waits in another team for this
    /// one: then neither can go on, and the error says why.
    fn crossed(&self, team: &Arc<Team>, rank: usize, seq: u64, what: &str) -> Option<Error> {
        let me = team.members[rank];
        team.missing(seq).find_map(|r| {
            let other = team.members[r];
            let (theirs, their_seq, their_what) = lock(&self.waiters[other].waits_in).clone()?;
            let mine = theirs.rank_of(me)?;
            if Arc::ptr_eq(&theirs, team)
                || theirs.slots[mine].joined.load(Ordering::Acquire) >= their_seq
            {
                return None;
            }
            Some(Error::value(format!(
                "{what}: worker {me} waits for worker {other} in {}, but worker {other} \
                 waits for worker {me} in `{their_what}` in {}: the workers disagree on \
                 in_group or on which collective comes next (the communicator is now broken; \
                 call init_ccl again)",
                team.name, theirs.name
            )))
        })
    }
}
