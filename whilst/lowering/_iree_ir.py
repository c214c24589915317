"""`ir`: IREE's MLIR Python bindings (`iree.compiler.ir`), with an empty Python module
registered for each dialect of JAX's exports that IREE's Python package has none for.

The bindings look up a Python module for an op's dialect every time they wrap the op
(`Value.owner`, iterating a block), and retry one they did not find: a search of
`sys.path` each time (`iree_limits/dialect_module_lookup.py`). With one registered they
find it once; the ops still wrap as generic `OpView`s. Import `ir` from here, inside
functions, as IREE's compiler is imported on first use.
"""
from __future__ import annotations

import sys
import types

from iree.compiler import ir
from iree.compiler._mlir_libs import _mlir

# Dialects of JAX's exports that `iree.compiler.dialects` holds no module for.
DIALECTS_WITHOUT_MODULE = ("stablehlo", "chlo", "sdy")

for _namespace in DIALECTS_WITHOUT_MODULE:
    _name = f"{__name__}.{_namespace}"
    sys.modules.setdefault(_name, types.ModuleType(_name))
_mlir.globals.append_dialect_search_prefix(__name__)

__all__ = ["ir"]
