"""IREE 3.13 (llvm-cpu, default fusion): two forms of a budget gradient past its first
chunk (`whilst/ir/reverse/_budget.py`: the chunk loops push their rows into stacks of
their own, nested in the forward While and in the gradient While) compile but fail on
every call past the first chunk, "INVALID_ARGUMENT; ref is null; while invoking native
function hal.buffer.subspan". Compiled here with the default fusion, whilst's fallback
(aggressive fusion compiles such modules only with their slot writes fenced,
`rereading_scatter.mlir`):

- `tensor.empty` as the initial stacks of the chunk loops: canonicalize and CSE merge
  them with the equal `tensor.empty` the forward While's stacks start from, outside
  both loops. whilst keeps a zero fill for `whilst.uninitialized` values inside a
  loop body of the type of one outside it (`_leave_uninitialized`,
  `whilst/lowering/_iree.py`).
- an optimization barrier on a one-element gather from a result of a `stablehlo.case`
  (the gradient While's start, restored from the checkpoint slots). whilst does not
  fence those gathers (`fenced_point_gathers`, `whilst/lowering/_iree_fusion.py`).

The loop: 64 floats, `y <- sin(a y) * 0.9 + 0.1`, 41 steps, `gradient_memory=8192`
(chunks of 24 steps). Prints d loss / d a each way, against jax.grad of the
Python loop:

    with the workarounds       82.846970 (want 82.846962)
    chunk stacks tensor.empty  fails: main: the IREE runtime failed ... ref is null ...
    case results fenced        fails: main: the IREE runtime failed ... ref is null ...

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


def all_fenced(module):
    """The fence before the workaround: every one-element gather, those from a
    `stablehlo.case`'s results too."""
    from iree.compiler import ir

    for op in iree_prep.ops_where(module, fusion._point_gather):
        value = op.results[0]
        users = [(use.owner, use.operand_number) for use in value.uses]
        with ir.InsertionPoint.after(op), op.location:
            fenced = ir.Operation.create("stablehlo.optimization_barrier",
                                         results=[value.type], operands=[value]).result
        for user, position in users:
            user.operands[position] = fenced


def default_fusion(flag_sets=iree_prep.flag_sets):
    """`flag_sets` without the first, aggressive fusion's."""
    return lambda *args, **kwargs: flag_sets(*args, **kwargs)[1:]


def gradient(patch=None):
    """d loss / d a from the module compiled with the default fusion and `patch` =
    (module, name, function)."""
    patches = [(iree_prep, "flag_sets", default_fusion()), *([patch] if patch else [])]
    saved = [getattr(module, name) for module, name, _ in patches]
    for module, name, function in patches:
        setattr(module, name, function)
    try:
        module = whilst.compile(jax.grad(loss, 1), Y0, A, cache=False).load("local-sync")
    finally:
        for (module, name, _), function in zip(patches, saved):
            setattr(module, name, function)
    try:
        return f"{float(module(Y0, A)):.6f}"
    except Exception as error:  # the runtime's error, whatever its class
        return f"fails: {str(error).splitlines()[0][:160]}"


if __name__ == "__main__":
    want = float(jax.grad(python_loss, 1)(Y0, A))
    print(f"with the workarounds       {gradient()} (want {want:.6f})")
    print(f"chunk stacks tensor.empty  "
          f"{gradient((iree_prep, '_leave_uninitialized', all_empty))}")
    print(f"case results fenced        "
          f"{gradient((fusion, 'fenced_point_gathers', all_fenced))}")
