"""IREE 3.13's cuda codegen runs a scatter whose indices are not flagged unique in one
thread, element after element, even where it writes at one index: a loop's write of
a row into the buffer it carries (`rows.at[i % 3].set(x)`, updated in place), of
4096 x 20 x 2 floats as the checkpoint copies of the batched ODE fit's carry in
`bench/gpu_check.py`'s batch of 4096, is one thread's 163840 stores. Flagged
`unique_indices(true)`, which a single index is, IREE tiles it over threads.

    python iree_limits/gpu_serial_scatter.py     # no GPU needed

prints the pipeline and workgroup size IREE configures for the scatter's cuda
dispatch, unflagged (as JAX exports it) and flagged (what whilst's
`whilst/lowering/_iree_gpu_scatters.py` does at the executable-sources phase). Where
the unflagged scatter is spread over threads too, IREE fixed it: delete that module
and this file.
"""
from __future__ import annotations

SHAPE = (3, 4096, 20, 2)
GPU_ARCH = {"cuda": "sm_80"}


def write_rows(rows, x, n):
    """n steps of x = sin(x), step i writing x into rows[i % len(rows)] in place."""
    import jax.numpy as jnp

    import whilst

    def body(i, carry):
        rows, x = carry
        x = jnp.sin(x)
        return rows.at[i % rows.shape[0]].set(x), x
    return whilst.lax.fori_loop(0, n, body, (rows, x))[0]


def scatter_configurations(flagged: bool) -> list[tuple[str, str]]:
    """`(pipeline, workgroup size)` of each cuda dispatch that scatters, as IREE
    configures the loop's row writes with the scatter flagged unique or not."""
    import numpy as np

    import whilst
    from whilst.lowering import prepare
    from whilst.lowering._ir_walk import ops_where
    from whilst.lowering._iree import SOURCES_PHASE, _iree_compile, compile_flags
    from whilst.lowering._iree_gpu_scatters import one_index_scatters_unique
    from whilst.lowering._iree_ir import ir

    args = (np.zeros(SHAPE, np.float32), np.ones(SHAPE[1:], np.float32), np.int32(5))
    text = prepare([whilst.export(write_rows, *args, targets=("cuda",))])
    flags = compile_flags(("cuda",), gpu_arch=GPU_ARCH, aggressive_fusion=True)
    sources = _iree_compile(text, [*flags, f"--compile-to={SOURCES_PHASE}"])
    with ir.Context():
        module = ir.Module.parse(sources)
        if flagged:
            one_index_scatters_unique(module)
        sources = module.operation.get_asm(enable_debug_info=False)
    configured = _iree_compile(sources, [*flags, f"--compile-from={SOURCES_PHASE}",
                                         "--compile-to=executable-configurations"])
    found = []
    with ir.Context():
        module = ir.Module.parse(configured)
        for f in ops_where(module, lambda op: op.name == "func.func"
                           and "translation_info" in op.attributes):
            if ops_where(f, lambda op: op.name == "iree_linalg_ext.scatter"):
                info = str(f.attributes["translation_info"])
                pipeline = info.split("pipeline<")[1].split(">")[0]
                size = info.split("workgroup_size = ")[1].split("]")[0] + "]"
                found.append((pipeline, size))
    return found


if __name__ == "__main__":
    for flagged in (False, True):
        for pipeline, size in scatter_configurations(flagged):
            print(f"scatter {'flagged unique' if flagged else 'as exported'}: {pipeline} "
                  f"pipeline, workgroup size {size}")
