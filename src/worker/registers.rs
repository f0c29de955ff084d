//! Registers: ids handed out by the controller, and each worker's file of values.

use std::sync::{Arc, PoisonError};

use crate::object::{Any, Error};
use crate::sync::Mutex;

/// A register id. Register 0 is reserved (it never holds a value).
pub type Reg = u32;

/// The controller's allocator: lowest never-used id, then the most recently freed (LIFO).
#[derive(Default)]
pub struct RegisterIds {
    state: Mutex<(Reg, Vec<Reg>)>,
}

impl RegisterIds {
    pub fn allocate(&self) -> Reg {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(reg) = state.1.pop() {
            return reg;
        }
        state.0 += 1;
        state.0
    }

    /// Returns an id; call only after the free of it was queued on every worker.
    pub fn release(&self, reg: Reg) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1
            .push(reg);
    }
}

/// What a register holds on one worker.
#[derive(Default)]
pub enum Slot {
    #[default]
    Empty,
    Value(Any),
    /// The call that should have filled it failed; later uses fail with the same cause.
    Failed(Arc<Error>),
}

/// One worker's registers.
#[derive(Default)]
pub struct RegisterFile {
    slots: Vec<Slot>,
    /// The global function's name, for registers that hold one (for messages).
    names: Vec<Option<Arc<str>>>,
    live: usize,
}

impl RegisterFile {
    pub fn get(&self, reg: Reg) -> &Slot {
        self.slots.get(reg as usize).unwrap_or(&Slot::Empty)
    }

    pub fn name(&self, reg: Reg) -> Option<&Arc<str>> {
        self.names.get(reg as usize)?.as_ref()
    }

    pub fn set(&mut self, reg: Reg, slot: Slot, name: Option<Arc<str>>) {
        if reg == 0 {
            return; // reserved: results sent to register 0 are dropped
        }
        let index = reg as usize;
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, Slot::default);
            self.names.resize(index + 1, None);
        }
        self.names[index] = name;
        let filled = !matches!(slot, Slot::Empty);
        let old = std::mem::replace(&mut self.slots[index], slot);
        let was_filled = !matches!(old, Slot::Empty);
        self.live = self.live + usize::from(filled) - usize::from(was_filled);
    }

    /// Empties a register, dropping its value.
    pub fn free(&mut self, reg: Reg) {
        self.set(reg, Slot::Empty, None);
    }

    /// How many registers hold something.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Drops every value (at shutdown, on the worker's own thread).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.names.clear();
        self.live = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_start_at_one_and_reuse_the_last_freed() {
        let ids = RegisterIds::default();
        assert_eq!((ids.allocate(), ids.allocate(), ids.allocate()), (1, 2, 3));
        ids.release(2);
        ids.release(1);
        assert_eq!((ids.allocate(), ids.allocate(), ids.allocate()), (1, 2, 4));
    }

    #[test]
    fn the_file_counts_live_registers_and_ignores_register_zero() {
        let mut file = RegisterFile::default();
        file.set(0, Slot::Value(Any::Int(1)), None);
        assert_eq!(file.live(), 0);
        file.set(5, Slot::Value(Any::Int(5)), Some("five".into()));
        assert_eq!(file.name(5).map(|n| &**n), Some("five"));
        file.set(5, Slot::Value(Any::Int(6)), None);
        assert_eq!(file.name(5), None);
        file.set(2, Slot::Failed(Arc::new(Error::runtime("x"))), None);
        assert_eq!(file.live(), 2);
        assert!(matches!(file.get(5), Slot::Value(Any::Int(6))));
        assert!(matches!(file.get(100), Slot::Empty));
        file.free(5);
        file.free(2);
        file.free(7);
        assert_eq!(file.live(), 0);
    }
}
