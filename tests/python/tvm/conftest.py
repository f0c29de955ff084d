"""Fixtures of the tests of models that TVM compiled, run on discovm's workers.

The library is $DISCOVM_LIBRARY (tests/python_tvm.rs sets it to the one cargo built). The tests
run in the environment tests/support/tvm_venv.sh makes: apache-tvm, apache-tvm-ffi, numpy,
pytest and the package installed from python/.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import on_discovm
import sharded_mlp

# The tests import the helpers they share with the other suite from the directory above.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass
class Model:
    """The sharded MLP exported as a library, an input, and the unsharded MLP's output."""

    path: Path
    x: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    reference: np.ndarray


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Model:
    folder = tmp_path_factory.mktemp("model")
    x, w1, w2 = sharded_mlp.inputs()
    path = sharded_mlp.export_sharded(folder / "sharded_mlp.so")
    return Model(path, x, w1, w2, sharded_mlp.reference(x, w1, w2))


@pytest.fixture(scope="session", autouse=True)
def loader() -> None:
    """The worker function that loads a model (what ``Session.load_vm_module`` does)."""
    on_discovm.register_loader()
