"""Notebook 01's launchers against their NumPy references at odd sizes, and their argument checks."""
import numpy as np
import pytest
from numba import cuda

import course
from course import gather as G
from course import scale as S


@pytest.mark.parametrize("shape", [(1,), (257,), (3, 7, 5), (course.pick(1001, 11), 784)])
def test_scale_matches_reference(shape):
    x = np.random.default_rng(1).integers(0, 256, shape, dtype=np.uint8)
    got = S.scale(cuda.to_device(x)).copy_to_host()
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, S.scale_ref(x), atol=1e-7, rtol=0)  # float32: exact up to 1 ulp


@pytest.mark.parametrize("n, d, b, itype", [(50, 33, 17, np.int64), (9, 784, 9, np.int32),
                                            (course.pick(3000, 40), 784, course.pick(64, 5), np.int64)])
def test_gather_matches_reference(n, d, b, itype):
    rng = np.random.default_rng(2)
    X = rng.standard_normal((n, d)).astype(np.float32)
    idx = rng.permutation(n)[:b].astype(itype)
    got = G.gather(cuda.to_device(X), cuda.to_device(idx)).copy_to_host()
    np.testing.assert_array_equal(got, G.gather_ref(X, idx))  # a copy: exact


def test_gather_into_a_reused_buffer():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((20, 13)).astype(np.float32)
    X_d, out = cuda.to_device(X), cuda.device_array((4, 13), np.float32)
    for k in range(2):
        idx = rng.permutation(20)[:4]
        assert G.gather(X_d, cuda.to_device(idx), out=out) is out
        np.testing.assert_array_equal(out.copy_to_host(), X[idx])


def test_launchers_refuse_bad_arguments():
    X = cuda.to_device(np.zeros((6, 5), np.float32))
    idx = cuda.to_device(np.arange(3))
    with pytest.raises(ValueError, match="device array"):
        G.gather(np.zeros((6, 5), np.float32), idx)
    with pytest.raises(ValueError, match="dtype"):
        G.gather(cuda.to_device(np.zeros((6, 5))), idx)
    with pytest.raises(ValueError, match="2-D"):
        G.gather(cuda.to_device(np.zeros(6, np.float32)), idx)
    with pytest.raises(ValueError, match="shape"):
        G.gather(X, idx, out=cuda.device_array((3, 4), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        G.gather(X[:, 1:4], idx)
    with pytest.raises(ValueError, match="dtype"):
        S.scale(cuda.to_device(np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match="shape"):
        S.scale(cuda.to_device(np.zeros(4, np.uint8)), out=cuda.device_array(5, np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        S.scale(cuda.to_device(np.zeros(8, np.uint8))[::2])


def test_empty_inputs():
    assert S.scale(cuda.to_device(np.zeros((0, 784), np.uint8))).shape == (0, 784)
