"""Naming the leaves of a function's inputs and outputs from its module signature
(pure Python: used by `whilst run` and `whilst inspect`, which do not import jax)."""
from __future__ import annotations

from whilst.runtime import signature as sig


def leaf_paths(tree: dict, root: str) -> list[str]:
    """Paths such as `args[0]`, `result['h']` of every leaf of `tree`, in order."""
    marks = [object() for _ in range(sig.count_leaves(tree))]
    return [path for path, _ in sig.flatten(tree, sig.unflatten(tree, marks), root)]


def input_paths(signature: dict) -> list[str]:
    """Paths of the input leaves rooted at the argument names (`x`, `state['h']`) when
    the module records them, else at `args` (`args[0]`, `args[1]['h']`)."""
    names = signature.get("arg_names")
    if names is None:
        return leaf_paths(signature["inputs"], "args")
    return [path for child, name in zip(signature["inputs"]["tuple"], names)
            for path in leaf_paths(child, name)]


def file_name(path: str) -> str:
    """A leaf path as a file name stem: `state['h']` -> `state_h`, `args[0]` -> `args_0`."""
    return "_".join(part for part in "".join(c if c.isalnum() else " " for c in path).split())


def describe_dims(signature: dict) -> list[str]:
    """The symbolic dimension names of a signature's inputs, in order of appearance."""
    names = [d for a in signature["input_avals"] for d in a["shape"] if isinstance(d, str)]
    return list(dict.fromkeys(names))


def describe_call(name: str, signature: dict) -> str:
    """`name(x: f32[b,4], n: i32[]) -> f32[]`: the arguments (named when the module
    records their names) as a call, then the outputs."""
    avals, args = signature["input_avals"], []
    names = signature.get("arg_names") or [None] * len(signature["inputs"]["tuple"])
    for child, arg in zip(signature["inputs"]["tuple"], names):
        n = sig.count_leaves(child)
        args.append((f"{arg}: " if arg else "") + sig.describe_tree(child, avals[:n]))
        avals = avals[n:]
    outputs = sig.describe_tree(signature["outputs"], signature["output_avals"])
    return f"{name}({', '.join(args)}) -> {outputs}"
