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


@pytest.mark.parametrize(
    "kind",
    [
        "threaded",
        "process",
        pytest.param(
            "socket",
            marks=pytest.mark.skipif(
                not session_kinds.has_gloo(), reason="no Gloo plugin next to the library"
            ),
        ),
    ],
)
def test_the_sharded_decoder_decodes_the_tokens_of_the_whole_one(kind, capsys):
    status = tp_decode.main([*SMALL, "--vocab", "256", "--kind", kind, "--workers", "2"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert status == 0, last
    assert last.startswith(f"tp_decode: tokens match: yes; kind {kind}; workers 2; "), last
    assert last.endswith(" tokens/s"), last


def test_sizes_that_do_not_divide_among_the_workers_are_refused():
    with pytest.raises(SystemExit, match="must divide among --workers"):
        tp_decode.main([*SMALL, "--vocab", "255", "--workers", "2"])
