//! Loading a model's weights onto a session's workers, as TVM's Disco and MLC's runtime do it:
//! Disco's loader built-ins (`runtime.disco.ShardLoader` and its `ShardLoaderLoad*` family),
//! reading the tensor cache TVM and MLC write (`tensor-cache.json` and its `.bin` files), each
//! parameter cut into one shard per worker by the functions `shard_info` names, or read already
//! cut (presharded), or given whole to every worker.
//!
//! The one idea: a parameter is read where it is needed once. Worker 0 reads a parameter to be
//! sharded or broadcast, tells every worker whether it could, and only then scatters or
//! broadcasts it over the session's communicator, so a file that cannot be read fails every
//! worker with the same error instead of leaving them waiting; a presharded parameter is read
//! by each worker from its own machine's disk. docs/models.md says how to use them.

mod cache;
mod loader;
mod shards;
mod spread;

use std::sync::Once;

pub use loader::ShardLoaderCell;

use crate::object::{AnyView, Function, Result, registry};
use crate::worker::WorkerInfo;
use crate::worker::builtins::on_worker;

/// Registers the loader built-ins once per process, and has TVM's built-ins of the same names
/// dispatched to them on discovm's workers (code TVM compiled calls them by name).
pub(crate) fn register() {
    type Body = fn(WorkerInfo, &[AnyView<'_>]) -> Result<crate::Any>;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let built_ins: [(&'static str, Body); 6] = [
            (loader::CREATE, loader::create),
            (loader::LOAD, loader::load_one),
            (loader::LOAD_ALL, loader::load_all),
            (loader::LOAD_PRESHARDED, loader::load_presharded),
            (loader::LOAD_ALL_PRESHARDED, loader::load_all_presharded),
            (loader::LOAD_ON_WORKER0, loader::load_on_worker0),
        ];
        for (name, body) in built_ins {
            let function = Function::from_closure(move |args| body(on_worker(name)?, args));
            registry::register_global(name, function, true).expect("built-in names are valid");
        }
        crate::worker::tvm_dispatch::dispatch_too(built_ins.map(|(name, _)| name));
    });
}
