//! The CPU communicator: the teams of a session's workers (the session, each group, and pairs
//! for transfers) and the protocol by which a team's members meet for each collective.
//!
//! The one idea: each participant posts its buffers in its slot of the team and publishes the
//! collective's number there with a compare-and-swap; the others wait for that number (no lock,
//! no shared counter), read everyone's posts and do their share of the work directly on the
//! others' memory. A waiter that finds the communicator broken locks every slot still behind out
//! with the same compare-and-swap, so every participant reaches the same verdict (see the guide's
//! page on collectives, docs/collectives.md, for the whole protocol).

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ops::Index;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::board::{
    Board, Buf, FAILED, PostRecord, RECV, RECV_SHARED, SEND, SEND_SHARED, STAGED, SlotsAt, Staging,
    Text, pack_wait,
};
use super::collective::{Collective, what_of};
use crate::channel::Deadline;
use crate::channel::{PARK_SLICE, SpinPolicy};
use crate::device::cpu::{SharedCpuWatch, available_cpus, current_cpu};
use crate::object::{Error, ErrorKind, Result};
use crate::sync::atomic::{Ordering, fence};
use crate::sync::thread;
use crate::sync::time::Instant;
use crate::worker::activity::{self, Record};
use crate::worker::events;

#[cfg(not(loom))]
use crate::worker::arena::{self, CclArea};

mod passed;

pub(crate) use passed::passed_error;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many times a spinning waiter polls between looks at the clock: a few microseconds.
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
/// Set in a slot's number when another participant joined that collective for it, as skipped:
/// its worker finished the call the collective belongs to without joining (its function failed
/// first, or returned). Everyone in the collective fails it; the skipped participant's next
/// collective is the one after.
const SKIPPED: u64 = 1 << 62;

/// How a collective meets, as one participant sees it once everyone joined.
enum Meeting {
    Posts(Posts),
    Failed(Error),
    /// This participant's worker runs a later call than some others': it joins the next one.
    Later,
}

/// The id of the first worker of the session among those whose ids `team` numbers (0 but on a
/// node of a session across machines, whose communicator numbers its own workers from 0), as
/// participant `rank`, the calling worker, finds it.
fn first_id(team: &Team, rank: usize) -> usize {
    crate::worker::current()
        .and_then(|info| info.id.checked_sub(team.members[rank]))
        .unwrap_or(0)
}

/// A slot's collective number, without its marks.
fn number(joined: u64) -> u64 {
    joined & !(LOCKED | SKIPPED)
}

/// What a participant posts, as it sees it: which collective, its parameter, and its buffers
/// (addresses in this process).
#[derive(Clone)]
pub(crate) struct Post {
    /// Why this participant cannot take part (its arguments were rejected); the others fail.
    pub failed: Option<String>,
    pub what: Collective,
    pub param: i64,
    pub send: Option<Buf>,
    pub recv: Option<Buf>,
    /// It takes part the staged way: its `send` is a staged copy, and nobody else touches its
    /// `recv`.
    staged: bool,
    /// The number of its worker's call, when that call went to every worker; 0 otherwise.
    call: u64,
}

impl Post {
    pub fn new(what: Collective, param: i64, send: Option<Buf>, recv: Option<Buf>) -> Post {
        Post {
            failed: None,
            what,
            param,
            send,
            recv,
            staged: false,
            call: 0,
        }
    }

    pub fn failed(what: Collective, why: String) -> Post {
        Post {
            failed: Some(why),
            ..Post::new(what, 0, None, None)
        }
    }

    /// The post as it lies in a slot, buffers as offsets on `board`.
    fn record(&self, board: &Board) -> PostRecord {
        let mut flags = 0;
        let mut place = |buf: &Option<Buf>, present: u32, shared: u32| match buf {
            None => Buf::NONE,
            Some(buf) => {
                flags |= present;
                board
                    .share(buf)
                    .inspect(|_| flags |= shared)
                    .unwrap_or(*buf)
            }
        };
        let send = place(&self.send, SEND, SEND_SHARED);
        let recv = place(&self.recv, RECV, RECV_SHARED);
        if self.failed.is_some() {
            flags |= FAILED;
        }
        if self.staged {
            flags |= STAGED;
        }
        PostRecord {
            what: self.what.code(),
            flags,
            param: self.param,
            call: self.call,
            send,
            recv,
            failed: Text::new(self.failed.as_deref().unwrap_or_default()),
        }
    }

    /// Another participant's post from its record, for a collective this participant joined
    /// as `mine`. A buffer it keeps to itself (one nobody else touches) has no address here.
    fn read(record: &PostRecord, board: &Board, mine: Collective) -> Post {
        let flags = record.flags;
        let mut failed = (flags & FAILED != 0).then(|| record.failed.get());
        let what = Collective::from_code(record.what).unwrap_or_else(|| {
            failed.get_or_insert_with(|| {
                format!("it posted {}, code {}", what_of(record.what), record.what)
            });
            mine
        });
        let mut buffer = |buf: &Buf, present: u32, shared: u32, role: &str| {
            if flags & present == 0 {
                None
            } else if flags & shared == 0 {
                Some(buf.at(0))
            } else {
                let found = board.resolve(buf);
                if found.is_none() {
                    failed.get_or_insert_with(|| {
                        format!("it posted a {role} buffer outside the session's shared memory")
                    });
                }
                found
            }
        };
        let send = buffer(&record.send, SEND, SEND_SHARED, "send");
        let recv = buffer(&record.recv, RECV, RECV_SHARED, "recv");
        Post {
            failed,
            what,
            param: record.param,
            send,
            recv,
            staged: flags & STAGED != 0,
            call: record.call,
        }
    }
}

/// Everyone's posts for the collective under way, by rank.
pub(crate) struct Posts {
    posts: Vec<Post>,
}

impl Posts {
    pub fn len(&self) -> usize {
        self.posts.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Post> {
        self.posts.iter()
    }

    /// Whether the collective runs the staged way: somebody takes part so (its buffers are
    /// not all where the others reach them, or it chose to), and then nobody writes into
    /// another's buffers.
    pub fn staged(&self) -> bool {
        self.posts.iter().any(|p| p.staged)
    }
}

impl Index<usize> for Posts {
    type Output = Post;
    fn index(&self, rank: usize) -> &Post {
        &self.posts[rank]
    }
}

/// A participant's staged copies of one parity: only it touches them, by the rules of `Slot`.
#[derive(Default)]
struct StagingCell(UnsafeCell<Option<Staging>>);

// SAFETY: as for posts: each cell is its participant's alone to write, and the others read the
// copy only while the post that names it may be read.
unsafe impl Sync for StagingCell {}

/// The participants of a collective: the whole session, one group, or a pair.
pub(crate) struct Team {
    /// Global worker ids, by rank.
    pub members: Vec<usize>,
    /// How messages name the team.
    name: String,
    /// Where the board keeps it (see `Board::slots`).
    index: usize,
    slots: SlotsAt,
    /// Each member's staged copies, by rank and parity.
    staging: Box<[StagingCell]>,
    /// More participants than CPUs: they take turns on the CPUs.
    crowded: bool,
}

impl Team {
    fn new(
        board: &Board,
        groups: usize,
        index: usize,
        members: Vec<usize>,
        name: String,
    ) -> Arc<Team> {
        Arc::new(Team {
            crowded: members.len() > available_cpus(),
            slots: board.slots(index, groups, members.len()),
            staging: (0..2 * members.len())
                .map(|_| StagingCell::default())
                .collect(),
            index,
            members,
            name,
        })
    }

    /// Whether a collective on buffers of `nbytes` is better staged (see `STAGED_BYTES`).
    pub fn staged(&self, nbytes: usize) -> bool {
        self.crowded && nbytes <= STAGED_BYTES
    }

    fn rank_of(&self, worker: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == worker)
    }

    /// The ranks that have not joined collective `seq` (nor been locked out of it).
    fn missing(&self, seq: u64) -> impl Iterator<Item = usize> {
        let slots = self.slots.get();
        (0..slots.len()).filter(move |&r| number(slots[r].joined.load(Ordering::Acquire)) < seq)
    }
}

/// The CPU communicator of one session, between its worker threads or its worker processes:
/// the whole session, each group, and pairs for point-to-point transfers (made when first
/// used).
pub struct CpuCcl {
    num_workers: usize,
    board: Board,
    world: Arc<Team>,
    groups: Vec<Arc<Team>>,
    pairs: Mutex<HashMap<(usize, usize), Arc<Team>>>,
    /// Moves a worker off a CPU it keeps sharing with another member (only it locks its own).
    shared_cpu: Vec<Mutex<SharedCpuWatch>>,
    timeout: Option<Duration>,
    spin: SpinPolicy,
    /// Which of the arena's communicator areas holds the board (worker processes).
    area: Option<usize>,
    /// Each worker's record of its activity, by id, where this process can read them: a
    /// waiter that finds a peer past the collective's call skips it.
    peers: Vec<Record>,
}

/// The CPU communicator a session's workers hold, if any: set by `init_ccl`, broken at
/// shutdown, and, on a session of worker processes, when a worker dies.
pub(crate) type CurrentCcl = Arc<Mutex<Option<Arc<CpuCcl>>>>;

impl CpuCcl {
    /// A communicator between the worker threads of this process.
    pub fn new(
        num_workers: usize,
        num_groups: usize,
        timeout: Option<Duration>,
        spin: SpinPolicy,
    ) -> CpuCcl {
        Self::on(Board::heap(num_workers), num_groups, timeout, spin)
    }

    /// A communicator whose records lie on `board` (zeroed when the communicator was made).
    fn on(board: Board, num_groups: usize, timeout: Option<Duration>, spin: SpinPolicy) -> CpuCcl {
        let num_workers = board.workers();
        let per_group = num_workers / num_groups;
        CpuCcl {
            num_workers,
            world: Team::new(
                &board,
                num_groups,
                0,
                (0..num_workers).collect(),
                "the session".into(),
            ),
            groups: (0..num_groups)
                .map(|g| {
                    let members: Vec<usize> = (g * per_group..(g + 1) * per_group).collect();
                    let name = format!("group {g} (workers {members:?})");
                    Team::new(&board, num_groups, 1 + g, members, name)
                })
                .collect(),
            pairs: Mutex::new(HashMap::new()),
            shared_cpu: (0..num_workers).map(|_| Mutex::default()).collect(),
            board,
            timeout,
            spin,
            area: None,
            peers: Vec::new(),
        }
    }

    /// The same communicator, reading its workers' records (`peers`, by worker id) while it
    /// waits: a worker that finished the call of the collective without joining it is then
    /// skipped, and the collective fails at once instead of waiting for it.
    pub(crate) fn watching(self, peers: Vec<Record>) -> CpuCcl {
        CpuCcl { peers, ..self }
    }

    /// A communicator between worker processes, on the records in `area` of their arena.
    ///
    /// # Safety
    /// The area holds [`CpuCcl::shared_bytes`] for its workers, zeroed before any of them
    /// used it for this communicator (as [`Board::shared`] asks).
    #[cfg(not(loom))]
    pub(crate) unsafe fn in_area(
        area: CclArea,
        num_groups: usize,
        timeout: Option<Duration>,
        spin: SpinPolicy,
    ) -> CpuCcl {
        // SAFETY: as the caller promises.
        let board =
            unsafe { Board::shared(area.workers, area.at, area.base, area.len, area.mapping) };
        CpuCcl {
            area: Some(area.index),
            ..Self::on(board, num_groups, timeout, spin)
        }
    }

    /// The communicator area of the arena its records lie in (worker processes).
    pub(crate) fn area(&self) -> Option<usize> {
        self.area
    }

    /// Bytes of shared memory a communicator between `num_workers` processes takes.
    #[cfg(not(loom))]
    pub(crate) fn shared_bytes(num_workers: usize) -> Option<usize> {
        Board::area_bytes(num_workers)
    }

    pub fn num_workers(&self) -> usize {
        self.num_workers
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
                let groups = self.groups.len();
                Team::new(
                    &self.board,
                    groups,
                    1 + groups + from * self.num_workers + to,
                    vec![from, to],
                    format!("the transfer from worker {from} to worker {to}"),
                )
            })
            .clone()
    }

    /// The team the board keeps at `index`.
    fn team_at(&self, index: usize) -> Option<Arc<Team>> {
        let groups = self.groups.len();
        match index {
            0 => Some(self.world.clone()),
            i if i <= groups => Some(self.groups[i - 1].clone()),
            i => {
                let pair = i - 1 - groups;
                let (from, to) = (pair / self.num_workers, pair % self.num_workers);
                (from < self.num_workers && from != to).then(|| self.pair(from, to))
            }
        }
    }

    /// Breaks the communicator: waiting workers fail with `error` (unless their collective
    /// was complete), later collectives at once. The first error stays.
    pub fn abort(&self, error: &Error) {
        self.board.header().record(error);
        fence(Ordering::SeqCst);
        for worker in 0..self.num_workers {
            self.board.waiter(worker).sleeper.wake_fenced();
        }
    }

    fn why(&self) -> Error {
        self.board.header().why()
    }

    /// Wakes the other members of `team` that sleep (after this thread published progress).
    fn wake(&self, team: &Team, me: usize) {
        fence(Ordering::SeqCst);
        for &m in team.members.iter().filter(|&&m| m != me) {
            self.board.waiter(m).sleeper.wake_fenced();
        }
    }

    /// `post` as participant `rank` publishes it for a collective of `parity`: staged when
    /// asked (`staged`) or when its buffers are not all where the others reach them.
    fn publish(
        &self,
        team: &Team,
        rank: usize,
        parity: usize,
        post: &mut Post,
        staged: bool,
    ) -> PostRecord {
        let unreachable =
            |buf: &Option<Buf>| buf.as_ref().is_some_and(|b| self.board.share(b).is_none());
        post.staged = staged || unreachable(&post.send) || unreachable(&post.recv);
        if post.staged
            && post.failed.is_none()
            && let Some(send) = &mut post.send
        {
            match self.stage(team, rank, parity, send) {
                Ok(copy) => *send = copy,
                Err(error) => {
                    post.failed = Some(format!("{}: {}", error.kind.name(), error.message))
                }
            }
        }
        post.record(&self.board)
    }

    /// Copies `send` into participant `rank`'s staging place for `parity`.
    fn stage(&self, team: &Team, rank: usize, parity: usize, send: &Buf) -> Result<Buf> {
        // SAFETY: the cell is this participant's alone, and nobody reads its copy of this
        // parity any more: everyone joined the collective after the one that used it last.
        let cell = unsafe { &mut *team.staging[2 * rank + parity].0.get() };
        if cell.as_ref().is_none_or(|s| s.len() < send.nbytes) {
            *cell = Some(self.board.staging(send.nbytes)?);
        }
        let to = cell.as_mut().expect("made above").ptr();
        // SAFETY: `send` describes `nbytes` readable bytes of a tensor its owner holds for the
        // whole collective; the staging place holds at least `nbytes` bytes (above).
        unsafe { std::ptr::copy_nonoverlapping(send.addr as *const u8, to, send.nbytes) };
        Ok(send.at(to as usize))
    }

    /// Runs one collective as participant `rank` of `team`: posts (staging `send` first when
    /// `staged` or when it must be), waits until everyone joined, checks everyone's posts with
    /// `check` (the same verdict on every participant), runs `work` if they agree, and, unless
    /// everyone took part the staged way, waits until everyone is done with everyone's buffers.
    pub(crate) fn run(
        &self,
        team: &Arc<Team>,
        rank: usize,
        mut post: Post,
        staged: bool,
        check: impl FnOnce(&Posts) -> Result<()>,
        work: impl FnOnce(&Posts),
    ) -> Result<()> {
        let slots = team.slots.get();
        let slot = &slots[rank];
        let (what, me) = (post.what, team.members[rank]);
        post.call = activity::own_call_stamp();
        let mut last = slot.joined.load(Ordering::Relaxed);
        loop {
            if self.board.header().is_broken() || last & LOCKED != 0 {
                return Err(self.why());
            }
            if last & SKIPPED != 0 {
                // Skipped: the others must see the mark until each judged the skipped
                // collective, and this post goes where the one before it lay.
                self.wait_judged(team, me, number(last), what)?;
            }
            let seq = number(last) + 1;
            let parity = (seq % 2) as usize;
            let record = self.publish(team, rank, parity, &mut post, staged);
            // SAFETY: nobody reads this post: everyone joined collective `seq - 1` (this
            // participant saw them, or waited for them above), so everyone is done with
            // `seq - 2`, the last to use it.
            unsafe { *slot.posts[parity].0.get() = record };
            let cpu = current_cpu().map_or(u64::MAX, |c| c as u64);
            slot.cpu.store(cpu, Ordering::Relaxed);
            match slot
                .joined
                .compare_exchange(last, seq, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {}
                // Skipped meanwhile: this collective is the next one.
                Err(now) if now & (SKIPPED | LOCKED) == SKIPPED => {
                    last = now;
                    continue;
                }
                Err(_) => return Err(self.why()), // locked out meanwhile
            }
            self.wake(team, me);
            self.join(team, rank, seq, what)?;
            match self.meets(team, rank, seq, parity, &post, what) {
                Meeting::Posts(posts) => return self.finish(team, rank, seq, posts, check, work),
                Meeting::Failed(error) => {
                    self.judged(team, me, seq);
                    return Err(error);
                }
                // The others are in an earlier call, which this worker finished: they fail,
                // and this collective is the next one.
                Meeting::Later => {
                    self.judged(team, me, seq);
                    last = seq;
                }
            }
        }
    }

    /// The end of collective `seq` once everyone's posts say it meets: the verdict of `check`,
    /// `work` if they agree, and, unless everyone took part the staged way, the wait until
    /// everyone is done with everyone's buffers.
    fn finish(
        &self,
        team: &Team,
        rank: usize,
        seq: u64,
        posts: Posts,
        check: impl FnOnce(&Posts) -> Result<()>,
        work: impl FnOnce(&Posts),
    ) -> Result<()> {
        let (slots, me, what) = (team.slots.get(), team.members[rank], posts[rank].what);
        let slot = &slots[rank];
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
        if verdict.is_ok() && posts.iter().any(|p| !p.staged) {
            // Nobody may return (and free or reuse a buffer) until everyone is done with it.
            slot.left.store(seq, Ordering::Release);
            self.wake(team, me);
            let done = || {
                slots
                    .iter()
                    .all(|s| s.left.load(Ordering::Acquire) >= seq)
                    .then_some(())
            };
            self.wait(team, me, Deadline::NEVER, what, || Ok(()), done)?;
        }
        verdict
    }

    /// Waits until every participant joined collective `seq`, the deadline passes, or the
    /// communicator breaks; then every slot has joined or was locked out, and the verdict is
    /// the same on every participant.
    fn join(&self, team: &Arc<Team>, rank: usize, seq: u64, what: Collective) -> Result<()> {
        let me = team.members[rank];
        let joined = || {
            let mut pending = false;
            for slot in team.slots.get() {
                let n = slot.joined.load(Ordering::Acquire);
                if n & LOCKED != 0 {
                    return Some(Err(self.why()));
                }
                pending |= number(n) < seq;
            }
            if !pending {
                Some(Ok(()))
            } else if self.board.header().is_broken() {
                Some(self.lock_out(team, seq))
            } else {
                None
            }
        };
        let deadline = Deadline::after(self.timeout);
        let began = events::now_ns();
        let waited = self.wait(
            team,
            me,
            deadline,
            what,
            || {
                self.skip_passed(team, me, seq);
                let first = first_id(team, rank);
                activity::note_waiting_for(team.missing(seq).map(|r| team.members[r] + first));
                let waits_in = pack_wait(team.index, what.code(), seq);
                self.board
                    .waiter(me)
                    .waits_in
                    .store(waits_in, Ordering::Release);
                if let Some(error) = self.crossed(team, rank, seq, what) {
                    self.abort(&error);
                }
                Ok(())
            },
            joined,
        );
        events::add_wait(events::now_ns().saturating_sub(began));
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
        deadline: Deadline,
        what: Collective,
        mut slow: impl FnMut() -> Result<()>,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        if let Some(value) = poll() {
            return Ok(value);
        }
        let share = team.crowded || {
            let cpu = current_cpu();
            let (mut below, mut above) = (false, false);
            for (slot, &m) in team.slots.get().iter().zip(&team.members) {
                if m != me && cpu.map(|c| c as u64) == Some(slot.cpu.load(Ordering::Relaxed)) {
                    below |= m < me;
                    above |= m > me;
                }
            }
            lock(&self.shared_cpu[me]).note(if below { cpu } else { None });
            below || above
        };
        if self.spin.budget.is_zero() {
            // Parks at once, as the session asks.
        } else if share {
            // Not channel::wait: a bounded turn for the CPU's other members before the park below.
            for _ in 0..YIELDS {
                if let Some(value) = poll() {
                    return Ok(value);
                }
                thread::yield_now();
            }
        } else {
            // Not channel::wait: a spin timed by the clock, polled in batches, before the park.
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
        self.board.waiter(me).sleeper.wait(
            park,
            PARK_SLICE,
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
        for slot in team.slots.get() {
            let mut n = slot.joined.load(Ordering::Acquire);
            while n & LOCKED == 0 && number(n) < seq {
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
}

/// The CPU communicator the controller laid out in communicator area `area` of this worker
/// process's arena (this worker's side).
#[cfg(not(loom))]
pub(crate) fn in_this_arena(
    area: usize,
    num_groups: usize,
    timeout: Option<Duration>,
    spin: SpinPolicy,
) -> Result<CpuCcl> {
    let area = arena::ccl_area(area)?;
    // SAFETY: the session sizes its arena's areas with `shared_bytes`, and the controller
    // zeroed this one before it sent the call that installs the communicator.
    let ccl = unsafe { CpuCcl::in_area(area, num_groups, timeout, spin) };
    Ok(ccl.watching(arena::records()?))
}

/// A new CPU communicator between the worker processes of this machine's arena, laid out by
/// this worker in communicator area `area`, for a session whose controller is on another
/// machine (the other workers here take it with [`in_this_arena`] once this returned).
#[cfg(not(loom))]
pub(crate) fn fresh_in_this_arena(
    area: usize,
    num_groups: usize,
    timeout: Option<Duration>,
    spin: SpinPolicy,
) -> Result<CpuCcl> {
    let area = arena::fresh_ccl_area(area)?;
    // SAFETY: sized as above, and zeroed just now.
    let ccl = unsafe { CpuCcl::in_area(area, num_groups, timeout, spin) };
    Ok(ccl.watching(arena::records()?))
}
