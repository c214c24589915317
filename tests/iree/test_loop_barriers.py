"""Optimization barriers stay out of loop bodies where IREE 3.13 does not need them:
each one there ends the iteration's command buffer (a submission more per
iteration). The guard that keeps a body reading the carries it overwrites is one
opaque zero per function (`whilst/lowering/_iree_carry_guards.py`), and a loop that
runs at least once returns its results without a barrier
(`whilst/lowering/_iree_loop_results.py`), and a scatter into a constant broadcast
is not fenced, and a select of a wide state by a scalar computed on the device is
elementwise (`whilst/lowering/_iree_fusion.py`)."""
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import whilst
from whilst._compile import FALLBACK_NOTE
from whilst.lowering import flag_sets, prepare, source_for
from whilst.lowering._iree_fusion import FENCE_ATTR
from whilst.lowering._iree import loop_costs
from whilst.lowering._ir_walk import ops_where
from whilst.lowering._iree_ir import ir
from tests.helpers import host_driven_stream

pytestmark = pytest.mark.iree

X = np.array([0.5, 1.5, 2.5], np.float32)


def grown(x):
    """Steps of `y <- 1.5 y + 0.1` until sum(y) passes 40, carrying the previous y
    (overwritten, never read)."""
    def body(c):
        i, y, _ = c
        return i + 1, y * 1.5 + 0.1, y
    return whilst.lax.while_loop(lambda c: jnp.sum(c[1]) < 40.0, body, (0, x, x))


def counted_then_grown(x):
    """Five counted steps of `z <- z * 0.5 + x`, then `grown` from their result."""
    return grown(whilst.lax.fori_loop(0, 5, lambda _, z: z * 0.5 + x, x))


def grown_numpy(x):
    i, y, prev = 0, x.astype(np.float64), x.astype(np.float64)
    while np.sum(y) < 40.0:
        i, y, prev = i + 1, y * 1.5 + 0.1, y
    return i, y, prev


def counted_then_grown_numpy(x):
    z = x.astype(np.float64)
    for _ in range(5):
        z = z * 0.5 + x
    return grown_numpy(z)


def _barriers(text):
    """`(barriers in loop bodies, [for each loop: whether a barrier takes its
    results])` of a module text."""
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        loops = ops_where(module, lambda op: op.name == "stablehlo.while")
        barriers = ops_where(module, lambda op: op.name == "stablehlo.optimization_barrier")
        inside = [b for b in barriers if any(b.parent == loop or _within(b, loop)
                                               for loop in loops)]
        fenced = [any(v.owner == loop for b in barriers for v in b.operands) for loop in loops]
    return len(inside), fenced


def _within(op, loop) -> bool:
    parent = op.parent
    while parent is not None and parent.name != "func.func":
        if parent == loop:
            return True
        parent = parent.parent
    return False


def host_stepped(fn, *args):
    """The module text iree-compile gets for `fn` with every loop stepped from the host
    (aggressive fusion first, then the default fusion)."""
    text = prepare([whilst.export(fn, *args)])
    return [source_for(text, flags) for flags in flag_sets(("llvm-cpu",),
                                                           loops_in_dispatch=False)]


def test_loop_bodies_hold_no_barrier():
    """The guard that reads the previous y is an opaque zero made before the loop."""
    texts = host_stepped(grown, X)
    assert len(texts) >= 2 and all(_barriers(text)[0] == 0 for text in texts)


def test_a_loop_that_runs_at_least_once_returns_its_results_without_a_barrier():
    """The counted loop's first test passes whatever x is; the other loop's may fail."""
    _, fenced = _barriers(prepare([whilst.export(counted_then_grown, X)]))
    assert fenced == [False, True]


def test_an_iteration_of_a_loop_with_an_overwritten_carry_is_one_submission():
    costs = loop_costs(host_driven_stream(prepare([whilst.export(grown, X)])))
    assert len(costs) == 1 and costs[0]["submissions"] == 1, costs


@pytest.mark.parametrize("driver", ["local-sync", "local-task"])
@pytest.mark.parametrize("x", [X, np.array([50.0, 0.0, 0.0], np.float32)])
@pytest.mark.parametrize("fn, numpy_fn", [(grown, grown_numpy),
                                          (counted_then_grown, counted_then_grown_numpy)])
def test_results_match_numpy(driver, x, fn, numpy_fn):
    got = whilst.compile(fn, X).load(driver)(x)
    want = numpy_fn(x)
    assert int(got[0]) == want[0]
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-5)


WIDE = np.linspace(0.0, 0.02, 2048, dtype=np.float32)   # rows too large for one-hot selects


def staged(x):
    """Per step, a row of a fresh buffer of zeros written with a value or the row
    itself (`where(p, y, ks[j])`, as diffrax writes its first stage), then summed in."""
    def body(c):
        i, y = c
        j = i % 3
        ks = jnp.zeros((3, y.size), jnp.float32)
        ks = ks.at[j].set(jnp.where(y[-1] > 0.05, y, ks[j]))
        return i + 1, y * 1.25 + jnp.sum(ks, axis=0) * 0.5
    return whilst.lax.while_loop(lambda c: jnp.sum(c[1]) < 400.0, body, (0, x))


def staged_numpy(x):
    i, y = 0, x.astype(np.float64)
    while np.sum(y) < 400.0:
        row = y if y[-1] > 0.05 else np.zeros_like(y)
        i, y = i + 1, y * 1.25 + row * 0.5
    return i, y


def test_a_row_write_that_rereads_its_buffer_is_not_fenced():
    """IREE compiles a scatter that rereads its operand with aggressive fusion once
    it is not flagged `unique_indices` (`iree_limits/rereading_scatter.mlir`), so
    nothing fences it: no host wait in the loop body."""
    text = prepare([whilst.export(staged, WIDE)])
    assert "stablehlo.scatter" in text
    assert FENCE_ATTR not in text
    compiled = whilst.compile(staged, WIDE)
    assert FALLBACK_NOTE not in compiled.stages[-1][0], compiled.stages
    for x in (WIDE, WIDE * 4):
        got, want = compiled.load()(x), staged_numpy(x)
        assert int(got[0]) == want[0]
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def halved_or_grown(x):
    """Per step, the whole state halved if any element passed 1, else grown: a select
    of 2048 elements by a scalar computed on the device."""
    def body(c):
        i, y = c
        return i + 1, lax.select(jnp.any(y > 1.0), y * 0.5, y * 1.5 + 0.01)
    return whilst.lax.while_loop(lambda c: c[0] < 20, body, (0, x))


def halved_or_grown_numpy(x):
    y = x.astype(np.float64)
    for _ in range(20):
        y = y * 0.5 if np.any(y > 1.0) else y * 1.5 + 0.01
    return 20, y


def test_a_loop_body_selects_a_wide_state_by_a_device_scalar_without_reading_it_back():
    """The predicate is broadcast (`broadcast_select_predicates`), so IREE selects on
    the device: the iteration is one submission that reads nothing back."""
    costs = loop_costs(host_driven_stream(prepare([whilst.export(halved_or_grown, WIDE)])))
    assert len(costs) == 1 and costs[0]["readbacks"] == 0, costs
    assert costs[0]["submissions"] == 1, costs
    got = whilst.compile(halved_or_grown, WIDE).load()(WIDE)
    want = halved_or_grown_numpy(WIDE)
    assert int(got[0]) == want[0]
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
