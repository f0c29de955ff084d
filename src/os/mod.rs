//! Processes of the operating system: finding and starting worker programs with exactly the
//! descriptors they need, ending them without leaving one behind, and hearing of each death
//! (a child's, or the controller's) as it happens, through pidfds.

mod launch;
mod watch;

pub(crate) use launch::{Child, FIRST_INHERITED_FD, spawn, worker_program};
pub(crate) use watch::{DeathWatch, exit_with_parent};
