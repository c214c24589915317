"""IREE 3.13 (llvm-cpu, default fusion): two forms of a budget gradient past its first
chunk (`whilst/ir/reverse/_budget.py`: the chunk loops push their rows into stacks of
their own, nested in the forward While and in the gradient While) compile but fail on
every call past the first chunk, "INVALID_ARGUMENT; ref is null; while invoking native
function hal.buffer.subspan". Compiled here with the default fusion, whilst's fallback
when aggressive fusion fails (as it did on these modules, `rereading_scatter.mlir`,
before their scatters lost the `unique_indices` flag; it compiles them now):

- `tensor.empty` as the initial stacks of the chunk loops: canonicalize and CSE merge
  them with the equal `tensor.empty` the forward While's stacks start from, outside
  both loops. whilst keeps a zero fill for `whilst.uninitialized` values inside a
  loop body of the type of one outside it (`_leave_uninitialized`,
  `whilst/lowering/_iree.py`).
- an optimization barrier on a one-element gather from a result of a `stablehlo.case`
  (the gradient While's start, restored from the checkpoint slots; without the
  barriers on those gathers the module runs). Only aggressive fusion needs the
  barriers (`fenced_point_gathers`, `whilst/lowering/_iree_fusion.py`), and whilst
  compiles modules without them for the default fusion (`unfenced`), as for
  `fenced_gathers_default_fusion.py`.

The loop: 64 floats, `y <- sin(a y) * 0.9 + 0.1`, 41 steps, `gradient_memory=8192`
(chunks of 24 steps). Prints d loss / d a each way, against jax.grad of the
Python loop:

    with the workarounds       82.846970 (want 82.846962)
    chunk stacks tensor.empty  82.846970
      and other gathers fenced fails: main: the IREE runtime failed ... ref is null ...
    gathers fenced             fails: main: the IREE runtime failed ... ref is null ...

The first form fails only while the module's other one-element gathers are fenced:
since whilst compiles modules without aggressive fusion with no fences (`unfenced`),
the module runs with its chunk stacks from `tensor.empty` too (second line), so on
this module `unfenced` covers both failures; `_leave_uninitialized` keeps the fill.

    python iree_limits/budget_chunk_stacks.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import whilst
import whilst.lowering._iree as iree_prep
import whilst.lowering._iree_fusion as fusion

Y0 = np.random.default_rng(0).uniform(-1, 1, 64).astype(np.float32)
A = np.float32(1.1)
N = 41


def loss(y, a):
    _, y = whilst.while_loop(lambda i, y: i < N,
                             lambda i, y: (i + 1, jnp.sin(a * y) * 0.9 + 0.1),
                             [0, y], maximum_iterations=100, gradient_memory=8192)
    return jnp.sum(y)


def python_loss(y, a):
    for _ in range(N):
        y = jnp.sin(a * y) * 0.9 + 0.1
    return jnp.sum(y)


def all_empty(module):
    """The preparation before the workaround: every `whilst.uninitialized` value,
    inside loop bodies too, becomes `tensor.empty`."""
    from iree.compiler import ir

    for op in iree_prep.ops_where(module, lambda op: "whilst.uninitialized" in op.attributes):
        with ir.InsertionPoint(op), op.location:
            empty = ir.Operation.create("tensor.empty", results=[op.results[0].type])
        op.results[0].replace_all_uses_with(empty.results[0])
        op.erase()


def fenced_but_case(module):
    """`fenced_point_gathers` with no fence on a gather from a `stablehlo.case`'s
    results (issue 41's form, before modules without aggressive fusion lost every
    fence)."""
    from iree.compiler import ir

    for op in iree_prep.ops_where(module, fusion._point_gather):
        if getattr(op.operands[0].owner, "name", None) == "stablehlo.case":
            continue
        value = op.results[0]
        users = [(use.owner, use.operand_number) for use in value.uses]
        with ir.InsertionPoint.after(op), op.location:
            fenced = ir.Operation.create("stablehlo.optimization_barrier",
                                         results=[value.type], operands=[value]).result
        for user, position in users:
            user.operands[position] = fenced


def gradient(*patches):
    """d loss / d a from the module compiled with `patches`, each (module, name, value)."""
    saved = [getattr(owner, name) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        module = whilst.compile(jax.grad(loss, 1), Y0, A, cache=False).load("local-sync")
    finally:
        for (owner, name, _), value in zip(patches, saved):
            setattr(owner, name, value)
    try:
        return f"{float(module(Y0, A)):.6f}"
    except Exception as error:  # the runtime's error, whatever its class
        return f"fails: {str(error).splitlines()[0][:160]}"


KEEP_FENCES = (iree_prep, "unfenced", lambda text: text)
# The module compiled with the default fusion (`flag_sets` without its in-dispatch and
# aggressive sets), whilst's fallback when aggressive fusion fails.
BEFORE = [(iree_prep, "flag_sets", lambda *args, flag_sets=iree_prep.flag_sets, **kwargs:
           flag_sets(*args, **kwargs)[2:])]

if __name__ == "__main__":
    want = float(jax.grad(python_loss, 1)(Y0, A))
    print(f"with the workarounds       {gradient(*BEFORE)} (want {want:.6f})")
    empty = (iree_prep, "_leave_uninitialized", all_empty)
    print(f"chunk stacks tensor.empty  {gradient(*BEFORE, empty)}")
    but_case = (fusion, "fenced_point_gathers", fenced_but_case)
    print(f"  and other gathers fenced "
          f"{gradient(*BEFORE, empty, KEEP_FENCES, but_case)}")
    print(f"gathers fenced             {gradient(*BEFORE, KEEP_FENCES)}")
