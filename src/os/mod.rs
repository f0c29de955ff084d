//! Processes of the operating system: finding and starting worker programs with exactly the
//! descriptors they need, ending them without leaving one behind, and hearing of each death
//! (a child's, or the controller's) as it happens, through pidfds.

mod child;
mod exit;
mod pidfd;
mod program;
mod spawn;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use child::Child;
pub(crate) use program::worker_program;
pub(crate) use spawn::{FIRST_INHERITED_FD, spawn};
pub(crate) use watch::{DeathWatch, exit_with_parent};
