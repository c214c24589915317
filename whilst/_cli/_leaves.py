"""Naming the leaves of a function's inputs and outputs from its module signature
(pure Python: used by `whilst run` and `whilst inspect`, which do not import jax)."""
from __future__ import annotations

from whilst.runtime import signature as sig


def leaf_paths(tree: dict, root: str) -> list[str]:
    """Paths such as `args[0]`, `result['h']` of every leaf of `tree`, in order."""
    marks = [object() for _ in range(sig.count_leaves(tree))]
    return [path for path, _ in sig.flatten(tree, sig.unflatten(tree, marks), root)]


def describe_dims(signature: dict) -> list[str]:
    """The symbolic dimension names of a signature's inputs, in order of appearance."""
    names = [d for a in signature["input_avals"] for d in a["shape"] if isinstance(d, str)]
    return list(dict.fromkeys(names))


def describe_call(name: str, signature: dict) -> str:
    """`name(f32[b,4], i32[]) -> f32[]`: the arguments as a call, then the outputs."""
    avals, args = signature["input_avals"], []
    for child in signature["inputs"]["tuple"]:
        n = sig.count_leaves(child)
        args.append(sig.describe_tree(child, avals[:n]))
        avals = avals[n:]
    outputs = sig.describe_tree(signature["outputs"], signature["output_avals"])
    return f"{name}({', '.join(args)}) -> {outputs}"
