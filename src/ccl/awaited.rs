//! Judging, from the workers' records alone, a collective that waits where its worker cannot
//! watch its peers itself: NCCL's work, queued on the GPU, and (through the controller's
//! referee) Gloo's between machines. The CPU communicator judges its own waits on its board.
//!
//! The one idea: a record counts the collectives its worker joined on each communicator, with
//! the call, kind and size of the last one (`worker::activity::Joins`); a peer that finished
//! the call having joined fewer will never join, and one whose last collective at the same place
//! is another, or of another size, would be met in its stead where members pair by order.

use super::Collective;
use super::communicator::passed_error;
use crate::object::Error;
use crate::worker::activity::{Comm, Joins};

/// A collective a worker waits for, as its record tells of it.
pub(crate) struct Awaited<'a> {
    pub what: Collective,
    pub call: u64,
    /// The call's function, when it has a name.
    pub function: Option<&'a str>,
    /// The waiting worker.
    pub worker: usize,
    /// Its communicator, and how many the worker joined there, this one included.
    pub on: Comm,
    pub count: u64,
    /// The bytes its members must agree on (0: not said).
    pub size: u64,
    /// Whether its members are paired by their order on the communicator alone (NCCL's): then
    /// a peer that joined another collective, or size, in its place is judged too.
    pub by_order: bool,
}

impl Awaited<'_> {
    /// Why it will never complete, as worker `peer`'s `joins` tell (`failure`: the peer's of
    /// the call, if that failed): the peer finished the call having joined fewer on the
    /// communicator, or (paired by order) joined another collective, or size, in its place.
    pub fn hopeless(&self, peer: usize, joins: &Joins, failure: Option<&str>) -> Option<Error> {
        let Awaited {
            what,
            call,
            function,
            worker,
            on,
            count,
            size,
            by_order,
        } = *self;
        if joins.passed(call, on, count) {
            let how = Some(failure.map(str::to_string));
            return Some(passed_error(what, call, function, worker, peer, how));
        }
        let (theirs, their_size) = joins
            .crossed(call, on, count, what.code(), size)
            .filter(|_| by_order)?;
        let theirs = (Collective::from_code(theirs)?, their_size);
        Some(crossed_error(
            (what, size),
            call,
            function,
            worker,
            peer,
            theirs,
        ))
    }
}

/// The failure of collective `what` of worker `me` in call `call` (of `function`, when it has
/// a name), whose members agree on `size` bytes, because worker `peer` joined collective
/// `theirs` of `their_size` bytes in its place (NCCL, which pairs collectives by their order on
/// a communicator alone, would meet the two as one).
fn crossed_error(
    (what, size): (Collective, u64),
    call: u64,
    function: Option<&str>,
    me: usize,
    peer: usize,
    (theirs, their_size): (Collective, u64),
) -> Error {
    let function = function.map_or_else(|| "its function".to_string(), |f| format!("`{f}`"));
    let how = if theirs == what {
        format!(
            "joined it with {their_size} bytes where worker {me} has {size}: the workers \
             disagree on its size"
        )
    } else {
        format!(
            "joined {} in its place: the workers disagree on which collective comes next",
            theirs.what()
        )
    };
    Error::value(format!(
        "{what} in call {call} ({function}) on worker {me}: worker {peer} {how}"
    ))
}
