//! Sessions whose workers are processes: starting and watching them.

mod launch;
mod watch;
