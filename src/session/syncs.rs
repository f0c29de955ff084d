//! Waiting for the workers: a sync of one worker or of all, which reports the failures since
//! the last wait, and the fan-out of a request to several workers whose replies are collected
//! within one timeout.
//!
//! The one idea: a worker that is in sync (it ran everything sent to it and has nothing to
//! report) needs no message, so a sync asks only the others, and each timed-out wait becomes
//! one report of what every worker is doing.

use super::controller::Session;
use super::link::WorkerLink;
use super::status;
use crate::object::{Error, Result};
use crate::worker::completion::Completion;
use crate::worker::message::{Message, Reply};

crate::sync::thread_local! {
    /// Each host thread reuses one reply slot for its syncs.
    static SYNC_REPLY: std::cell::Cell<Option<Reply<()>>> = const { std::cell::Cell::new(None) };
}

impl Session {
    /// Waits until everything sent to `worker` so far has run; reports the first failure there
    /// since the last wait.
    pub fn sync_worker(&self, worker: usize) -> Result<()> {
        self.traced("sync worker", 0, || self.sync_worker_now(worker))
            .inspect_err(|error| self.note_aborted_comms(error))
    }

    fn sync_worker_now(&self, worker: usize) -> Result<()> {
        let link = &self.workers[worker];
        if link.in_sync() {
            return self.synced(worker..worker + 1);
        }
        // The frees first: the sync's frame then comes right after the mark.
        self.check_open()?;
        self.queue_frees()?;
        let mark = link.sync_mark();
        SYNC_REPLY.with(|cached| {
            let reply = Completion::reuse(cached.take());
            let result = self.request_with(worker, "sync", reply.clone(), Message::Sync);
            cached.set(Some(reply));
            result
        })?;
        if let Some(mark) = mark {
            link.synced_after(mark);
        }
        Ok(())
    }

    /// Sends a sync to every worker first, then collects the replies (fan-out), all within one
    /// timeout. Failures of several workers are reported together, the first one's kind first.
    pub fn sync_all(&self) -> Result<()> {
        self.traced("sync all", 0, || self.sync_all_now())
            .inspect_err(|error| self.note_aborted_comms(error))
    }

    fn sync_all_now(&self) -> Result<()> {
        if self.workers.iter().all(WorkerLink::in_sync) {
            return self.synced(0..self.workers.len());
        }
        // The frees first: each sync's frame then comes right after its mark.
        self.check_open()?;
        self.queue_frees()?;
        // Only the workers that are not in sync are asked, each with its mark (a node's worker
        // has one): a worker on a stalled node that is in sync holds up nobody's sync.
        let asked: Vec<(usize, Option<u64>)> = (0..self.workers.len())
            .filter(|&worker| !self.workers[worker].in_sync())
            .map(|worker| (worker, self.workers[worker].sync_mark()))
            .collect();
        self.ask_workers(
            asked.iter().map(|&(worker, _)| worker),
            "sync",
            Message::Sync,
        )?;
        for (worker, mark) in asked {
            if let Some(mark) = mark {
                self.workers[worker].synced_after(mark);
            }
        }
        self.synced(0..self.workers.len())
    }

    /// A sync of `workers`, found in sync without a message (frees waiting for a send go with
    /// the next one): whether the session is open and the workers are still there.
    pub(super) fn synced(&self, workers: std::ops::Range<usize>) -> Result<()> {
        self.check_open()?;
        workers
            .into_iter()
            .try_for_each(|worker| self.alive(worker))
    }

    /// Sends the request `make` builds to each of `workers` first, then collects the replies
    /// (fan-out), all within one timeout; the caller has sent the frees waiting for a send.
    /// `workers` are those of a request to all that need a message. Failures of several
    /// workers are reported together, the first one's kind first, each cause once; a timeout
    /// says what every worker of the session is doing.
    pub(super) fn ask_workers(
        &self,
        workers: impl IntoIterator<Item = usize>,
        what: &str,
        make: impl Fn(Reply<()>) -> Message,
    ) -> Result<()> {
        let mut replies = Vec::new();
        let pushed = workers.into_iter().try_for_each(|worker| {
            let reply: Reply<()> = Reply::new(Completion::new());
            self.push(worker, make(reply.clone()))?;
            replies.push((worker, reply));
            Ok(())
        });
        self.wake(replies.iter().map(|&(worker, _)| worker));
        pushed?;
        let deadline = self.deadline();
        let mut hang_reported = false;
        let errors: Vec<Error> = replies
            .iter()
            .filter_map(|(worker, reply)| {
                let waited_as = || format!("{what} on worker {worker}");
                let waited =
                    self.workers[*worker].wait(reply, self.spin, deadline, waited_as, || {
                        self.alive(*worker)
                    });
                let error = waited.err()?;
                let waited_as = waited_as();
                if !status::is_wait_timeout(&error, &waited_as) {
                    return Some(error);
                }
                // One report of every worker stands for all the waits that timed out.
                let report_as = format!("{what} of all");
                let all = 0..self.workers.len();
                (!std::mem::replace(&mut hang_reported, true))
                    .then(|| self.hang_report(error, &waited_as, &report_as, all))
            })
            .collect();
        // Every worker's report is consumed here, so all of them go into the one error.
        let mut errors = errors.into_iter();
        match errors.next() {
            None => Ok(()),
            Some(first) => Err(errors.fold(first, |mut all, next| {
                if !all.message.contains(&next.message) {
                    all.message.push_str("; ");
                    all.message.push_str(&next.message);
                }
                all
            })),
        }
    }
}
