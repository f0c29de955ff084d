//! The loader object and Disco's loader built-ins: `runtime.disco.ShardLoader` makes a loader
//! on every worker, and `ShardLoaderLoad`, `ShardLoaderLoadAll`, `ShardLoaderLoadPresharded`,
//! `ShardLoaderLoadAllPresharded` and `ShardLoaderLoadParamOnWorker0` give each worker its
//! part of one parameter, or of all of them.
//!
//! The one idea: every worker holds the same loader (made from the same arguments), so every
//! check that needs no file (an index, a parameter's name, the shards' count) gives the same
//! verdict everywhere before any collective starts; only worker 0 reads a parameter that is to
//! be scattered or broadcast, and it tells the others its outcome before the data moves
//! ([`super::spread`]). A presharded parameter needs no collective: each worker reads its own
//! record (`NAME_shard-I-of-N`), from the same path on its own machine.

use std::sync::LazyLock;

use super::cache::{Param, TensorCache};
use super::shards::{self, Chains};
use super::spread;
use crate::abi::type_index;
use crate::object::args::{argument, arity, is_none};
use crate::object::module::{Module, module_function};
use crate::object::{
    Any, AnyView, Array, Error, ObjectRef, ObjectType, Result, Tensor, alloc_object, type_key,
};
use crate::vm;
use crate::worker::WorkerInfo;
use crate::worker::builtins::worker_empty;

/// `ShardLoader(path, metadata, shard_info, module=None) -> loader`.
pub(super) const CREATE: &str = "runtime.disco.ShardLoader";
/// `ShardLoaderLoad(loader, Shape([i])) -> Tensor`: this worker's part of parameter `i`.
pub(super) const LOAD: &str = "runtime.disco.ShardLoaderLoad";
/// `ShardLoaderLoadAll(loader) -> Array`: this worker's parts of `param_0`, `param_1`, ...
pub(super) const LOAD_ALL: &str = "runtime.disco.ShardLoaderLoadAll";
/// `ShardLoaderLoadPresharded(loader, Shape([i])) -> Tensor`: this worker's own record `i`.
pub(super) const LOAD_PRESHARDED: &str = "runtime.disco.ShardLoaderLoadPresharded";
/// `ShardLoaderLoadAllPresharded(loader) -> Array`: this worker's `param_I_shard-W-of-N`.
pub(super) const LOAD_ALL_PRESHARDED: &str = "runtime.disco.ShardLoaderLoadAllPresharded";
/// `ShardLoaderLoadParamOnWorker0(loader, i) -> Tensor`: `param_i` on worker 0, an empty
/// tensor of its shape elsewhere.
pub(super) const LOAD_ON_WORKER0: &str = "runtime.disco.ShardLoaderLoadParamOnWorker0";

/// The cell of a loader object: the cache and how its parameters are sharded.
pub struct ShardLoaderCell {
    cache: TensorCache,
    chains: Chains,
}

/// Its type key is not TVM's (`runtime.disco.ShardLoader`): tvm-ffi gives one index per key,
/// and TVM's loader functions would take this object for one of theirs.
static LOADER_INDEX: LazyLock<i32> =
    LazyLock::new(|| type_key::dynamic_index("discovm.ShardLoader"));

// SAFETY: objects with this dynamic index are only made by `create`.
unsafe impl ObjectType for ShardLoaderCell {
    fn type_index() -> i32 {
        *LOADER_INDEX
    }
}

type Loader = ObjectRef<ShardLoaderCell>;

/// `ShardLoader(path, metadata, shard_info, module=None)`: `path` is where `metadata` (the
/// text of `tensor-cache.json`) was read from, its `.bin` files beside it; an empty
/// `shard_info` is asked of the module's `get_shard_info()` where it has one.
pub(super) fn create(_: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(CREATE, args, 3, 4)?;
    let path = argument(0, "path", || args[0].as_str())?;
    let metadata = argument(1, "metadata", || args[1].as_str())?;
    let module = (!is_none(args, 3)).then_some(&args[3]);
    if let Some(module) = module {
        argument(3, "module", || is_module(module))?;
    }
    let mut shard_info = if is_none(args, 2) {
        String::new()
    } else {
        argument(2, "shard_info", || args[2].as_str())?.to_string()
    };
    if let Some(module) = module.filter(|_| shard_info.trim().is_empty())
        && let Ok(get) = module_function(module, "get_shard_info")
    {
        let asked = || get.call(&[])?.view().as_str().map(str::to_string);
        shard_info = asked().map_err(|e| e.context("the module's get_shard_info()"))?;
    }
    let cache = TensorCache::parse(path, metadata)?;
    let chains = shards::parse(&shard_info, &cache, module)?;
    let cell = ShardLoaderCell { cache, chains };
    Ok(Any::from_object(
        alloc_object(ShardLoaderCell::type_index(), cell).erase(),
    ))
}

/// Fails unless `value` is a module: one of this library's, or one of tvm-ffi's.
fn is_module(value: &AnyView<'_>) -> Result<()> {
    if Module::from_view(value).is_some() || value.type_index() == type_index::MODULE {
        return Ok(());
    }
    Err(Error::type_error(format!(
        "expected a module, got {}",
        value.type_name()
    )))
}

/// The loader argument `i`.
fn loader(args: &[AnyView<'_>], i: usize) -> Result<Loader> {
    argument(i, "loader", || {
        let view = &args[i];
        if view.type_index() != ShardLoaderCell::type_index() {
            return Err(Error::type_error(format!(
                "expected a loader made by `{CREATE}`, got {}",
                view.type_name()
            )));
        }
        view.as_object()?
            .downcast::<ShardLoaderCell>()
            .map_err(|_| Error::type_error("expected a loader"))
    })
}

/// Index argument `i`: Disco's `Shape([i])`, or an int.
fn index(args: &[AnyView<'_>], i: usize) -> Result<i64> {
    argument(i, "index", || match args[i].as_i64() {
        Ok(index) => Ok(index),
        Err(_) => match args[i].as_shape()?.as_slice() {
            [index] => Ok(*index),
            other => Err(Error::value(format!(
                "expected Shape([index]) with one entry, got {other:?}"
            ))),
        },
    })
}

/// How errors name a parameter.
fn describe(loader: &ShardLoaderCell, param: &Param) -> String {
    format!(
        "parameter `{}` (file `{}` of tensor cache `{}`)",
        param.name,
        loader.cache.file_of(param),
        loader.cache.path()
    )
}

/// Parameter `index` read from its file into a new tensor on `info`'s device.
fn read(loader: &ShardLoaderCell, index: usize, info: &WorkerInfo) -> Result<Tensor> {
    let param = &loader.cache.params()[index];
    let bytes = loader.cache.read(index)?;
    let tensor = worker_empty(&param.shape, param.dtype, info.device)?;
    vm::write(&tensor, &bytes)?;
    Ok(tensor)
}

/// The index of the parameter `name`, which `built_in` needs.
fn named(loader: &ShardLoaderCell, name: &str, built_in: &str) -> Result<usize> {
    loader.cache.index_of(name).ok_or_else(|| {
        Error::value(format!(
            "`{built_in}` needs parameter `{name}`, which the tensor cache `{}` does not hold",
            loader.cache.path()
        ))
    })
}

/// Worker 0's `mine` (None elsewhere), once every worker knows worker 0 has it.
fn agreed(info: &WorkerInfo, mine: Option<Result<Tensor>>) -> Result<Option<Tensor>> {
    let outcome = match &mine {
        Some(Err(error)) => Err(error.clone()),
        _ => Ok(()),
    };
    spread::agree(info, outcome)?;
    mine.transpose()
}

/// This worker's part of parameter `index`: its shard when `shard_info` shards it (worker 0
/// reads and shards it, and scatters the shards), else the whole (worker 0 reads and
/// broadcasts it).
fn load(loader: &ShardLoaderCell, index: usize, info: &WorkerInfo) -> Result<Tensor> {
    let param = &loader.cache.params()[index];
    let what = || describe(loader, param);
    let on_0 = |make: &dyn Fn() -> Result<Tensor>| (info.id == 0).then(make);
    match loader.chains.get(&index) {
        Some(steps) => {
            let (shape, dtype) = shards::output(steps);
            if shape.first() != Some(&(info.num_workers as i64)) {
                return Err(Error::value(format!(
                    "{}: its shard functions make {}, whose first dimension must be the \
                     number of workers ({})",
                    what(),
                    shards::describe(steps),
                    info.num_workers
                )));
            }
            let part = worker_empty(&shape[1..], dtype, info.device)?;
            let whole = on_0(&|| {
                let whole = read(loader, index, info)?;
                shards::apply(steps, whole, info.device).map_err(|e| e.context(what()))
            });
            let whole = agreed(info, whole)?;
            spread::scatter(whole.as_ref(), &part).map_err(|e| e.context(what()))?;
            Ok(part)
        }
        None => {
            let whole = agreed(info, on_0(&|| read(loader, index, info)))?;
            let whole = match whole {
                Some(whole) => whole,
                None => worker_empty(&param.shape, param.dtype, info.device)?,
            };
            spread::broadcast(&whole).map_err(|e| e.context(what()))?;
            Ok(whole)
        }
    }
}

/// Index argument `i`, which must be below `count`; errors call the index `what`.
fn in_range(args: &[AnyView<'_>], i: usize, count: usize, what: &str) -> Result<usize> {
    let at = index(args, i)?;
    usize::try_from(at)
        .ok()
        .filter(|&at| at < count)
        .ok_or_else(|| Error::index(format!("{what} {at} out of range ({count} in all)")))
}

pub(super) fn load_one(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD, args, 2, 2)?;
    let loader = loader(args, 0)?;
    let count = loader.cache.params().len();
    let at = in_range(args, 1, count, "parameter")?;
    Ok(load(&loader, at, &info)?.into())
}

pub(super) fn load_all(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD_ALL, args, 1, 1)?;
    let loader = loader(args, 0)?;
    let count = loader.cache.params().len();
    let indices = (0..count)
        .map(|i| named(&loader, &format!("param_{i}"), LOAD_ALL))
        .collect::<Result<Vec<usize>>>()?;
    let tensors = indices
        .into_iter()
        .map(|at| load(&loader, at, &info).map(Any::from))
        .collect::<Result<Vec<Any>>>()?;
    Ok(Array::new(tensors).into())
}

/// The end of the names of this worker's presharded records: `_shard-W-of-N`, W from 1.
fn shard_suffix(info: &WorkerInfo) -> String {
    format!("_shard-{}-of-{}", info.id + 1, info.num_workers)
}

/// The indices of this worker's presharded records, in the cache's order; an error that says
/// what the cache holds instead when it holds none.
fn own_records(loader: &ShardLoaderCell, info: &WorkerInfo) -> Result<Vec<usize>> {
    let suffix = shard_suffix(info);
    let params = loader.cache.params();
    let own: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].name.ends_with(&suffix))
        .collect();
    if !own.is_empty() {
        return Ok(own);
    }
    let other = params.iter().find(|p| p.name.contains("_shard-"));
    Err(Error::value(match other {
        Some(p) => format!(
            "the tensor cache `{}` holds no records for worker {} of {} (named \
             `NAME{suffix}`): it was presharded otherwise (`{}`)",
            loader.cache.path(),
            info.id,
            info.num_workers,
            p.name
        ),
        None => format!(
            "the tensor cache `{}` holds no presharded records (named `NAME{suffix}` for \
             worker {})",
            loader.cache.path(),
            info.id
        ),
    }))
}

/// Parameter `index` read on this worker alone.
fn read_own(loader: &ShardLoaderCell, index: usize, info: &WorkerInfo) -> Result<Any> {
    Ok(read(loader, index, info)?.into())
}

pub(super) fn load_presharded(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD_PRESHARDED, args, 2, 2)?;
    let loader = loader(args, 0)?;
    let own = own_records(&loader, &info)?;
    let what = format!("worker {}'s presharded parameter", info.id);
    let at = in_range(args, 1, own.len(), &what)?;
    read_own(&loader, own[at], &info)
}

pub(super) fn load_all_presharded(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD_ALL_PRESHARDED, args, 1, 1)?;
    let loader = loader(args, 0)?;
    let count = own_records(&loader, &info)?.len();
    let suffix = shard_suffix(&info);
    let tensors = (0..count)
        .map(|i| {
            let at = named(&loader, &format!("param_{i}{suffix}"), LOAD_ALL_PRESHARDED)?;
            read_own(&loader, at, &info)
        })
        .collect::<Result<Vec<Any>>>()?;
    Ok(Array::new(tensors).into())
}

pub(super) fn load_on_worker0(info: WorkerInfo, args: &[AnyView<'_>]) -> Result<Any> {
    arity(LOAD_ON_WORKER0, args, 2, 2)?;
    let loader = loader(args, 0)?;
    let at = index(args, 1)?;
    let at = named(&loader, &format!("param_{at}"), LOAD_ON_WORKER0)?;
    if info.id == 0 {
        return read_own(&loader, at, &info);
    }
    let param = &loader.cache.params()[at];
    Ok(worker_empty(&param.shape, param.dtype, info.device)?.into())
}
