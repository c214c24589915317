"""Argument specs such as `f32[8,4]`, `i32[]`, `f64` or `f32[b,4]` (pure Python).

A spec is a dtype and an optional bracketed shape; without brackets it is a
scalar. A dimension is a non-negative int or a symbolic name (or expression
such as `2*b`); symbolic names are shared by all arguments of one command, so
`--arg 'f32[b,4]' --arg 'i32[b]'` gives both arguments the same batch size.
"""
from __future__ import annotations

import dataclasses
import re

from whilst._cli._errors import CLIError
from whilst.runtime.signature import DTYPE_NAMES as DTYPES
WIDE = {"int64", "uint64", "float64", "complex128"}
_SPEC = re.compile(r"^\s*(?P<dtype>[A-Za-z0-9_]+)\s*(?:\[(?P<dims>[^\]]*)\])?\s*$")
_DIM = re.compile(r"^(?:\d+|[A-Za-z0-9_+*\s]*[A-Za-z_][A-Za-z0-9_+*\s]*)$")


@dataclasses.dataclass(frozen=True)
class ArgSpec:
    """One argument: numpy dtype name and dims (ints, or strings for symbolic dims)."""
    text: str
    dtype: str
    dims: tuple

    @property
    def symbolic(self) -> bool:
        return any(isinstance(d, str) for d in self.dims)


def parse_spec(text: str, which: str = "--arg") -> ArgSpec:
    """Parse one spec; a CLIError names it and shows the accepted forms otherwise."""
    how = ("write DTYPE[DIMS], e.g. 'f32[8,4]', 'i32[]' (a scalar), 'f64' or 'f32[b,4]' "
           f"(b symbolic); dtypes: {', '.join(DTYPES)}")
    m = _SPEC.match(text)
    if not m:
        raise CLIError(f"{which} {text!r} is not an argument spec; {how}.")
    dtype = DTYPES.get(m["dtype"], m["dtype"] if m["dtype"] in DTYPES.values() else None)
    if dtype is None:
        raise CLIError(f"{which} {text!r}: unknown dtype {m['dtype']!r}; {how}.")
    dims = []
    body = (m["dims"] or "").strip()
    for d in (body.split(",") if body else []):
        d = d.strip()
        if not _DIM.match(d):
            raise CLIError(f"{which} {text!r}: dimension {d!r} is neither a non-negative "
                           f"int nor a symbolic name; {how}.")
        dims.append(int(d) if d.isdigit() else d)
    return ArgSpec(text, dtype, tuple(dims))


def to_shape_dtype_structs(specs):
    """`jax.ShapeDtypeStruct`s for `specs`, symbolic names in one scope for all."""
    import jax

    if any(s.dtype in WIDE for s in specs):
        jax.config.update("jax_enable_x64", True)
    scope = jax.export.SymbolicScope() if any(s.symbolic for s in specs) else None
    out = []
    for s in specs:
        if s.symbolic:
            try:
                shape = jax.export.symbolic_shape(",".join(map(str, s.dims)), scope=scope)
            except Exception as e:
                raise CLIError(f"--arg {s.text!r}: invalid symbolic shape: {e}") from None
        else:
            shape = s.dims
        out.append(jax.ShapeDtypeStruct(shape, s.dtype))
    return out
