//! Collectives between a session's workers. The CPU backend is shared memory between the
//! worker threads of one process: each participant posts the addresses of its buffers, all meet
//! at a barrier, each does its share of the work directly on the others' memory (no copies
//! through the controller, nothing serialised), and all meet again before any buffer may be
//! reused. Reductions are split across workers: worker `r` reduces slice `r` of every input
//! and writes it into every output, which is a reduce-scatter and an all-gather in one pass.
//!
//! A worker whose own arguments are rejected (a missing tensor, an unsupported dtype) still
//! joins, with a post that says so, and every participant fails; only a bad `in_group` or a
//! missing communicator leave the others waiting, as they cannot tell which team to join.
//!
//! A worker that never joins: every join waits at most the session's timeout; when it runs out
//! the communicator is broken, the waiting workers fail with `Timeout`, and every later
//! collective on it fails at once until `init_ccl` is called again. Without a timeout, a join
//! waits until the session shuts down, which breaks the communicator and releases the waiters.

mod builtins;
pub(crate) mod nccl;
mod reduce;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub use builtins::{register, stage, unstage};
pub use reduce::{ReduceOp, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

use crate::abi::DLDataType;
use crate::object::tensor::dtype_name;
use crate::object::{Error, ErrorKind, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many times a waiter checks the barrier before it starts yielding (a few µs: the other
/// workers of a small collective are usually that close behind).
const SPINS: usize = 2000;
/// How many times a waiter yields before it sleeps on the condition variable.
const YIELDS: usize = 64;

struct BarrierState {
    arrived: usize,
    generation: u64,
    broken: Option<Error>,
}

/// A reusable barrier that can time out and be broken for good.
struct Barrier {
    size: usize,
    /// `SPINS` when every participant can have a CPU of its own, else 0: spinning while the
    /// awaited worker waits for the spinner's CPU only delays it.
    spins: usize,
    state: Mutex<BarrierState>,
    generation: AtomicU64,
    cv: Condvar,
}

impl Barrier {
    fn new(size: usize) -> Barrier {
        Barrier {
            size,
            spins: if size <= crate::device::cpu::available_cpus() {
                SPINS
            } else {
                0
            },
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                broken: None,
            }),
            generation: AtomicU64::new(0),
            cv: Condvar::new(),
        }
    }

    /// Waits for every participant. A join (`joining`) fails if the barrier is broken or the
    /// deadline passes (which breaks it, with `why` in the message). The leave barrier after
    /// the work ignores both: everyone is past the join and will arrive.
    fn arrive(
        &self,
        joining: bool,
        deadline: Option<Instant>,
        why: &dyn Fn() -> Error,
    ) -> Result<()> {
        let mut state = lock(&self.state);
        if joining && let Some(broken) = &state.broken {
            return Err(broken.clone());
        }
        let generation = state.generation;
        state.arrived += 1;
        if state.arrived == self.size {
            state.arrived = 0;
            state.generation += 1;
            self.generation.store(state.generation, Ordering::Release);
            self.cv.notify_all();
            return Ok(());
        }
        drop(state);
        for _ in 0..self.spins {
            if self.generation.load(Ordering::Acquire) != generation {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        for _ in 0..YIELDS {
            if self.generation.load(Ordering::Acquire) != generation {
                return Ok(());
            }
            std::thread::yield_now();
        }
        let mut state = lock(&self.state);
        loop {
            if state.generation != generation {
                return Ok(());
            }
            if joining && let Some(broken) = &state.broken {
                return Err(broken.clone());
            }
            match deadline.filter(|_| joining) {
                None => state = self.cv.wait(state).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        let error = why();
                        state.broken = Some(error.clone());
                        self.cv.notify_all();
                        return Err(error);
                    }
                    state = self
                        .cv
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    fn abort(&self, error: &Error) {
        let mut state = lock(&self.state);
        state.broken.get_or_insert_with(|| error.clone());
        self.cv.notify_all();
    }
}

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

/// What a participant posts: which collective, its parameter, and its buffers.
#[derive(Clone, Debug)]
pub(crate) struct Post {
    /// Why this participant cannot take part (its arguments were rejected); the others fail.
    pub failed: Option<String>,
    pub what: &'static str,
    pub param: i64,
    pub send: Option<Buf>,
    pub recv: Option<Buf>,
}

/// The participants of a collective: the whole session, one group, or a pair.
pub(crate) struct Team {
    /// Global worker ids, by rank.
    pub members: Vec<usize>,
    posts: Vec<Mutex<Option<Post>>>,
    barrier: Barrier,
}

impl Team {
    fn new(members: Vec<usize>) -> Team {
        let n = members.len();
        Team {
            members,
            posts: (0..n).map(|_| Mutex::new(None)).collect(),
            barrier: Barrier::new(n),
        }
    }

    /// Runs one collective as participant `rank`: posts, joins, checks everyone's posts with
    /// `check` (the same verdict on every participant), runs `work` if they agree, and leaves.
    pub fn run(
        &self,
        rank: usize,
        post: Post,
        deadline: Option<Instant>,
        check: impl FnOnce(&[Post]) -> Result<()>,
        work: impl FnOnce(&[Post]),
    ) -> Result<()> {
        let what = post.what;
        *lock(&self.posts[rank]) = Some(post);
        let members = &self.members;
        self.barrier.arrive(true, deadline, &|| {
            let waiting = self
                .posts
                .iter()
                .enumerate()
                .filter(|(_, p)| lock(p).is_none())
                .map(|(r, _)| members[r].to_string())
                .collect::<Vec<_>>();
            Error::new(
                ErrorKind::Timeout,
                format!(
                    "{what}: not every worker of {members:?} joined within the session's \
                     timeout (the communicator is now broken; call init_ccl again){}",
                    if waiting.is_empty() {
                        String::new()
                    } else {
                        format!("; missing: worker {}", waiting.join(", "))
                    }
                ),
            )
        })?;
        let posts: Vec<Post> = self
            .posts
            .iter()
            .map(|p| lock(p).clone().expect("everyone posted before the join"))
            .collect();
        let verdict = match posts.iter().position(|p| p.failed.is_some()) {
            Some(r) => Err(Error::value(format!(
                "{what}: worker {} could not take part ({})",
                members[r],
                posts[r].failed.as_deref().unwrap_or_default()
            ))),
            None => check(&posts),
        };
        if verdict.is_ok() {
            work(&posts);
        }
        // Nobody may reuse a buffer or post again until everyone is done with this one.
        self.barrier.arrive(false, None, &|| unreachable!())?;
        verdict
    }
}

/// The in-process communicator of one session: the whole session, each group, and pairs for
/// point-to-point transfers (made when first used).
pub struct CpuCcl {
    num_workers: usize,
    world: Team,
    groups: Vec<Team>,
    pairs: Mutex<HashMap<(usize, usize), Arc<Team>>>,
    /// Why the communicator was aborted, if it was (pairs made later start broken).
    aborted: Mutex<Option<Error>>,
    timeout: Option<Duration>,
}

impl CpuCcl {
    pub fn new(num_workers: usize, num_groups: usize, timeout: Option<Duration>) -> CpuCcl {
        let per_group = num_workers / num_groups;
        CpuCcl {
            num_workers,
            world: Team::new((0..num_workers).collect()),
            groups: (0..num_groups)
                .map(|g| Team::new((g * per_group..(g + 1) * per_group).collect()))
                .collect(),
            pairs: Mutex::new(HashMap::new()),
            aborted: Mutex::new(None),
            timeout,
        }
    }

    pub fn num_workers(&self) -> usize {
        self.num_workers
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.timeout.map(|t| Instant::now() + t)
    }

    /// The team of worker `id`: the session, or its group.
    pub(crate) fn team(&self, id: usize, in_group: bool) -> (&Team, usize) {
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
                let team = Team::new(vec![from, to]);
                if let Some(error) = &*lock(&self.aborted) {
                    team.barrier.abort(error);
                }
                Arc::new(team)
            })
            .clone()
    }

    /// Breaks every barrier: waiting workers fail with `error`, later collectives at once.
    pub fn abort(&self, error: &Error) {
        lock(&self.aborted).get_or_insert_with(|| error.clone());
        self.world.barrier.abort(error);
        for team in &self.groups {
            team.barrier.abort(error);
        }
        for team in lock(&self.pairs).values() {
            team.barrier.abort(error);
        }
    }
}
