//! How each parameter is cut into one shard per worker: the `shard_info` JSON of TVM's loader,
//! its functions found, and their chain applied to a whole parameter.
//!
//! The one idea: `shard_info` maps a parameter's name to a chain of steps, each
//! `[function, [out_shape, out_dtype], extra ints...]`; a step makes an empty tensor of its
//! output shape and dtype and calls `function(input, extra..., output)`, and the last step's
//! output holds one shard per worker along its first dimension. Every function is found when
//! the loader is made (in the module passed in, else among the global functions), so a name
//! that is wrong fails at once, on every worker, naming the parameter.

use std::collections::HashMap;

use serde_json::Value;

use super::cache::{TensorCache, shape_of};
use crate::abi::{DLDataType, DLDevice};
use crate::object::module::module_function;
use crate::object::tensor::{dtype_name, parse_dtype};
use crate::object::{Any, AnyView, Error, Function, Result, Tensor, registry};
use crate::worker::builtins::worker_empty;

/// One step of a parameter's chain.
pub(super) struct Step {
    name: String,
    function: Function,
    shape: Vec<i64>,
    dtype: DLDataType,
    extra: Vec<i64>,
}

/// The chains of the parameters that are sharded, by parameter index (the others are whole on
/// every worker).
pub(super) type Chains = HashMap<usize, Vec<Step>>;

/// The chains `text` describes for the parameters of `cache`, their functions looked up in
/// `module` (None, or a module value) first, then among the global functions.
///
/// An empty `text` describes no chains. A name that is no parameter of the cache is accepted
/// when the cache holds that parameter presharded (`NAME_shard-1-of-N`, as MLC's models
/// describe their parameters whatever the cache), and its chain is neither looked up nor used.
///
/// Errors: `ValueError` naming the parameter for text that is not such JSON, a parameter the
/// cache lacks, or a function found nowhere.
pub(super) fn parse(
    text: &str,
    cache: &TensorCache,
    module: Option<&AnyView<'_>>,
) -> Result<Chains> {
    let mut chains = Chains::new();
    if text.trim().is_empty() {
        return Ok(chains);
    }
    let json: Value = serde_json::from_str(text)
        .map_err(|e| Error::value(format!("shard_info is not valid JSON ({e})")))?;
    let entries = json
        .as_object()
        .ok_or_else(|| Error::value(format!("shard_info must be a JSON object, got {json}")))?;
    for (name, chain) in entries {
        let what = || format!("shard_info of parameter `{name}`");
        let Some(index) = cache.index_of(name) else {
            if is_presharded_in(cache, name) {
                continue;
            }
            return Err(Error::value(format!(
                "{}: the tensor cache `{}` holds no parameter `{name}`",
                what(),
                cache.path()
            )));
        };
        let steps = chain.as_array().ok_or_else(|| {
            Error::value(format!(
                "{}: expected an array of steps, got {chain}",
                what()
            ))
        })?;
        let steps = steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                parse_step(step, module).map_err(|e| e.context(format!("{}: step {i}", what())))
            })
            .collect::<Result<Vec<Step>>>()?;
        if !steps.is_empty() {
            chains.insert(index, steps);
        }
    }
    Ok(chains)
}

/// Whether the cache holds parameter `name` presharded: `NAME_shard-1-of-N` for some N.
fn is_presharded_in(cache: &TensorCache, name: &str) -> bool {
    let prefix = format!("{name}_shard-1-of-");
    cache.params().iter().any(|p| {
        p.name
            .strip_prefix(&prefix)
            .is_some_and(|n| n.parse::<u32>().is_ok())
    })
}

fn parse_step(step: &Value, module: Option<&AnyView<'_>>) -> Result<Step> {
    let bad = || {
        Error::value(format!(
            "expected [function, [shape, dtype], ints...], got {step}"
        ))
    };
    let parts = step.as_array().ok_or_else(bad)?;
    let [name, output, extra @ ..] = parts.as_slice() else {
        return Err(bad());
    };
    let name = name.as_str().ok_or_else(bad)?;
    let [shape, dtype] = output.as_array().map(Vec::as_slice).ok_or_else(bad)? else {
        return Err(bad());
    };
    let shape = shape_of(shape).ok_or_else(bad)?;
    let dtype = parse_dtype(dtype.as_str().ok_or_else(bad)?)?;
    let extra = extra
        .iter()
        .map(Value::as_i64)
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(bad)?;
    Ok(Step {
        function: find(name, module)?,
        name: name.to_string(),
        shape,
        dtype,
        extra,
    })
}

/// The function `name`: the module's, if a module was passed in and has it, else the global
/// one.
fn find(name: &str, module: Option<&AnyView<'_>>) -> Result<Function> {
    module
        .and_then(|module| module_function(module, name).ok())
        .or_else(|| registry::get_global(name).ok())
        .ok_or_else(|| {
            let place = if module.is_none() {
                "among the global functions"
            } else {
                "in the module passed in, nor among the global functions"
            };
            Error::value(format!("no function `{name}` {place}"))
        })
}

/// The shape and dtype of a sharded parameter's last output: one shard per worker along its
/// first dimension.
pub(super) fn output(steps: &[Step]) -> (&[i64], DLDataType) {
    let last = steps.last().expect("a chain has a step");
    (&last.shape, last.dtype)
}

/// How errors name a chain's output.
pub(super) fn describe(steps: &[Step]) -> String {
    let (shape, dtype) = output(steps);
    format!("shape {shape:?} of {}", dtype_name(dtype))
}

/// The last output of the chain `steps` applied to `whole`, each output on `device`.
///
/// Errors: the error a function raised, or a tensor that could not be made, naming the step's
/// function.
pub(super) fn apply(steps: &[Step], whole: Tensor, device: DLDevice) -> Result<Tensor> {
    steps.iter().try_fold(whole, |input, step| {
        let output = worker_empty(&step.shape, step.dtype, device)?;
        let (input, out) = (Any::from(input), Any::from(output.clone()));
        let extra: Vec<Any> = step.extra.iter().map(|&v| Any::Int(v)).collect();
        let mut args = vec![input.view()];
        args.extend(extra.iter().map(Any::view));
        args.push(out.view());
        step.function
            .call(&args)
            .map_err(|e| e.context(format!("shard function `{}`", step.name)))?;
        Ok(output)
    })
}
