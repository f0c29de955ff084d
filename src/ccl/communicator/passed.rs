//! How the CPU communicator judges a collective a peer will not meet in: one that finished the
//! collective's call without joining (its record says so), one that joined from a later call,
//! or one that waits for this worker in another team.
//!
//! The one idea: calls that went to every worker reach them all, so a peer whose record shows it
//! finished the waiter's call will not join in it; the waiter joins for it, marked skipped, with
//! the compare-and-swap every join uses, and a post's call number tells a join from a later call
//! apart; either way every participant reaches the same verdict and the team stays in step.

use std::sync::Arc;

use super::{CpuCcl, LOCKED, Meeting, Post, Posts, SKIPPED, Team, first_id, number};
use crate::ccl::board::{Slot, unpack_wait};
use crate::ccl::collective::{Collective, what_of};
use crate::channel::Deadline;
use crate::object::{Error, Result};
use crate::sync::atomic::Ordering;
use crate::worker::activity;

impl CpuCcl {
    /// Whether collective `seq`, which everyone joined, meets as participant `rank` sees it:
    /// everyone's posts; or its failure when a participant was skipped, or when participants
    /// run different calls (each went to every worker) and this one's is earlier; or
    /// `Later` when this participant's call is the later one (the others fail then).
    pub(super) fn meets(
        &self,
        team: &Team,
        rank: usize,
        seq: u64,
        parity: usize,
        post: &Post,
        what: Collective,
    ) -> Meeting {
        let slots = team.slots.get();
        let skipped = (0..slots.len()).find(|&r| {
            let n = slots[r].joined.load(Ordering::Acquire);
            n & SKIPPED != 0 && number(n) == seq
        });
        if let Some(peer) = skipped {
            // Nobody reads the post of a skipped participant: it posted nothing for this one.
            return Meeting::Failed(self.passed_error(team, rank, peer, post.call, what));
        }
        let posts = Posts {
            posts: (0..slots.len())
                .map(|r| {
                    if r == rank {
                        post.clone()
                    } else {
                        // SAFETY: everyone joined `seq` (above), so each post of this parity
                        // is written and stays so until this participant joins `seq + 1`.
                        let record = unsafe { &*slots[r].posts[parity].0.get() };
                        Post::read(record, &self.board, what)
                    }
                })
                .collect(),
        };
        // Calls to one worker alone may meet across calls; calls to every worker meet in one.
        let calls: Vec<u64> = posts.iter().map(|p| p.call).collect();
        if calls.iter().all(|&call| call != 0) {
            let latest = calls.iter().copied().max().unwrap_or(0);
            if post.call < latest {
                let peer = calls
                    .iter()
                    .position(|&call| call == latest)
                    .unwrap_or(rank);
                return Meeting::Failed(self.passed_error(team, rank, peer, post.call, what));
            }
            if calls.iter().any(|&call| call < latest) {
                return Meeting::Later;
            }
        }
        Meeting::Posts(posts)
    }

    /// Records that worker `me` judged collective `seq` (it failed it, or goes on to the next
    /// one), for a participant skipped in it that waits for that.
    pub(super) fn judged(&self, team: &Team, me: usize, seq: u64) {
        let rank = team.rank_of(me).expect("a member of its team");
        team.slots.get()[rank].left.store(seq, Ordering::Release);
        self.wake(team, me);
    }

    /// Waits, as worker `me` skipped in collective `seq`, until every participant is done with
    /// it: judged it, joined a later one, or was skipped in it too. Until then the others may
    /// look for the mark this participant's next join overwrites.
    pub(super) fn wait_judged(
        &self,
        team: &Team,
        me: usize,
        seq: u64,
        what: Collective,
    ) -> Result<()> {
        let done = |slot: &Slot| {
            let n = slot.joined.load(Ordering::Acquire);
            slot.left.load(Ordering::Acquire) >= seq
                || number(n) > seq
                || (n & SKIPPED != 0 && number(n) >= seq)
        };
        let all_done = || {
            if self.board.header().is_broken() {
                return Some(Err(self.why()));
            }
            team.slots.get().iter().all(done).then_some(Ok(()))
        };
        let deadline = Deadline::after(self.timeout);
        self.wait(team, me, deadline, what, || Ok(()), all_done)?
    }

    /// Joins collective `seq` as skipped for every participant that has not joined it and
    /// whose worker finished the call worker `me` runs it in (a call that went to every worker,
    /// so that it reached them all): their worker will not join it in that call.
    pub(super) fn skip_passed(&self, team: &Team, me: usize, seq: u64) {
        if self.peers.is_empty() {
            return;
        }
        let call = activity::own_call_stamp();
        if call == 0 {
            return;
        }
        let slots = team.slots.get();
        let mut skipped = false;
        for rank in team.missing(seq).collect::<Vec<_>>() {
            let Some(peer) = self.peers.get(team.members[rank]) else {
                continue;
            };
            // Its record first: a worker that joined before it finished shows the join then,
            // and one that broke the communicator before it finished shows that (its reason
            // is the verdict then).
            if peer.passed(call).is_none() {
                continue;
            }
            if self.board.header().is_broken() {
                return;
            }
            let n = slots[rank].joined.load(Ordering::Acquire);
            skipped |= n & LOCKED == 0
                && number(n) < seq
                && slots[rank]
                    .joined
                    .compare_exchange(n, seq | SKIPPED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
        }
        if skipped {
            self.wake(team, me);
        }
    }

    /// The failure of a collective of participant `rank`, whose worker runs call `call`,
    /// because participant `peer`'s worker finished that call without joining it (it was
    /// skipped, or it posted from a later call): the collective, the call and its function,
    /// the peer and how its worker finished the call.
    fn passed_error(
        &self,
        team: &Team,
        rank: usize,
        peer: usize,
        call: u64,
        what: Collective,
    ) -> Error {
        // The ids of a team are those of this communicator's workers (a node's, on nodes).
        let first = first_id(team, rank);
        let peer = team.members[peer];
        let function = activity::own_broadcast_call().and_then(|(_, function)| function);
        passed_error(
            what,
            call,
            function.as_deref(),
            team.members[rank] + first,
            peer + first,
            self.peers.get(peer).and_then(|record| record.passed(call)),
        )
    }

    /// Whether a worker this one waits for in `team` itself waits in another team for this
    /// one: then neither can go on, and the error says why.
    pub(super) fn crossed(
        &self,
        team: &Arc<Team>,
        rank: usize,
        seq: u64,
        what: Collective,
    ) -> Option<Error> {
        let me = team.members[rank];
        team.missing(seq).find_map(|r| {
            let other = team.members[r];
            let waits_in = self.board.waiter(other).waits_in.load(Ordering::Acquire);
            let (index, their_what, their_seq) = unpack_wait(waits_in)?;
            let theirs = self.team_at(index)?;
            let mine = theirs.rank_of(me)?;
            if theirs.index == team.index
                || number(theirs.slots.get()[mine].joined.load(Ordering::Acquire)) >= their_seq
            {
                return None;
            }
            let call = match activity::own_call_stamp() {
                0 => String::new(),
                call => format!(" in call {call}"),
            };
            Some(Error::value(format!(
                "{what}{call}: worker {me} waits for worker {other} in {}, but worker {other} \
                 waits for worker {me} in `{}` in {}: the workers disagree on \
                 in_group or on which collective comes next (the communicator is now broken; \
                 call init_ccl again)",
                team.name,
                what_of(their_what),
                theirs.name
            )))
        })
    }
}

/// The failure of collective `what` of worker `me` in call `call` (of `function`, when it has
/// a name) because worker `peer` finished that call without joining it; `how` is what its
/// record says of the call ([`Activity::passed`](crate::worker::activity::Activity::passed):
/// its failure, or None if it returned; None: it runs a later call).
pub(crate) fn passed_error(
    what: Collective,
    call: u64,
    function: Option<&str>,
    me: usize,
    peer: usize,
    how: Option<Option<String>>,
) -> Error {
    let function = function.map_or_else(|| "its function".to_string(), |f| format!("`{f}`"));
    let how = match how {
        Some(Some(failure)) => failure,
        Some(None) => format!("{function} returned"),
        None => "it runs a later call".to_string(),
    };
    Error::runtime(format!(
        "{what} in call {call} ({function}) on worker {me}: worker {peer} finished call {call} \
         without joining it: {how}"
    ))
}
