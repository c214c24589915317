"""Function signatures stored in a module's IREE reflection metadata, in plain Python
(shared by the compiler, which writes them, and the runtime, which reads them).

A signature is JSON::

    {"name": "main",
     "inputs":  <tree>, "input_avals":  [{"shape": [2, "b"], "dtype": "float32"}, ...],
     "outputs": <tree>, "output_avals": [...],
     "arg_names": ["x", "w"]}

where <tree> describes a pytree: `{"leaf": null}`, `{"none": null}`,
`{"tuple": [...]}`, `{"list": [...]}`, `{"dict": {"keys": [...], "values": [...]}}`
(keys sorted, as JAX flattens them) or
`{"namedtuple": {"name": N, "fields": [...], "values": [...]}}`.
Dimensions are ints, or strings for symbolic dimensions. `inputs` is a tuple with
one entry per positional argument; `arg_names` (optional) names them. An aval may
say that the module takes or returns the leaf as another dtype, `"stored":
"int32"` (a bool leaf of a Vulkan module, `whilst.lowering._iree_narrow_types`);
callers convert to and from it.
"""
from __future__ import annotations

import collections
import json

REFLECTION_KEY = "whilst"
TARGETS_KEY = "whilst_targets"
LEAF = object()


def encode_tree(structure) -> dict:
    """A Python structure with `LEAF` at the leaves -> its JSON tree."""
    if structure is LEAF:
        return {"leaf": None}
    if structure is None:
        return {"none": None}
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return {"namedtuple": {"name": type(structure).__name__,
                               "fields": list(structure._fields),
                               "values": [encode_tree(v) for v in structure]}}
    if isinstance(structure, (tuple, list)):
        return {type(structure).__name__: [encode_tree(v) for v in structure]}
    if isinstance(structure, dict):
        keys = sorted(structure)
        if not all(isinstance(k, (str, int)) for k in keys):
            raise TypeError(f"dict keys must be str or int to be stored in a module "
                            f"signature; found {keys!r}")
        return {"dict": {"keys": keys, "values": [encode_tree(structure[k]) for k in keys]}}
    raise TypeError(f"{type(structure).__name__} is not a pytree node whilst can store in a "
                    f"module signature (tuple, list, dict, namedtuple, None)")


def count_leaves(tree: dict) -> int:
    (kind, body), = tree.items()
    if kind == "leaf":
        return 1
    if kind == "none":
        return 0
    return sum(map(count_leaves, _children(kind, body)))


def _children(kind, body):
    return body["values"] if kind in ("dict", "namedtuple") else body


def flatten(tree: dict, value, path: str) -> list[tuple[str, object]]:
    """`value` (a pytree matching `tree`) -> [(path, leaf), ...], or a ValueError naming the path."""
    (kind, body), = tree.items()
    if kind == "leaf":
        return [(path, value)]
    if kind == "none":
        if value is not None:
            raise ValueError(f"{path}: expected None, found {type(value).__name__}")
        return []
    if kind == "dict":
        if not isinstance(value, dict) or sorted(value) != body["keys"]:
            found = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise ValueError(f"{path}: expected a dict with keys {body['keys']}, found {found}")
        return [item for k, sub in zip(body["keys"], body["values"])
                for item in flatten(sub, value[k], f"{path}[{k!r}]")]
    if kind == "namedtuple":
        if not isinstance(value, tuple) or len(value) != len(body["fields"]):
            raise ValueError(f"{path}: expected a {body['name']} with fields "
                             f"{body['fields']}, found {_describe(value)}")
        return [item for f, sub, v in zip(body["fields"], body["values"], value)
                for item in flatten(sub, v, f"{path}.{f}")]
    if not isinstance(value, (tuple, list)) or len(value) != len(body):
        raise ValueError(f"{path}: expected a {kind} of {len(body)} entries, found "
                         f"{_describe(value)}")
    return [item for k, (sub, v) in enumerate(zip(body, value))
            for item in flatten(sub, v, f"{path}[{k}]")]


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} entries"
    return type(value).__name__


def unflatten(tree: dict, leaves):
    """Rebuild the pytree described by `tree` from an iterator of leaves."""
    leaves = iter(leaves)
    out = _unflatten(tree, leaves)
    assert next(leaves, None) is None
    return out


def _unflatten(tree, leaves):
    (kind, body), = tree.items()
    if kind == "leaf":
        return next(leaves)
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _unflatten(v, leaves) for k, v in zip(body["keys"], body["values"])}
    if kind == "namedtuple":
        cls = _namedtuple_class(body["name"], tuple(body["fields"]))
        return cls(*[_unflatten(v, leaves) for v in body["values"]])
    children = [_unflatten(v, leaves) for v in body]
    return tuple(children) if kind == "tuple" else children


_NAMEDTUPLES: dict = {}


def _namedtuple_class(name, fields):
    key = (name, fields)
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def describe_tree(tree: dict, avals: list[dict]) -> str:
    """A one-line rendering such as `(x: f32[8,4], {'a': i32[]})`."""
    it = iter(avals)

    def render(t):
        (kind, body), = t.items()
        if kind == "leaf":
            return format_aval(next(it))
        if kind == "none":
            return "None"
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {render(v)}"
                                   for k, v in zip(body["keys"], body["values"])) + "}"
        if kind == "namedtuple":
            return body["name"] + "(" + ", ".join(
                f"{f}={render(v)}" for f, v in zip(body["fields"], body["values"])) + ")"
        inner = ", ".join(render(v) for v in body)
        return f"({inner}{',' if len(body) == 1 else ''})" if kind == "tuple" else f"[{inner}]"

    return render(tree)


DTYPE_NAMES = {
    "bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "c64": "complex64", "c128": "complex128",
}
"""Short dtype names (as in `f32[8,4]`) -> numpy dtype names."""
_SHORT = {v: k for k, v in DTYPE_NAMES.items()}


def stored_dtype(aval: dict) -> str:
    """The dtype name the module passes an aval's leaf as (its own, unless `stored`)."""
    return aval.get("stored", aval["dtype"])


def format_aval(aval: dict) -> str:
    dims = ",".join(str(d) for d in aval["shape"])
    return f"{_SHORT.get(aval['dtype'], aval['dtype'])}[{dims}]"


def dumps(signature: dict) -> str:
    return json.dumps(signature, separators=(",", ":"), sort_keys=True)


def loads(text: str):
    return json.loads(text)


def validate(signature) -> dict:
    """`signature` if it is a well-formed signature (see the module doc), else a
    ValueError saying what is wrong, so damaged metadata never reaches the loader."""
    _expect(isinstance(signature, dict), "a signature is a JSON object", signature)
    for key in ("name", "inputs", "input_avals", "outputs", "output_avals"):
        _expect(key in signature, f"the signature has no {key!r}", signature)
    _expect(isinstance(signature["name"], str), "'name' is a string", signature["name"])
    for tree, avals in (("inputs", "input_avals"), ("outputs", "output_avals")):
        _validate_tree(signature[tree])
        _expect(isinstance(signature[avals], list) and
                len(signature[avals]) == count_leaves(signature[tree]),
                f"{avals!r} has one entry per leaf of {tree!r}", signature[avals])
        for aval in signature[avals]:
            _validate_aval(aval)
    _expect("tuple" in signature["inputs"], "'inputs' is a tuple", signature["inputs"])
    names = signature.get("arg_names")
    if names is not None:
        _expect(isinstance(names, list) and len(names) == len(signature["inputs"]["tuple"])
                and all(isinstance(n, str) and n.isidentifier() for n in names),
                "'arg_names' has one identifier per argument", names)
    return signature


def _expect(ok: bool, what: str, found) -> None:
    if not ok:
        raise ValueError(f"malformed signature: expected {what}; found {str(found)[:80]}")


def _validate_tree(tree) -> None:
    _expect(isinstance(tree, dict) and len(tree) == 1, "a tree node {kind: body}", tree)
    (kind, body), = tree.items()
    if kind in ("leaf", "none"):
        _expect(body is None, f"{kind!r} has no body", body)
        return
    if kind in ("tuple", "list"):
        _expect(isinstance(body, list), f"{kind!r} holds a list", body)
        children = body
    elif kind == "dict":
        _expect(isinstance(body, dict) and isinstance(body.get("keys"), list)
                and isinstance(body.get("values"), list)
                and len(body["keys"]) == len(body["values"])
                and all(isinstance(k, (str, int)) for k in body["keys"]),
                "'dict' holds keys and values", body)
        children = body["values"]
    elif kind == "namedtuple":
        _expect(isinstance(body, dict) and isinstance(body.get("name"), str)
                and body["name"].isidentifier() and isinstance(body.get("fields"), list)
                and all(isinstance(f, str) and f.isidentifier() for f in body["fields"])
                and isinstance(body.get("values"), list)
                and len(body["fields"]) == len(body["values"]),
                "'namedtuple' holds a name, fields and values", body)
        children = body["values"]
    else:
        _expect(False, "a node kind among leaf, none, tuple, list, dict, namedtuple", kind)
    for child in children:
        _validate_tree(child)


def _validate_aval(aval) -> None:
    _expect(isinstance(aval, dict) and isinstance(aval.get("shape"), list)
            and isinstance(aval.get("dtype"), str) and aval["dtype"].isidentifier(),
            "an aval {shape, dtype} with a dtype name", aval)
    stored = aval.get("stored", aval["dtype"])
    _expect(isinstance(stored, str) and stored.isidentifier(), "a dtype name as 'stored'", stored)
    for d in aval["shape"]:
        _expect((isinstance(d, int) and not isinstance(d, bool) and d >= 0)
                or (isinstance(d, str) and d != ""), "dimensions that are ints >= 0 or names", d)
