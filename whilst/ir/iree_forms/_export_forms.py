"""The jaxpr rewrites every exported function and loop body gets: forms that IREE
3.13 compiles and runs with XLA's results (each module says which limitation it
works around)::

    export_forms(jaxpr) == rows_first_carries(symbolic_indexing(in_bounds_indexing(
                               explicit_batch_indices(ieee_math(saturating_casts(
                                   stacked_lines(pushes_as_updates(portable_forms(
                                       library_primitives_in_line(jaxpr))))))))))

Other libraries' primitives that lower as Python functions (equinox's) are
evaluated as those functions first, so that every rewrite sees their ops.
Code with a form for XLA:CPU gets its portable form first (`_xla_cpu_choice.py`),
and row pushes (`_stacks.push_rows`) the `dynamic_update_slice`s they lower to, so
that the other rewrites see them. Batched scatters get explicit batch indices
before out-of-bounds indices are made explicit (so that a gather's clamping
survives the next rewrite), then indexing over symbolic dims, and last the layout
of loop carries (`_rows_first_carries.py`), which rebinds loops whose bodies get
these forms when they are lowered. Each
returns its input object when it changes nothing, and so does `export_forms`.
"""
from __future__ import annotations

from jax.extend.core import ClosedJaxpr

from whilst.ir.iree_forms._batched_scatter import explicit_batch_indices
from whilst.ir.iree_forms._ieee_math import ieee_math
from whilst.ir.iree_forms._index_bounds import in_bounds_indexing
from whilst.ir.iree_forms._library_primitives import library_primitives_in_line
from whilst.ir.iree_forms._rows_first_carries import rows_first_carries
from whilst.ir.iree_forms._saturating_casts import saturating_casts
from whilst.ir.iree_forms._stacked_lines import stacked_lines
from whilst.ir.iree_forms._symbolic_indexing import symbolic_indexing
from whilst.ir._stacks import pushes_as_updates
from whilst.ir._xla_cpu_choice import portable_forms


def export_forms(jaxpr: ClosedJaxpr) -> ClosedJaxpr:
    """`jaxpr` in the forms of the module docstring."""
    return rows_first_carries(symbolic_indexing(in_bounds_indexing(explicit_batch_indices(
        ieee_math(saturating_casts(stacked_lines(pushes_as_updates(portable_forms(
            library_primitives_in_line(jaxpr))))))))))
