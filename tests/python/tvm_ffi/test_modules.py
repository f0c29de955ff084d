"""Modules on the workers through the package: the library itself is a module (its functions
are exported under tvm-ffi's convention), loaded on every worker with ``Session.load_module``;
bad paths, missing functions (at the lookup) and modules used as functions are clear errors,
and the session goes on."""

from __future__ import annotations

import numpy as np
import pytest

import discovm

each_kind = pytest.mark.parametrize(
    "sess", [discovm.ThreadedSession, discovm.ProcessSession], indirect=True
)


def test_a_module_s_functions_run_on_every_worker(sess):
    mod = sess.load_module(discovm.library_path())
    assert isinstance(mod, discovm.DModule)
    worker_id = mod["current_worker_id"]
    assert isinstance(worker_id, discovm.DPackedFunc)
    ids = worker_id()
    assert [ids.debug_get_from_remote(w) for w in range(4)] == [0, 1, 2, 3]
    version = mod["version"]()
    assert version.debug_get_from_remote(3) == discovm.version()


def test_a_path_that_is_no_file_is_refused_at_the_call(sess, tmp_path):
    with pytest.raises(ValueError, match="is not a file"):
        sess.load_module(tmp_path / "libmissing.so")
    with pytest.raises(ValueError, match="is not a file"):
        sess.load_module(tmp_path)


def test_a_file_that_is_no_library_fails_the_next_wait_with_the_loader_s_reason(sess, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a shared library\n")
    mod = sess.load_module(text)
    with pytest.raises(discovm.WorkerError, match="cannot load module .*notes.txt"):
        mod["version"]
    with pytest.raises(discovm.WorkerError, match="cannot load module .*notes.txt"):
        sess.sync_all()
    assert sess.get_global_func("runtime.disco.worker_rank")().debug_get_from_remote(2) == 2


@each_kind
def test_a_missing_function_fails_the_lookup_naming_it_and_the_module_s_path(sess):
    mod = sess.load_module(discovm.library_path())
    with pytest.raises(KeyError, match="has no function `no_such_function`") as raised:
        mod["no_such_function"]
    assert str(discovm.library_path()) in str(raised.value)
    assert "__tvm_ffi_no_such_function" in str(raised.value)
    sess.sync_all()  # nothing was left for the next wait
    assert mod["version"]().debug_get_from_remote(3) == discovm.version()


@each_kind
def test_a_module_a_worker_function_returned_is_looked_up_too(sess):
    sess.import_python_module("process_functions")
    mod = discovm.DModule(sess.get_global_func("tests.process.library_module")(), sess)
    assert mod["version"]().debug_get_from_remote(1) == discovm.version()
    with pytest.raises(KeyError, match="tvm-ffi module of kind `library` has no function `nope`"):
        mod["nope"]


def test_a_module_is_not_a_function_and_a_function_is_not_a_module(sess):
    mod = sess.load_module(discovm.library_path())
    sess.call_packed(mod)
    with pytest.raises(discovm.WorkerError, match="discovm.Module"):
        sess.sync_worker_0()
    rank = sess.get_global_func("runtime.disco.worker_rank")
    with pytest.raises(TypeError, match="expected a module"):
        discovm.DModule(rank, sess)["version"]


def test_load_vm_module_needs_apache_tvm_or_a_file(sess, tmp_path):
    try:
        import tvm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="apache-tvm"):
            sess.load_vm_module(tmp_path / "model.so")
    else:
        with pytest.raises(ValueError, match="is not a file"):
            sess.load_vm_module(tmp_path / "model.so")


def test_remote_tensors_read_back_with_numpy_and_dlpack(sess):
    x = sess.copy_to_worker_0(np.arange(6, dtype="float32").reshape(2, 3))
    value = x.debug_get_from_remote(0)
    assert isinstance(value, discovm.Tensor)
    np.testing.assert_array_equal(value.numpy(), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(value), np.arange(6).reshape(2, 3))
    assert x.debug_get_from_remote(1) is None, "copy_to_worker_0 allocates on worker 0 alone"


def test_a_relative_path_names_the_file_relative_to_the_caller(sess, monkeypatch):
    library = discovm.library_path()
    monkeypatch.chdir(library.parent)
    mod = sess.load_module(library.name)  # a bare name: the file here, not a search
    assert mod["current_worker_id"]().debug_get_from_remote(1) == 1
