"""A GPT-style decoder written with TVM's Relax frontend, decoding greedily tensor-parallel on
discovm's CPU workers, and checked against the same model unsharded in one process.

    python examples/python/tp_decode.py --kind process --workers 2 --tokens 32

What it does, in order:

1. writes the decoder (``--layers`` blocks of attention and MLP, ``--hidden`` wide, ``--heads``
   heads, a ``--vocab`` of tokens) with ``tvm.relax.frontend.nn``, twice: whole, and sharded
   for ``--workers`` workers (each worker holds its heads' columns of the query, key and value
   weights, the matching rows of the output projection, and its columns of the MLP; an
   ``ccl_allreduce`` follows the attention's output and the MLP; each worker computes the logits
   of its part of the vocabulary, and ``ccl_allgather`` joins them), and compiles both for the
   CPU, the kernels' outer loops parallel;
2. saves random weights as TVM's tensor cache (``tensor-cache.json`` and its ``.bin`` file),
   with a ``shard_info`` that names the shard functions compiled into the sharded model;
3. starts a session of ``--kind`` (threads of this process, worker processes, or two nodes on
   this machine over loopback), loads the model and, through Disco's loader built-ins
   (``runtime.disco.ShardLoader``, ``ShardLoaderLoadAll``), each worker's shard of the weights;
4. decodes ``--tokens`` tokens greedily from token 0, the key-value cache growing on every
   worker, and the same tokens with TVM's own VirtualMachine in this process.

Its last line is ``tp_decode: tokens match: yes; kind K; workers W; T tokens/s; single process
S tokens/s`` (exit status 1 when the tokens differ).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm
import tvm_ffi
from tvm import relax, te, tirx
from tvm.contrib import tvmjs
from tvm.relax.backend.cpu_generic import pipeline as cpu_pipeline
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec
from tvm.s_tir import Schedule

import discovm

#: The secret of the session of two nodes.
TOKEN = "tp_decode's session secret"


@dataclass(frozen=True)
class Config:
    vocab: int
    hidden: int
    layers: int
    heads: int
    ffn: int
    #: Positions the model has embeddings for (the most tokens it decodes).
    positions: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class Block(nn.Module):
    """One decoder block: attention over the cache and the new token, then an MLP; with
    ``shards`` > 1, this worker's heads and MLP columns, summed across workers after each."""

    def __init__(self, cfg: Config, shards: int):
        self.cfg, self.shards = cfg, shards
        width, inner = cfg.heads // shards * cfg.head_dim, cfg.ffn // shards
        self.ln1_w, self.ln1_b = nn.Parameter((cfg.hidden,)), nn.Parameter((cfg.hidden,))
        self.wq = nn.Parameter((cfg.hidden, width))
        self.wk = nn.Parameter((cfg.hidden, width))
        self.wv = nn.Parameter((cfg.hidden, width))
        self.wo = nn.Parameter((width, cfg.hidden))
        self.bo = nn.Parameter((cfg.hidden,))
        self.ln2_w, self.ln2_b = nn.Parameter((cfg.hidden,)), nn.Parameter((cfg.hidden,))
        self.w_up = nn.Parameter((cfg.hidden, inner))
        self.b_up = nn.Parameter((inner,))
        self.w_down = nn.Parameter((inner, cfg.hidden))
        self.b_down = nn.Parameter((cfg.hidden,))

    def summed(self, partial: nn.Tensor) -> nn.Tensor:
        return op.ccl_allreduce(partial, "sum") if self.shards > 1 else partial

    def forward(self, x: nn.Tensor, k: nn.Tensor, v: nn.Tensor):
        cfg = self.cfg
        heads, dim = cfg.heads // self.shards, cfg.head_dim
        h = op.layer_norm(x, [cfg.hidden], self.ln1_w, self.ln1_b)
        q = op.reshape(op.matmul(h, self.wq), [1, heads, dim])
        k = op.concat([k, op.reshape(op.matmul(h, self.wk), [1, heads, dim])], dim=0)
        v = op.concat([v, op.reshape(op.matmul(h, self.wv), [1, heads, dim])], dim=0)
        scores = op.matmul(op.permute_dims(q, [1, 0, 2]), op.permute_dims(k, [1, 2, 0]))
        weights = op.softmax(scores * (1.0 / dim**0.5), axis=-1)
        attended = op.matmul(weights, op.permute_dims(v, [1, 0, 2]))
        attended = op.reshape(op.permute_dims(attended, [1, 0, 2]), [1, heads * dim])
        x = x + self.summed(op.matmul(attended, self.wo)) + self.bo
        h = op.layer_norm(x, [cfg.hidden], self.ln2_w, self.ln2_b)
        up = op.gelu(op.matmul(h, self.w_up) + self.b_up)
        x = x + self.summed(op.matmul(up, self.w_down)) + self.b_down
        return x, k, v


def blocks_of(cache: nn.Tensor, layers: int) -> list[nn.Tensor]:
    """A cache's tensor cut into each block's part (`split` gives one tensor alone, not a list
    of one)."""
    parts = op.split(cache, layers, axis=0)
    return list(parts) if layers > 1 else [parts]


class Decoder(nn.Module):
    """Token and position embeddings, the blocks, a final norm and a head over the vocabulary
    (with ``shards`` > 1, this worker's columns of it, the logits gathered from every worker).
    ``decode`` takes a token and its position with every block's cache (keys and
    values, one tensor each: blocks x positions so far x heads x head dim) and returns the next
    token (the most likely), the next position and the caches one position longer."""

    def __init__(self, cfg: Config, shards: int):
        self.cfg, self.shards = cfg, shards
        self.wte = nn.Parameter((cfg.vocab, cfg.hidden))
        self.wpe = nn.Parameter((cfg.positions, cfg.hidden))
        self.blocks = nn.ModuleList([Block(cfg, shards) for _ in range(cfg.layers)])
        self.lnf_w, self.lnf_b = nn.Parameter((cfg.hidden,)), nn.Parameter((cfg.hidden,))
        self.head = nn.Parameter((cfg.hidden, cfg.vocab // shards))

    def decode(self, token: nn.Tensor, pos: nn.Tensor, keys: nn.Tensor, values: nn.Tensor):
        cfg = self.cfg
        heads, seen = cfg.heads // self.shards, keys.shape[1]
        x = op.take(self.wte, token, axis=0) + op.take(self.wpe, pos, axis=0)
        per_block = [blocks_of(keys, cfg.layers), blocks_of(values, cfg.layers)]
        longer = ([], [])
        for i, block in enumerate(self.blocks):
            k, v = (op.reshape(t[i], [seen, heads, cfg.head_dim]) for t in per_block)
            x, k, v = block(x, k, v)
            for kept, t in zip(longer, (k, v)):
                kept.append(op.reshape(t, [1, seen + 1, heads, cfg.head_dim]))
        x = op.layer_norm(x, [cfg.hidden], self.lnf_w, self.lnf_b)
        logits = op.matmul(x, self.head)
        if self.shards > 1:
            parts = op.ccl_allgather(logits, self.shards)  # one row of columns per worker
            logits = op.reshape(parts, [1, cfg.vocab])
        best = op.wrap_nested(relax.op.argmax(logits._expr, axis=-1), name="best")
        one = nn.Tensor.from_const(np.ones((1,), "int32"))
        return (
            op.astype(best, "int32"),
            pos + one,
            op.concat(longer[0], dim=0),
            op.concat(longer[1], dim=0),
        )


def export(cfg: Config, shards: int) -> tuple[tvm.IRModule, list[tuple[str, tuple[int, ...]]]]:
    """The decoder for ``shards`` workers as an IRModule (its parameters packed in one tuple,
    the last argument of ``decode``), with its parameters' names and shapes in that order."""
    heads = cfg.heads // shards
    cache = spec.Tensor([cfg.layers, "seen", heads, cfg.head_dim], "float32")
    mod, params = Decoder(cfg, shards).export_tvm(
        spec={
            "decode": {
                "token": spec.Tensor([1], "int32"),
                "pos": spec.Tensor([1], "int32"),
                "keys": cache,
                "values": cache,
                "$": {"param_mode": "packed", "effect_mode": "none"},
            }
        }
    )
    return mod, [(name, tuple(int(d) for d in p.shape)) for name, p in params]


#: The parameters each worker holds a part of, and the axis they are cut along (the others are
#: whole on every worker): the heads' columns of q, k and v and their rows of the output
#: projection; the MLP's columns, its bias, and its rows of the down projection; the head's
#: columns (its part of the vocabulary).
SHARDED = {"wq": 1, "wk": 1, "wv": 1, "wo": 0, "w_up": 1, "b_up": 0, "w_down": 0, "head": 1}


def sharded_axis(name: str) -> int | None:
    return SHARDED.get(name.rsplit(".", 1)[-1])


def shard_function(shape: tuple[int, ...], axis: int, shards: int) -> tuple[str, tvm.IRModule]:
    """A function that cuts a parameter of ``shape`` into ``shards`` parts along ``axis``, the
    parts stacked first: ``(whole, parts)``, as Disco's loader calls it."""
    name = f"shard_{'x'.join(map(str, shape))}_axis{axis}_of{shards}"
    whole = te.placeholder(shape, "float32", name="whole")
    part = shape[axis] // shards
    out = [shards] + [part if d == axis else n for d, n in enumerate(shape)]

    def at(w, *index):
        source = list(index)
        source[axis] = w * part + index[axis]
        return whole[tuple(source)]

    parts = te.compute(out, at, name="parts")
    return name, te.create_prim_func([whole, parts]).with_attr("global_symbol", name)


def add_shard_functions(
    mod: tvm.IRModule, params: list[tuple[str, tuple[int, ...]]], shards: int
) -> dict:
    """Adds to ``mod`` a shard function for each sharded parameter (``params`` are the whole
    model's); returns the ``shard_info`` that names them, by the cache's record names."""
    info = {}
    for i, (name, shape) in enumerate(params):
        axis = sharded_axis(name)
        if axis is None:
            continue
        fname, func = shard_function(shape, axis, shards)
        if fname not in [gv.name_hint for gv in mod.get_global_vars()]:
            mod[fname] = func
        out = [shards] + [n // shards if d == axis else n for d, n in enumerate(shape)]
        info[f"param_{i}"] = [[fname, [out, "float32"]]]
    return info


def parallel_loops() -> tvm.transform.Pass:
    """Runs the outer loops of every kernel on TVM's thread pool: in each kernel's blocks, the
    leading loops over the output (not a reduction) fused into one parallel loop. TVM's CPU
    pipeline schedules nothing by itself, so without this one process uses one core."""

    @tvm.transform.module_pass(opt_level=0, name="ParallelLoops")
    def transform(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        for var, func in list(mod.functions.items()):
            if not isinstance(func, tirx.PrimFunc):
                continue
            sch = Schedule(func)
            for block in sch.get_child_blocks(sch.get_sblock("root")):
                loops = sch.get_loops(block)
                leading = []
                for loop, var_ in zip(loops, sch.get(block).iter_vars):
                    if var_.iter_type != tirx.IterVar.DataPar:
                        break
                    leading.append(loop)
                if leading:
                    sch.parallel(sch.fuse(*leading) if len(leading) > 1 else leading[0])
            mod[var] = sch.mod["main"]
        return mod

    return transform


def compile_for_cpu(mod: tvm.IRModule) -> tvm.runtime.Executable:
    """Compiles for this machine's CPU with TVM's CPU pipeline, its kernels' outer loops
    parallel (one worker process runs them on its own threads, one per core it has)."""
    target = tvm.target.Target({"kind": "llvm"})
    steps = cpu_pipeline

    @tvm.transform.module_pass(opt_level=0, name="DecoderPipeline")
    def pipeline(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        with target:
            passes = (
                steps.library_dispatch_passes(target)
                + steps.legalize_passes(target)
                + [parallel_loops()]
                + steps.dataflow_lower_passes(target)
                + steps.finalize_passes(target)
            )
            return tvm.transform.Sequential(passes)(mod)

    return tvm.compile(mod, target=target, relax_pipeline=pipeline)


def random_weights(params: list[tuple[str, tuple[int, ...]]], seed: int) -> list[np.ndarray]:
    """Weights of a small trained-looking scale: norms of one and zero, the rest random."""
    rng = np.random.default_rng(seed)
    weights = []
    for name, shape in params:
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("ln") and leaf.endswith("_w"):
            weights.append(np.ones(shape, "float32"))
        elif leaf.startswith("ln") or leaf.startswith("b"):
            weights.append(np.zeros(shape, "float32"))
        else:
            scale = 1.0 if leaf in ("wte", "wpe") else 1.0 / np.sqrt(shape[0])
            weights.append((rng.standard_normal(shape) * scale).astype("float32"))
    return weights


def decode_single(executable, cfg: Config, weights: list[np.ndarray], tokens: int, warmup: int = 0):
    """The tokens TVM's own VirtualMachine decodes in this process, and its tokens per second
    after the first ``warmup``."""
    vm = relax.VirtualMachine(executable, tvm.cpu())
    params = [tvm.runtime.tensor(w) for w in weights]
    empty = np.zeros((cfg.layers, 0, cfg.heads, cfg.head_dim), "float32")
    token, pos = tvm.runtime.tensor(np.zeros(1, "int32")), tvm.runtime.tensor(np.zeros(1, "int32"))
    keys, values = tvm.runtime.tensor(empty), tvm.runtime.tensor(empty)
    out = []
    for _ in range(tokens):
        if len(out) == warmup:
            started = time.perf_counter()
        token, pos, keys, values = vm["decode"](token, pos, keys, values, params)
        out.append(int(token.numpy()[0]))
    return out, (tokens - warmup) / (time.perf_counter() - started)


def start_session(kind: str, workers: int) -> tuple[discovm.Session, subprocess.Popen | None]:
    """A session of ``workers`` CPU workers of ``kind``, with the node process it started: for
    ``socket``, two nodes on this machine, this one and a ``python -m discovm.node`` joining
    over loopback (it ends with the session)."""
    if kind == "threaded":
        return discovm.ThreadedSession(workers), None
    if kind == "process":
        return discovm.ProcessSession(workers), None
    if workers % 2:
        raise SystemExit("--kind socket runs two nodes: --workers must be even")
    with socket.socket() as probe:  # bound, never listening: nobody else takes the port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, DISCOVM_SESSION_TOKEN=TOKEN)
    node = subprocess.Popen(
        [sys.executable, "-m", "discovm.node", "127.0.0.1", str(port), str(workers // 2)],
        env=env,
    )
    session = discovm.SocketSession(
        2, workers // 2, 1, "127.0.0.1", port, session_token=TOKEN, timeout=120
    )
    return session, node


def decode_sharded(
    sess, library: Path, cache: Path, shard_info: dict, cfg: Config, tokens: int, warmup: int = 0
):
    """Loads the sharded model and its weights on the session's workers and decodes there; the
    tokens worker 0 decoded, and tokens per second after the first ``warmup``."""
    workers = sess.num_workers
    sess.init_ccl("cpu")
    mod = sess.load_vm_module(library)
    # Each worker's kernels run on threads of its own: the machine's cores shared among them.
    # TVM pins a pool's threads, every worker's to the same first cores; with one thread per
    # worker, each is pinned to a core of its own instead.
    cores = os.cpu_count() or 1
    threads = max(1, cores // workers)
    sess.get_global_func("runtime.config_threadpool")(1, threads)
    if threads == 1 and workers <= cores:
        pin = sess.get_global_func("runtime.disco.bind_worker_to_cpu_core")
        pin(tvm_ffi.Shape(tuple(range(workers))))
    metadata = cache / "tensor-cache.json"
    loader = sess.get_global_func("runtime.disco.ShardLoader")(
        str(metadata), metadata.read_text(), json.dumps(shard_info), mod
    )
    params = sess.get_global_func("runtime.disco.ShardLoaderLoadAll")(loader)
    decode, item = mod["decode"], sess.get_global_func("ffi.ArrayGetItem")
    heads = cfg.heads // workers
    empty = (cfg.layers, 0, heads, cfg.head_dim)
    token = sess.broadcast(np.zeros(1, "int32"))
    pos = sess.broadcast(np.zeros(1, "int32"))
    keys, values = sess.empty(empty, "float32"), sess.empty(empty, "float32")
    sess.sync_all()
    host = np.zeros(1, "int32")
    out = []
    for _ in range(tokens):
        if len(out) == warmup:
            started = time.perf_counter()
        step = decode(token, pos, keys, values, params)
        token, pos, keys, values = (item(step, i) for i in range(4))
        sess.copy_from_worker_0(host, token)
        out.append(int(host[0]))
    return out, (tokens - warmup) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=["threaded", "process", "socket"], default="process")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if any(n % args.workers for n in (args.heads, args.ffn, args.vocab)) or args.hidden % args.heads:
        raise SystemExit(
            "--heads, --ffn and --vocab must divide among --workers, and --hidden among --heads"
        )
    # TVM's thread pool takes half the cores by default (it counts on two threads per core): the
    # single process gets them all, as each worker gets its share.
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    cfg = Config(args.vocab, args.hidden, args.layers, args.heads, args.ffn, args.tokens)
    whole, params = export(cfg, 1)
    sharded, _ = export(cfg, args.workers)
    shard_info = add_shard_functions(sharded, params, args.workers)
    weights = random_weights(params, args.seed)
    with tempfile.TemporaryDirectory(prefix="tp_decode-") as folder:
        folder = Path(folder)
        library = folder / "decoder_sharded.so"
        compile_for_cpu(sharded).export_library(str(library))
        tvmjs.dump_tensor_cache(
            {f"param_{i}": w for i, w in enumerate(weights)}, str(folder / "cache"),
            encode_format="raw", show_progress=False,
        )
        expected, single = decode_single(compile_for_cpu(whole), cfg, weights, args.tokens)
        sess, node = start_session(args.kind, args.workers)
        with sess:
            got, rate = decode_sharded(sess, library, folder / "cache", shard_info, cfg, args.tokens)
        if node is not None:
            node.wait(timeout=30)
    match = got == expected
    if not match:
        print(f"tp_decode: sharded tokens {got}\ntp_decode: single tokens  {expected}")
    print(
        f"tp_decode: tokens match: {'yes' if match else 'no'}; kind {args.kind}; workers "
        f"{args.workers}; {rate:.1f} tokens/s; single process {single:.1f} tokens/s"
    )
    return 0 if match else 1


if __name__ == "__main__":
    sys.exit(main())
