"""Lowering: the MLIR rule for the functional While, export to StableHLO, and the
preparation of exported modules for IREE."""
from whilst.lowering import _while_lowering  # noqa: F401  (registers the lowering rules)
