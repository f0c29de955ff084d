"""Shard functions for the loader's tests, registered as global functions when this module is
imported (by the tests, and by the worker processes of their sessions): each takes the whole
parameter, its extra arguments, and the tensor to write the shards to, as TVM's loader calls
them."""

from __future__ import annotations

import numpy as np

import discovm


@discovm.register_global_func("tests.weights.shard_dim_0", override=True)
def shard_dim_0(src, num_shards: int, dst) -> None:
    """A matrix in blocks of rows: [R, C] -> [n, R/n, C]."""
    whole = np.from_dlpack(src)
    np.from_dlpack(dst)[...] = whole.reshape(num_shards, -1, whole.shape[1])


@discovm.register_global_func("tests.weights.shard_dim_1", override=True)
def shard_dim_1(src, num_shards: int, dst) -> None:
    """A matrix in blocks of columns: [R, C] -> [n, R, C/n]."""
    whole = np.from_dlpack(src)
    rows, cols = whole.shape
    blocks = whole.reshape(rows, num_shards, cols // num_shards)
    np.from_dlpack(dst)[...] = blocks.transpose(1, 0, 2)


def qkv_heads(whole: np.ndarray, num_shards: int, q_heads: int, kv_heads: int) -> np.ndarray:
    """A fused QKV projection [(q + 2 kv) * d, h] with each worker's heads of Q, K and V
    together: [n, (q + 2 kv) / n, d, h]."""
    head_dim = whole.shape[0] // (q_heads + 2 * kv_heads)
    hidden = whole.shape[1]
    q, k, v = np.split(whole, [q_heads * head_dim, (q_heads + kv_heads) * head_dim])
    per = [
        part.reshape(num_shards, heads // num_shards, head_dim, hidden)
        for part, heads in ((q, q_heads), (k, kv_heads), (v, kv_heads))
    ]
    return np.concatenate(per, axis=1)


@discovm.register_global_func("tests.weights.shard_qkv_heads", override=True)
def shard_qkv_heads(src, num_shards: int, q_heads: int, kv_heads: int, dst) -> None:
    """The first step of a QKV projection's chain (see :func:`qkv_heads`)."""
    np.from_dlpack(dst)[...] = qkv_heads(np.from_dlpack(src), num_shards, q_heads, kv_heads)


@discovm.register_global_func("tests.weights.merge_heads", override=True)
def merge_heads(src, dst) -> None:
    """The second step: [n, heads, d, h] -> [n, heads * d, h]."""
    whole = np.from_dlpack(src)
    np.from_dlpack(dst)[...] = whole.reshape(whole.shape[0], -1, whole.shape[-1])
