"""Fixtures of the tests of libdiscovm as a tvm-ffi module and of the discovm package.

The library is $DISCOVM_LIBRARY (tests/python.rs sets it to the one cargo built). The tests run
in the environment tests/support/pytest_venv.sh makes: apache-tvm-ffi, numpy, pytest and the
package installed from python/.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest
import tvm_ffi

import discovm


# Worker processes of process sessions import the tests' helper modules from this directory;
# the tests import those they share with the other suite from the one above.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH")])
)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@pytest.fixture(scope="session")
def lib() -> tvm_ffi.Module:
    """The library as tvm-ffi loads any module, without the package."""
    return tvm_ffi.load_module(os.environ[discovm.LIBRARY_ENV])


@pytest.fixture
def sess(request):
    """A session of 4 workers: a ThreadedSession, or the session class a test passes through
    ``pytest.mark.parametrize("sess", [...], indirect=True)``. Afterwards every register a
    test made is free again (only the functions the session looked up for its own methods
    remain), and the session is shut down."""
    session = getattr(request, "param", discovm.ThreadedSession)(4)
    yield session
    gc.collect()
    cached = len(session._cache)
    assert [session.live_registers(w) for w in range(4)] == [cached] * 4
    session.shutdown()
