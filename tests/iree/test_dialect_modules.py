"""IREE 3.13's MLIR bindings search `sys.path` for a dialect's Python module every time
they wrap an op of a dialect `iree.compiler.dialects` has none for, `stablehlo` among them
(`iree_limits/dialect_module_lookup.py`): whilst's preparation, which wraps every op,
spent most of its time there. whilst registers an empty module for each such dialect
(`whilst/lowering/_iree_ir.py`)."""
import sys

import numpy as np
import pytest

import whilst
from whilst.lowering import prepare

pytestmark = pytest.mark.iree


class RecordingFinder:
    """A `sys.meta_path` finder that records the modules the import system searches
    for (those not already in `sys.modules`) and finds none itself."""

    def __init__(self):
        self.searched = []

    def find_spec(self, name, path=None, target=None):
        self.searched.append(name)
        return None


def test_preparing_a_module_searches_for_no_dialect_module():
    def f(x):
        return whilst.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, y * 0.5 + 1.0),
                                 [0, x])[1]

    exported = whilst.export(f, np.ones(3, np.float32))
    prepare([exported])  # the first wraps import what exists (func's module, ...)
    finder = RecordingFinder()
    sys.meta_path.insert(0, finder)
    try:
        text = prepare([exported])
    finally:
        sys.meta_path.remove(finder)
    assert text.count("stablehlo.") > 10
    assert not [name for name in finder.searched if ".dialects." in name or
                name.endswith((".stablehlo", ".chlo", ".sdy"))], finder.searched
