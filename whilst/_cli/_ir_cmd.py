"""`whilst ir`: the IR of a function (and its gradient) with its While loops."""
from __future__ import annotations

import re

from whilst._cli._errors import CLIError
from whilst._cli._user_fn import run_traced, targets


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
            text = exp.text
            n = len(re.findall(r"stablehlo\.while", text))
            out(f"//   {n} stablehlo.while op(s), marked with whilst.role / whilst.name")
            out(text)
        out("")
    if args.graph:
        from whilst._cli._graph import render_svg

        svg = render_svg([(t.description, closed.jaxpr) for t, closed in traced])
        try:
            with open(args.graph, "w") as f:
                f.write(svg)
        except OSError as e:
            raise CLIError(f"cannot write {args.graph!r}: {e.strerror}.") from None
        out(f"// wrote the loop structure to {args.graph}")
