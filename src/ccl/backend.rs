//! The communicator a worker holds, and the one trait through which each backend's
//! communicator runs the collectives.
//!
//! The one idea: a worker holds at most one communicator, in one place, of whichever backend
//! (CPU, NCCL, Gloo) the last `init_ccl` set up; each collective's built-in, registered once
//! from the table, runs the worker's part on it through [`Backend`]. An init replaces what the
//! worker holds, so no backend knows of another.

use std::any::Any as Anything;
use std::cell::RefCell;
use std::sync::Once;

use super::collective::Collective;
use crate::object::{Any, AnyView, Error, Function, Result, registry};
use crate::worker::builtins::on_worker;
use crate::worker::{activity, events};

/// A worker's communicator of one backend: it runs the worker's part of each collective.
pub(super) trait Backend {
    /// Runs this worker's part of `collective`, called with Disco's arguments `args`.
    fn run(&self, collective: Collective, args: &[AnyView<'_>]) -> Result<()>;
}

/// A communicator as the worker holds it: its backend's own type, which that backend may find
/// again (NCCL's waits watch its communicators).
trait Communicator: Backend + Anything {}

impl<T: Backend + Anything> Communicator for T {}

/// What a worker holds for its collectives.
enum Held {
    Nothing,
    /// A communicator, which the collectives run on.
    Ready(Box<dyn Communicator>),
    /// A communicator still being set up (Gloo's contexts, bound but not yet connected): no
    /// collective runs on it.
    Pending(Box<dyn Anything>),
}

thread_local! {
    /// What the worker running on this thread holds.
    static HELD: RefCell<Held> = const { RefCell::new(Held::Nothing) };
}

/// Puts `held` in the worker's place, and drops what was there once the place is free again
/// (tearing a communicator down may wait, and its waits look there).
fn replace(held: Held) {
    let old = HELD.with(|h| h.replace(held));
    drop(old);
}

/// Makes `communicator` the one this worker runs its collectives on, replacing what it held.
pub(super) fn install(communicator: impl Backend + 'static) {
    replace(Held::Ready(Box::new(communicator)));
}

/// Holds `pending`, a communicator still being set up, replacing what the worker held.
pub(super) fn hold_pending(pending: impl Anything) {
    replace(Held::Pending(Box::new(pending)));
}

/// Takes the communicator being set up, if the worker holds one of type `T`.
pub(super) fn take_pending<T: Anything>() -> Option<T> {
    HELD.with(|h| {
        let mut held = h.borrow_mut();
        match std::mem::replace(&mut *held, Held::Nothing) {
            Held::Pending(pending) => match pending.downcast::<T>() {
                Ok(pending) => Some(*pending),
                Err(other) => {
                    *held = Held::Pending(other);
                    None
                }
            },
            other => {
                *held = other;
                None
            }
        }
    })
}

/// Drops what the worker holds (an `init_ccl` is setting up another communicator).
pub(super) fn forget() {
    replace(Held::Nothing);
}

/// A copy of the worker's communicator, if it is a `T`; None also while the thread's
/// communicator is being dropped, as the thread ends.
pub(super) fn held<T: Backend + Clone + 'static>() -> Option<T> {
    HELD.try_with(|h| match &*h.borrow() {
        Held::Ready(communicator) => {
            let communicator: &dyn Anything = &**communicator;
            communicator.downcast_ref::<T>().cloned()
        }
        _ => None,
    })
    .ok()
    .flatten()
}

/// Collective built-in `collective`: this worker's part of it, on the communicator it holds.
fn run(collective: Collective, args: &[AnyView<'_>]) -> Result<Any> {
    let name = collective.name();
    on_worker(name)?;
    let started = events::now_ns();
    events::take_wait(); // what a collective outside a built-in left
    let _in = activity::enter_collective(collective.code());
    let ran = HELD.with(|h| match &*h.borrow() {
        Held::Ready(communicator) => communicator.run(collective, args),
        _ => Err(Error::runtime(format!(
            "`{name}` needs a communicator: call init_ccl on the session first"
        ))),
    });
    let about = described(collective, args);
    let waited = events::take_wait();
    events::record_own(
        events::Kind::Collective,
        about.name,
        started,
        about.detail,
        about.bytes,
        waited,
    );
    ran.map(|()| Any::None)
}

/// What the events of `collective`, called with `args`, say of it: the bytes of its first
/// tensor, and its team.
pub(super) fn described(collective: Collective, args: &[AnyView<'_>]) -> events::Collective {
    let bytes = args
        .iter()
        .find_map(|arg| arg.as_tensor().ok())
        .map_or(0, |tensor| tensor.nbytes() as u64);
    let team = match collective {
        Collective::Transfer(_) => events::Team::Pair,
        _ if collective.in_group(args).unwrap_or(false) => events::Team::Group,
        _ => events::Team::Session,
    };
    events::Collective {
        name: collective.what(),
        detail: team.detail(collective.code()),
        bytes,
    }
}

/// Registers a built-in for each collective of the table, once per process, and has TVM's
/// built-ins of the same names dispatched to them on discovm's workers.
pub(super) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for collective in Collective::all() {
            let body = move |args: &[AnyView<'_>]| run(collective, args);
            registry::register_global(collective.name(), Function::from_closure(body), true)
                .expect("built-in names are valid");
        }
        crate::worker::tvm_dispatch::dispatch_too(
            Collective::all()
                .filter(|c| c.in_disco())
                .map(Collective::name),
        );
    });
}
