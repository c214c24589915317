"""`whilst ir`: the IR of a function (and its gradient) with its While loops."""
from __future__ import annotations

from whilst._cli._output import check_output, write_output
from whilst._cli._user_fn import run_traced, source_path, targets


def loop_summary(jaxpr) -> list[str]:
    """One line per functional While in `jaxpr`, outermost first."""
    from whilst.ir import UNBOUNDED, iter_loops

    lines = []
    for eqn in iter_loops(jaxpr):
        p = eqn.params
        bound = ("unbounded" if p["static_bound"] in (None, UNBOUNDED)
                 else f"at most {p['static_bound']} iterations")
        acc = f", {p['accumulators']} accumulator stack(s)" if p["accumulators"] else ""
        lines.append(f"{p['role']} While {p['name']!r}: {bound}{acc}")
    return lines


def main(args, out=print) -> None:
    import jax

    from whilst.lowering import export

    if args.graph:
        check_output(args.graph, args.force, "--graph", source_path(args.function),
                     args.function)
    fns, path = targets(args.function, args.arg, args.grad)
    traced = []
    for t in fns:
        closed = run_traced(t, path, "tracing", lambda t=t: jax.make_jaxpr(t.fn)(*t.args))
        traced.append((t, closed))
        out(f"// {t.description}")
        for line in loop_summary(closed.jaxpr) or ["no While loops"]:
            out(f"//   {line}")
        if args.stage == "jaxpr":
            out(str(closed))
        else:
            exp = run_traced(t, path, "exporting", lambda t=t: export(t.fn, *t.args, name=t.name))
            out(f"//   {_count_ops(exp.text, 'stablehlo.while')} stablehlo.while op(s), "
                f"marked with whilst.role / whilst.name")
            out(exp.text)
        out("")
    if args.graph:
        from whilst._cli._graph import render_svg

        svg = render_svg([(t.description, closed.jaxpr) for t, closed in traced])
        write_output(args.graph, svg, args.force, "--graph")
        out(f"// wrote the loop structure to {args.graph}")


def _count_ops(text: str, name: str) -> int:
    """How many `name` ops the module `text` holds (parsed with the MLIR bindings)."""
    from whilst.lowering._iree_ir import ir

    count = 0

    def visit(op):
        nonlocal count
        count += op.operation.name == name
        return ir.WalkResult.ADVANCE

    with ir.Context():
        ir.Module.parse(text).operation.walk(visit)
    return count
