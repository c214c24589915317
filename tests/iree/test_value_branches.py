"""Branches that compute nothing, only choosing among values made before them, run as
selects on the device instead of a choice of buffers read back to the host
(`value_branches_as_selects`, whilst/lowering/_iree_fusion.py)."""
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from helpers import op_names, vulkan_or_skip
from whilst.lowering import compile_to_stream, prepare

pytestmark = pytest.mark.iree


def nan_unless_positive(x):
    """equinox's check of a result under `EQX_ON_ERROR=nan` (diffrax's after a
    solve): sqrt(x) + 1, or NaNs where an element of x is not positive."""
    y = jnp.sqrt(x) + 1.0
    return lax.cond(jnp.all(x > 0), lambda a, b: a, lambda a, b: b, y, jnp.full_like(y, jnp.nan))


def nan_unless_positive_numpy(x):
    return np.sqrt(x) + 1.0 if np.all(x > 0) else np.full_like(x, np.nan)


def switched(k, x):
    """`lax.switch` over three branches that return x, 2x or x + 1."""
    return lax.switch(k, [lambda a, b, c: a, lambda a, b, c: b, lambda a, b, c: c],
                      x, x * 2.0, x + 1.0)


def switched_numpy(k, x):
    return [x, x * 2.0, x + 1.0][min(max(k, 0), 2)]


def _readbacks(fn, *args):
    return op_names(compile_to_stream(prepare([whilst.export(fn, *args)]))).count(
        "stream.resource.load")


@pytest.mark.parametrize("x", [np.array([1.0, 4.0, 9.0], np.float32),
                               np.array([1.0, -4.0, 9.0], np.float32)])
def test_a_check_that_picks_its_result_or_nans_reads_nothing_back(x):
    assert "stablehlo.case" in op_names(whilst.export(nan_unless_positive, x).text)
    assert "stablehlo.case" not in op_names(prepare([whilst.export(nan_unless_positive, x)]))
    assert _readbacks(nan_unless_positive, x) == 0
    got = whilst.compile(nan_unless_positive, x).load("local-sync").main(x)
    np.testing.assert_allclose(got, nan_unless_positive_numpy(x), rtol=1e-6)


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 5])
def test_a_switch_among_values_selects_as_lax_switch_does(k):
    x = np.array([0.5, 3.0], np.float32)
    assert _readbacks(switched, np.int32(k), x) == 0
    got = whilst.compile(switched, np.int32(0), x).load("local-sync").main(np.int32(k), x)
    np.testing.assert_array_equal(got, switched_numpy(k, x))


def test_a_choice_among_large_values_stays_a_branch():
    """Past SMALL_ELEMENTS a select's pass over the elements costs more than the
    readback of the index."""
    x = np.linspace(1.0, 2.0, 4096, dtype=np.float32)
    assert "stablehlo.case" in op_names(prepare([whilst.export(nan_unless_positive, x)]))
    got = whilst.compile(nan_unless_positive, x).load("local-sync").main(x)
    np.testing.assert_allclose(got, nan_unless_positive_numpy(x), rtol=1e-6)


def test_the_selects_run_on_vulkan():
    vulkan_or_skip()
    targets = ["llvm-cpu", "vulkan-spirv"]
    x, k = np.array([1.0, 4.0, 9.0], np.float32), np.int32(0)
    module = whilst.compile(
        [whilst.export(nan_unless_positive, x, name="checked", targets=targets),
         whilst.export(switched, k, x, name="switched", targets=targets)],
        target=targets, cache=False).load("vulkan")
    for value in (x, -x):
        np.testing.assert_allclose(module.checked(value), nan_unless_positive_numpy(value),
                                   rtol=1e-6)
    for k in (-1, 1, 5):
        np.testing.assert_array_equal(module.switched(np.int32(k), x), switched_numpy(k, x))
