//! Freeing the registers of dropped DRefs without ever waiting: a drop tells worker threads at
//! once where their queues have room, and otherwise notes the register for the next send to
//! tell every worker before its own message.

use std::sync::PoisonError;

use super::controller::Session;
use crate::object::Result;
use crate::sync::atomic::Ordering;
use crate::worker::message::Message;
use crate::worker::registers::Reg;

impl Session {
    /// Frees a register on every worker (from a dropped DRef), after all earlier calls. Worker
    /// threads are told at once, where their queues have room; otherwise, and for workers
    /// reached through frames, the next send tells every worker before its own message (a
    /// call to every worker carries the frees in its own frame). This never waits: a DRef may
    /// be dropped by a thread the workers themselves wait for (a Python thread holding the
    /// interpreter lock that a worker's Python function needs).
    pub(crate) fn free_register(&self, reg: Reg) {
        if self.check_open().is_err() {
            return;
        }
        // A worker told here and again by the next send empties an empty register.
        if !self.frees_wait
            && self
                .workers
                .iter()
                .all(|link| link.try_push(Message::Free(reg)).is_ok())
        {
            self.registers.release(reg);
            return;
        }
        self.frees
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(reg);
        self.has_frees.store(true, Ordering::SeqCst);
    }

    /// The frees waiting for a send, taken; [`Session::settle_frees`] settles them.
    pub(super) fn take_frees(&self) -> Vec<Reg> {
        // A load first: the flag is clear on most sends.
        if !self.has_frees.load(Ordering::SeqCst) || !self.has_frees.swap(false, Ordering::SeqCst) {
            return Vec::new();
        }
        std::mem::take(&mut *self.frees.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Releases taken frees for reuse once every worker was `told`, or keeps them for the next
    /// send (a worker told twice empties an empty register).
    pub(super) fn settle_frees(&self, frees: Vec<Reg>, told: bool) {
        if told {
            frees
                .into_iter()
                .for_each(|reg| self.registers.release(reg));
        } else if !frees.is_empty() {
            self.frees
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(frees);
            self.has_frees.store(true, Ordering::SeqCst);
        }
    }

    /// Queues the frees waiting for a send to every worker, waiting for room as sends do.
    pub(super) fn queue_frees(&self) -> Result<()> {
        let frees = self.take_frees();
        if frees.is_empty() {
            return Ok(());
        }
        // One message per free for all the workers (one per node for a node's workers).
        let all = 0..self.workers.len();
        let queued = frees
            .iter()
            .try_for_each(|&reg| self.push_range(all.clone(), || Message::Free(reg), &[]));
        self.settle_frees(frees, queued.is_ok());
        queued
    }
}
