"""Collectives between the workers through the package: init_ccl("cpu"), then Disco's methods,
on worker threads and on worker processes."""

from __future__ import annotations

import numpy as np
import pytest

import discovm

KINDS = [
    pytest.param(discovm.ThreadedSession, id="threads"),
    pytest.param(discovm.ProcessSession, id="processes"),
]
# Every test runs on each kind: through the `sess` fixture, or by taking `kind`.
each_kind_of_sess = pytest.mark.parametrize("sess", KINDS, indirect=True)

def fill_per_worker(sess: discovm.Session, shape, dtype, values) -> discovm.DRef:
    """A tensor on every worker, worker w's holding ``values[w]``."""
    dref = sess.empty(shape, dtype)
    for w in range(sess.num_workers):
        dref.debug_copy_from(w, np.asarray(values[w], dtype=dtype).reshape(shape))
    return dref


def on(dref: discovm.DRef, worker: int) -> np.ndarray:
    return np.from_dlpack(dref.debug_get_from_remote(worker))


@pytest.fixture
def ccl(sess):
    sess.init_ccl("cpu")
    return sess


@each_kind_of_sess
@pytest.mark.parametrize(
    ("op", "reduce"),
    [("sum", np.sum), ("prod", np.prod), ("min", np.min), ("max", np.max), ("avg", np.mean)],
)
def test_allreduce_every_op(ccl, op, reduce):
    values = [np.arange(6) + w + 1 for w in range(4)]
    src = fill_per_worker(ccl, (6,), "float64", values)
    dst = ccl.empty((6,), "float64")
    assert ccl.allreduce(src, dst, op=op) is dst
    expected = reduce(np.stack(values), axis=0)
    for w in range(4):
        np.testing.assert_allclose(on(dst, w), expected)


@each_kind_of_sess
def test_allreduce_refuses_an_unknown_op(ccl):
    x = ccl.empty((1,), "float32")
    with pytest.raises(ValueError, match="Unsupported reduce op: median"):
        ccl.allreduce(x, x, op="median")


@each_kind_of_sess
def test_allgather(ccl):
    src = fill_per_worker(ccl, (2,), "int32", [[w, 10 * w] for w in range(4)])
    dst = ccl.empty((8,), "int32")
    assert ccl.allgather(src, dst) is dst
    for w in range(4):
        np.testing.assert_array_equal(on(dst, w), [0, 0, 1, 10, 2, 20, 3, 30])


@each_kind_of_sess
def test_broadcast_from_the_host_and_from_worker_0(ccl):
    data = np.arange(10, dtype="int64").reshape(2, 5)
    everywhere = ccl.broadcast(data)
    for w in range(4):
        np.testing.assert_array_equal(on(everywhere, w), data)
    dst = ccl.empty((2, 5), "int64")
    assert ccl.broadcast(data * 3, dst) is dst
    np.testing.assert_array_equal(on(dst, 3), data * 3)
    ccl.broadcast_from_worker0(everywhere, dst)
    np.testing.assert_array_equal(on(dst, 2), data)


@each_kind_of_sess
def test_scatter_and_gather(ccl):
    data = np.arange(12, dtype="float32").reshape(4, 3)
    parts = ccl.scatter(data)
    for w in range(4):
        np.testing.assert_array_equal(on(parts, w), data[w])
    gathered = ccl.empty((4, 3), "float32", worker0_only=True)
    ccl.gather_to_worker0(parts, gathered)
    out = np.zeros((4, 3), dtype="float32")
    ccl.copy_from_worker_0(out, gathered)
    np.testing.assert_array_equal(out, data)
    again = ccl.empty((3,), "float32")
    ccl.scatter_from_worker0(ccl.copy_to_worker_0(data + 1), again)
    np.testing.assert_array_equal(on(again, 1), data[1] + 1)


@pytest.mark.parametrize("kind", KINDS)
def test_collectives_within_groups(kind):
    with kind(4, 2) as sess:
        sess.init_ccl("cpu")
        src = fill_per_worker(sess, (2,), "int32", [[w, w] for w in range(4)])
        in_group, everyone = sess.empty((2,), "int32"), sess.empty((2,), "int32")
        sess.allreduce(src, in_group, "sum", in_group=True)
        sess.allreduce(src, everyone, "sum", in_group=False)
        assert [on(in_group, w)[0] for w in range(4)] == [1, 1, 5, 5]
        assert [on(everyone, w)[0] for w in range(4)] == [6, 6, 6, 6]


@each_kind_of_sess
def test_a_collective_before_init_ccl_or_with_mismatched_tensors_is_a_worker_error(sess):
    x, y = sess.empty((4,), "float32"), sess.empty((5,), "float32")
    sess.allreduce(x, x)
    with pytest.raises(discovm.WorkerError, match="call init_ccl on the session first"):
        sess.sync_all()
    sess.init_ccl("cpu")
    sess.allreduce(x, y)
    with pytest.raises(discovm.WorkerError, match="recv"):
        sess.sync_all()
    with pytest.raises(ValueError, match='unknown collective backend "mpi"'):
        sess.init_ccl("mpi")
    with pytest.raises(discovm.DeviceUnavailable):
        sess.init_ccl("nccl", 0, 0, 0, 0)
