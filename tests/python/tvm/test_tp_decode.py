"""The tensor-parallel decoder of ``examples/python/tp_decode.py``, at a small size, on every
kind of session: a GPT-style model TVM compiled, its weights loaded in shards through Disco's
loader built-ins, decodes the same tokens on 2 workers as unsharded in one process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import session_kinds

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "python"))

import tp_decode  # noqa: E402

#: Small enough for a few seconds a kind, with every part of the model: two blocks, two heads
#: per worker, a vocabulary cut in two.
SMALL = ["--tokens", "12", "--layers", "2", "--hidden", "64", "--heads", "4", "--ffn", "128"]


#: Two nodes, where the library has its Gloo plugin.
SOCKET = pytest.param(
    "socket",
    marks=pytest.mark.skipif(
        not session_kinds.has_gloo(), reason="no Gloo plugin next to the library"
    ),
)


@pytest.mark.parametrize("kind", ["threaded", "process", SOCKET])
def test_the_sharded_decoder_decodes_the_tokens_of_the_whole_one(kind, capsys):
    status = tp_decode.main([*SMALL, "--vocab", "256", "--kind", kind, "--workers", "2"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 0, last
    assert last.startswith(f"tp_decode: tokens match: yes; kind {kind}; workers 2; "), last
    assert last.endswith(" tokens/s"), last


def test_sizes_that_do_not_divide_among_the_workers_are_refused():
    with pytest.raises(SystemExit, match="must divide among --workers"):
        tp_decode.main([*SMALL, "--vocab", "255", "--workers", "2"])


@pytest.mark.parametrize("kind", ["process", SOCKET])
def test_a_trace_of_the_decoder_shows_its_collectives_meet(tmp_path, kind):
    import json

    import numpy as np
    from tvm.contrib import tvmjs

    cfg = tp_decode.Config(256, 64, 2, 4, 128, 6)
    whole, params = tp_decode.export(cfg, 1)
    sharded, _ = tp_decode.export(cfg, 2)
    shard_info = tp_decode.add_shard_functions(sharded, params, 2)
    weights = tp_decode.random_weights(params, 0)
    library = tmp_path / "decoder.so"
    tp_decode.compile_for_cpu(sharded).export_library(str(library))
    tvmjs.dump_tensor_cache(
        {f"param_{i}": w for i, w in enumerate(weights)}, str(tmp_path / "cache"),
        encode_format="raw", show_progress=False,
    )
    sess, node = tp_decode.start_session(kind, 2)
    with sess:
        with sess.trace(tmp_path / "trace.json"):
            tp_decode.decode_sharded(sess, library, tmp_path / "cache", shard_info, cfg, 3)
    if node is not None:
        node.wait(timeout=60)
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    for event in events:
        assert {"ph", "name", "pid", "tid"} <= set(event), event
    complete = [e for e in events if e["ph"] == "X"]

    def spans(worker, name):
        return [
            (e["ts"], e["ts"] + e["dur"], e["args"]["call"])
            for e in complete
            if e["args"].get("worker") == worker and e["name"] == name
        ]

    # The model's collectives (an allreduce after each attention and MLP, an allgather of the
    # logits), on both workers, within its calls; each pair of one call overlaps: they met.
    first, second = spans(0, "allreduce"), spans(1, "allreduce")
    assert len(first) == len(second) == 3 * 2 * cfg.layers, (first, second)
    for (a0, a1, call_a), (b0, b1, call_b) in zip(first, second):
        assert call_a == call_b
        assert a0 <= b1 and b0 <= a1, "the workers' allreduces of one step overlap"
    assert len(spans(0, "allgather")) == 3
    # The model was loaded on each worker, and every send has its runs.
    assert len([e for e in complete if e["cat"] == "module"]) == 2
    starts = {e["id"] for e in events if e["ph"] == "s"}
    finishes = {e["id"] for e in events if e["ph"] == "f"}
    assert starts and starts == finishes
    assert np.isfinite([e["dur"] for e in complete]).all()
    # Worker 1's events on two nodes are node 1's, moved onto the controller's clock within
    # the error the metadata gives.
    nodes = trace["otherData"]["nodes"]
    if kind == "socket":
        assert [n["node"] for n in nodes] == [1] and "events_missing" not in nodes[0], nodes
        assert abs(nodes[0]["clock_offset_us"]) <= nodes[0]["clock_error_us"] + 1, nodes
        assert {e["pid"] for e in complete if e["args"].get("worker") == 1} == {1}
    else:
        assert nodes == []
