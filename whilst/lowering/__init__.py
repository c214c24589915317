"""Lowering: export to StableHLO, and the preparation and compilation of exported
modules for IREE. (The MLIR lowering rules live beside their primitives in
`whilst.ir`.)"""
from whilst.lowering._export import Exported, export
from whilst.lowering._ir_walk import unroll_factors
from whilst.lowering._iree import (
    TARGETS, CompileError, compile_flags, compile_module, compile_text, compile_to_stream,
    describe_flags, flag_sets, has_aggressive_fusion, has_loops_in_dispatch, loop_costs,
    loop_counts, prepare, source_for, stream_copy_sizes, target_metadata)

__all__ = ["TARGETS", "CompileError", "Exported", "compile_flags", "compile_module",
           "compile_text", "compile_to_stream", "describe_flags", "export", "flag_sets",
           "has_aggressive_fusion", "has_loops_in_dispatch", "loop_costs", "loop_counts",
           "prepare", "source_for", "stream_copy_sizes", "target_metadata", "unroll_factors"]
