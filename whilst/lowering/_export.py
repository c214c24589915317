"""`whilst.export`: a user function as a StableHLO module with its pytree signature."""
from __future__ import annotations

import dataclasses
import inspect

import jax
import numpy as np
from jax.experimental import checkify
from jax.extend.core import jaxpr_as_fun

from whilst._jax_compat import threefry_rounds_unrolled
from whilst.ir.iree_forms._export_forms import export_forms
from whilst.ir.iree_forms._unportable_ops import (
    HIDDEN_CALLBACK, refuse_custom_calls, refuse_unportable_ops)
from whilst.ir._gpu_export import exporting_for_gpu
from whilst.ir.iree_forms._portable_linalg import portable_linear_algebra
from whilst.runtime.signature import LEAF, encode_tree


@dataclasses.dataclass(frozen=True)
class Exported:
    """A function exported to StableHLO.

    Attributes:
      name: the function's name in compiled modules.
      serialized: the versioned, portable StableHLO artifact (VHLO bytecode).
      text: the same module as readable StableHLO text.
      signature: JSON-able input/output pytree structure, shapes and dtypes
        (see `whilst.runtime.signature`).
      exported: the underlying `jax.export.Exported`.
    """
    name: str
    serialized: bytes
    text: str
    signature: dict
    exported: jax.export.Exported

    def __str__(self) -> str:
        return self.text


def _aval_json(aval) -> dict:
    return {"shape": [d if isinstance(d, int) else str(d) for d in aval.shape],
            "dtype": np.dtype(aval.dtype).name}


def _tree_json(treedef) -> dict:
    return encode_tree(jax.tree_util.tree_unflatten(treedef, [LEAF] * treedef.num_leaves))


def export(fn, *example_args, name: str = "main", targets=()) -> Exported:
    """Export `fn(*example_args)` to StableHLO, keeping unused arguments.

    Args:
      fn: a function of pytrees of arrays (it may call `whilst.while_loop`).
      example_args: arrays or `jax.ShapeDtypeStruct`s (symbolic dims allowed,
        see `jax.export.symbolic_shape`) giving the input shapes and dtypes.
      name: the function's name in compiled modules.
      targets: the compile targets the module is for; with a GPU target among
        them, loops are shaped for a GPU
        (`whilst.ir._gpu_export`: more steps per emitted iteration).

    Returns:
      An `Exported` with the VHLO artifact, the text and the signature (which
      records the argument names of `fn`'s Python signature, when it has them).

    Raises:
      ValueError: `name` is not a Python identifier (it names files and symbols), or
        `fn` holds a host callback (equinox's error checks: set EQX_ON_ERROR=nan),
        LAPACK linear algebra or another custom call, which no compiled module can
        run (`whilst.ir.iree_forms._unportable_ops`).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"export: name must be a Python identifier (it becomes a symbol "
                         f"and file names); found {name!r}. Pass e.g. name='loss'.")
    specs = jax.tree_util.tree_map(
        lambda x: x if isinstance(x, jax.ShapeDtypeStruct)
        else jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x)), example_args)
    exported_fn = _in_iree_forms(fn, specs)
    gpu = any(t != "llvm-cpu" for t in targets)
    with exporting_for_gpu(gpu), threefry_rounds_unrolled(), portable_linear_algebra():
        # A new function each time: JAX must not reuse a lowering of the other form.
        jitted = jax.jit(lambda *args: exported_fn(*args), keep_unused=True)
        try:
            exp = jax.export.export(jitted)(*specs)
        except ValueError:      # custom calls no jaxpr showed, or JAX's own refusals
            refuse_custom_calls(jitted.lower(*specs).compiler_ir("stablehlo"))
            raise
        except NotImplementedError as error:    # host callbacks no jaxpr showed
            if "host_callbacks" not in str(error):
                raise
            raise ValueError(HIDDEN_CALLBACK) from None
    args_tree = jax.tree_util.tree_structure(tuple(specs))
    _refuse_errors(exp.out_tree)
    signature = {
        "name": name,
        "inputs": _tree_json(args_tree),
        "input_avals": [_aval_json(a) for a in exp.in_avals],
        "outputs": _tree_json(exp.out_tree),
        "output_avals": [_aval_json(a) for a in exp.out_avals],
    }
    names = _arg_names(fn, len(example_args))
    if names is not None:
        signature["arg_names"] = names
    return Exported(name=name, serialized=bytes(exp.mlir_module_serialized),
                    text=exp.mlir_module(), signature=signature, exported=exp)


def _in_iree_forms(fn, specs):
    """`fn`, or where its ops outside whilst loops need them (loop bodies get theirs
    when lowered, `whilst.ir._while_lowering`), an equivalent function in the forms
    IREE compiles and runs as XLA does (`whilst.ir.iree_forms._export_forms`)."""
    closed, out_shapes = jax.make_jaxpr(fn, return_shape=True)(*specs)
    refuse_unportable_ops(closed)
    rewritten = export_forms(closed)
    if rewritten is closed:
        return fn
    out_tree = jax.tree_util.tree_structure(out_shapes)

    def in_iree_forms(*args):
        return jax.tree_util.tree_unflatten(
            out_tree, jaxpr_as_fun(rewritten)(*jax.tree_util.tree_leaves(args)))
    return in_iree_forms


def _refuse_errors(out_tree):
    """A TypeError where `fn` returns a `checkify.Error` (no module signature holds one)."""
    is_error = lambda x: isinstance(x, checkify.Error)  # noqa: E731
    outputs = jax.tree_util.tree_unflatten(out_tree, [LEAF] * out_tree.num_leaves)
    paths = [jax.tree_util.keystr(p) for p, x in jax.tree_util.tree_flatten_with_path(
        outputs, is_leaf=is_error)[0] if is_error(x)]
    if paths:
        raise TypeError(
            f"export: the output at {paths[0]} is a checkify.Error, which a module signature "
            f"cannot hold (it holds tuples, lists, dicts, namedtuples and None of arrays). "
            f"Return its arrays, `leaves, tree = jax.tree.flatten(err)`, keep the `tree` of "
            f"the last trace, and after running the module rebuild the error: "
            f"jax.tree.unflatten(tree, leaves) (README, Run-time errors).")


def _arg_names(fn, nargs: int) -> list[str] | None:
    """The names of `fn`'s first `nargs` positional parameters, or None when its
    signature does not name them all (`*args`, builtins, C functions)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p.name for p in params
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return positional[:nargs] if len(positional) >= nargs else None
