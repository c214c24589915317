"""Ops that no compiled module can hold, refused when a function is exported.

Host callbacks (`jax.pure_callback`, `jax.experimental.io_callback`,
`jax.debug.print`/`callback`, and equinox's runtime error checks, `eqx.error_if`,
which diffrax, optimistix and lineax use) call back into Python: `jax.export` cannot
serialise them and IREE has no host to call. JAX's linear algebra on CPU (`lu`,
`triangular_solve`, `cholesky`, `qr`, `eigh`, `svd`, ...) lowers to LAPACK custom
calls, which IREE has no kernels for; `lu`, `triangular_solve`, `cholesky` and QR
(`qr`, `geqrf`, `householder_product`, `ormqr`) are exported in lax ops instead
(`whilst.ir.iree_forms._portable_linalg`), the others refused.
"""
from __future__ import annotations

from jax.extend.core import ClosedJaxpr, Jaxpr

CALLBACKS = {"pure_callback", "io_callback", "debug_callback", "debug_print"}
# What to use instead of a LAPACK call, in both refusals.
PORTABLE_SOLVERS = ("Solve with an LU, Cholesky or QR factorization instead "
                    "(jnp.linalg.solve/cholesky/qr, lineax.LU/Cholesky/QR, exported in "
                    "portable ops), or an iterative solver (lineax.CG, lineax.GMRES).")
LAPACK = {"eig", "eigh", "svd", "geqp3", "hessenberg", "schur", "tridiagonal",
          "tridiagonal_solve"}


# A host callback that only lowering shows (inside a library's own primitive).
HIDDEN_CALLBACK = (
    "export: the function lowers to a host callback (inside a library's own primitive, "
    "such as lineax's `linear_solve`, whose operator and solver JAX traces only when it "
    "lowers them), which jax.export cannot serialise and a compiled module cannot call. "
    "If it is equinox's runtime error checks (eqx.error_if, used by lineax, optimistix "
    "and diffrax), set the environment variable EQX_ON_ERROR=nan before importing "
    "equinox; otherwise remove the jax.pure_callback, io_callback or jax.debug call.")


def refuse_unportable_ops(jaxpr: ClosedJaxpr) -> None:
    """Raise a ValueError naming the first host callback or LAPACK op of `jaxpr`
    (sub-jaxprs included) and what to do instead."""
    for eqn in _equations(jaxpr.jaxpr):
        name = eqn.primitive.name
        if name in CALLBACKS:
            raise ValueError(_callback_message(eqn))
        if name in LAPACK:
            raise ValueError(
                f"export: the function calls `{name}` (JAX's linear algebra, e.g. "
                f"jnp.linalg.eigh/svd/lstsq, a pivoted QR, lineax.SVD), which JAX lowers "
                f"on CPU to a LAPACK custom call that IREE cannot compile. "
                f"{PORTABLE_SOLVERS}")


def refuse_custom_calls(module) -> None:
    """Raise a ValueError naming the first `stablehlo.custom_call` of `module` (a lowered
    function, jaxlib's MLIR) and what to do: some ops become custom calls only when JAX
    lowers the function (a pivoted `qr`, whose rule calls LAPACK's geqp3; a library's
    own primitive, such as lineax's `linear_solve`, whose solver no jaxpr shows), and
    `jax.export` refuses their LAPACK calls."""
    from jax.extend.mlir import ir

    targets = []

    def visit(op):
        if op.operation.name == "stablehlo.custom_call":
            targets.append(ir.StringAttr(op.operation.attributes["call_target_name"]).value)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if targets:
        raise ValueError(
            f"export: the function lowers to a custom call to `{targets[0]}`, which IREE "
            f"cannot compile (a LAPACK call where the name starts with `lapack_`: JAX's "
            f"SVD, eigh or pivoted QR, lineax's SVD). {PORTABLE_SOLVERS}")


def _callback_message(eqn) -> str:
    callback = eqn.params.get("callback")
    where = getattr(getattr(callback, "callback_func", callback), "__module__", "") or ""
    if where.startswith("equinox"):
        return ("export: the function holds equinox's runtime error checks (eqx.error_if, "
                "used by diffrax, optimistix and lineax), which are host callbacks: "
                "jax.export cannot serialise them and a compiled module has no Python to "
                "call. Set the environment variable EQX_ON_ERROR=nan before importing "
                "equinox (a failed check then makes the results NaN), e.g. "
                "`EQX_ON_ERROR=nan python ...` or os.environ['EQX_ON_ERROR'] = 'nan' "
                "first thing in your program.")
    return (f"export: the function calls a host callback (`{eqn.primitive.name}`: "
            f"jax.pure_callback, io_callback, jax.debug.print or jax.debug.callback), "
            f"which jax.export cannot serialise and a compiled module cannot call; "
            f"remove it from the exported function.")


def _equations(jaxpr: Jaxpr):
    """Every equation of `jaxpr` and of the jaxprs in its equations' parameters."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(sub, ClosedJaxpr):
                    yield from _equations(sub.jaxpr)
                elif isinstance(sub, Jaxpr):
                    yield from _equations(sub)
