"""Looking at the IR: `trace` (the jaxpr with its functional Whiles) and
`residual_report` (what reverse mode stores per iteration)."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, Jaxpr

from whilst.ir._functional_while import functional_while_p
from whilst.ir._tracing import jaxprs_in_params
from whilst.ir._xla_cpu_choice import xla_cpu_forms
from whilst.ir.reverse._policy import ChunkedLoop


def trace(fn, *args, **kwargs) -> ClosedJaxpr:
    """The IR of `fn(*args, **kwargs)`: a jaxpr whose loops are `functional_while`
    equations (cond and body as sub-jaxprs, output 0 the iteration counter).
    Trace `jax.grad(fn)` to see the forward While with accumulators and the
    gradient While."""
    return jax.make_jaxpr(fn)(*args, **kwargs)


def iter_loops(jaxpr: Jaxpr):
    """Every `functional_while` equation in `jaxpr` and its sub-jaxprs, outermost first."""
    for eqn in jaxpr.eqns:
        if eqn.primitive is functional_while_p:
            yield eqn
        for sub in jaxprs_in_params(eqn.params):
            yield from iter_loops(sub)


def holds_loops(jaxpr: Jaxpr) -> bool:
    """Whether `jaxpr` or one of its sub-jaxprs holds a `functional_while`."""
    return any(True for _ in iter_loops(jaxpr))


@dataclasses.dataclass(frozen=True)
class LoopResiduals:
    """The residual stacks one forward While pushes for its gradient While."""
    name: str
    role: str
    max_iterations: int
    stack_shapes: tuple[tuple[tuple[int, ...], str], ...]

    @property
    def bytes_per_iteration(self) -> int:
        return sum(int(np.prod(shape[1:], dtype=np.int64)) * np.dtype(dtype).itemsize
                   for shape, dtype in self.stack_shapes)

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_iteration * self.max_iterations


@dataclasses.dataclass(frozen=True)
class ResidualReport:
    """One `LoopResiduals` per loop with accumulators, outermost first."""
    loops: tuple[LoopResiduals, ...]

    @property
    def bytes_per_iteration(self) -> int:
        return sum(loop.bytes_per_iteration for loop in self.loops)

    @property
    def total_bytes(self) -> int:
        return sum(loop.total_bytes for loop in self.loops)

    def __str__(self) -> str:
        lines = [f"{'loop':<20} {'role':<9} {'stacks':>6} {'bytes/iter':>11} {'max iter':>9} "
                 f"{'total bytes':>12}"]
        for loop in self.loops:
            lines.append(f"{loop.name:<20} {loop.role:<9} {len(loop.stack_shapes):>6} "
                         f"{loop.bytes_per_iteration:>11} {loop.max_iterations:>9} "
                         f"{loop.total_bytes:>12}")
        return "\n".join(lines)


def residual_report(fn, *args, argnums=0) -> ResidualReport:
    """What reverse mode through `fn` stores per loop iteration.

    Traces `jax.grad(fn, argnums)(*args)` (`fn` returns a scalar) and lists,
    for each forward While with accumulators, and each loop that runs in
    chunks past its `gradient_memory` (`max_iterations`: a chunk's steps), its
    residual stacks: shapes, bytes per iteration and bytes in all (small
    residuals of one dtype share a stack, see `whilst.ir.reverse._packing`). Loop
    invariants (values computed from closed-over arrays only) are hoisted and do
    not appear here, nor do loops whose steps reverse mode inlines (a few steps known
    at trace time, `reverse/_inlined.py`): their residuals are straight-line values.
    The loops are those of XLA:CPU's forms (`xla_cpu_forms`), which store the rows
    exports do.
    """
    closed = xla_cpu_forms(jax.make_jaxpr(jax.grad(fn, argnums=argnums))(*args))
    loops, chunked, chunk_loops = [], [], set()
    for eqn in iter_loops(closed.jaxpr):
        policy, n_acc = eqn.params["gradient"], eqn.params["accumulators"]
        if isinstance(policy, ChunkedLoop):   # a chunk's stacks, carried
            chunked.append(LoopResiduals(
                name=eqn.params["name"], role="forward", max_iterations=policy.chunk_steps,
                stack_shapes=policy.chunk_stacks))
        if isinstance(policy, ChunkedLoop) or eqn.params["role"] == "gradient":
            # their loops that push a chunk's rows (forwards, and recomputed)
            chunk_loops.update(map(id, iter_loops(eqn.params["body_jaxpr"].jaxpr)))
        if n_acc == 0 or id(eqn) in chunk_loops:
            continue
        stacks = [v.aval for v in eqn.outvars[-n_acc:]]
        loops.append(LoopResiduals(
            name=eqn.params["name"], role=eqn.params["role"],
            max_iterations=eqn.params["static_bound"],
            stack_shapes=tuple((tuple(a.shape), np.dtype(a.dtype).name) for a in stacks)))
    return ResidualReport(tuple(loops + chunked))
