"""`whilst ir --graph`: the loop structure of traced functions as an SVG picture.

Drawn in the manner of the figures of TensorFlow's functional-while design:
one panel per functional While (its role, name and iteration bound) holding
its cond and body, the loop-carried values, the accumulator stacks a forward
While pushes and the closed-over values; arrows carry values from one While
to the next (a forward While's stacks and trip count into its gradient While).
Pure Python: no graphviz.
"""
from __future__ import annotations

import dataclasses
import html
import textwrap

from jax.extend.core import Literal

from whilst.ir import UNBOUNDED, functional_while_p
from whilst.ir._tracing import jaxprs_in_params

WIDTH = 860
MARGIN = 20
LINE = 18
CHAR = 7.8  # average advance of the 13px monospace font
COLORS = {"forward": ("#dbe9f7", "#2c6aa8"), "gradient": ("#fbe3cf", "#b85c12"),
          "linear": ("#e6e6e6", "#555555")}


def _aval(v) -> str:
    aval = v.aval if hasattr(v, "aval") else v
    short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
             "int32": "i32", "int64": "i64", "bool": "bool"}
    name = str(aval.dtype)
    return f"{short.get(name, name)}[{','.join(map(str, aval.shape))}]"


def _ops(jaxpr) -> str:
    names = sorted({e.primitive.name for e in jaxpr.eqns})
    return ", ".join(names) if names else "(no operations)"


@dataclasses.dataclass
class _Loop:
    eqn: object
    parent: str | None   # name of the loop whose body holds this one
    index: int           # position in the containing jaxpr's loops (for edges)
    scope: int           # id of the containing jaxpr


def _loops(jaxpr, parent=None):
    """Every functional While under `jaxpr`, outermost first, with its parent."""
    found = [e for e in jaxpr.eqns if e.primitive is functional_while_p]
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive is functional_while_p:
            out.append(_Loop(eqn, parent, found.index(eqn), id(jaxpr)))
            for sub in (eqn.params["cond_jaxpr"].jaxpr, eqn.params["body_jaxpr"].jaxpr):
                out.extend(_loops(sub, eqn.params["name"]))
        else:
            for sub in jaxprs_in_params(eqn.params):
                out.extend(_loops(sub, parent))
    return out


def _edges(jaxpr) -> dict[tuple[int, int], list[str]]:
    """(i, j) -> labels of the outputs of loop i that loop j reads, directly or
    through other operations, in `jaxpr` (one label per output)."""
    sources: dict = {}  # var -> {(loop index, output label)}
    loops = [e for e in jaxpr.eqns if e.primitive is functional_while_p]
    edges: dict = {}
    for eqn in jaxpr.eqns:
        ins = [v for v in eqn.invars if not isinstance(v, Literal)]
        if eqn.primitive is functional_while_p:
            j = loops.index(eqn)
            for v in ins:
                for i, label in sources.get(v, ()):
                    edges.setdefault((i, j), {})[label] = None
            n_out, acc = len(eqn.outvars), eqn.params["accumulators"]
            for k, v in enumerate(eqn.outvars):
                kind = "trip count" if k == 0 else "stack" if k >= n_out - acc else "carry"
                sources[v] = {(j, (k, f"{_aval(v)} {kind}"))}
        else:
            derived = set().union(*(sources.get(v, set()) for v in ins)) if ins else set()
            for v in eqn.outvars:
                if derived:
                    sources[v] = derived
    return {key: [label for _, label in sorted(labels)] for key, labels in edges.items()}


def _stack_vars(jaxpr) -> set:
    """The accumulator-stack outputs of every forward While under `jaxpr`."""
    out = set()
    for sub in _scope_jaxprs(jaxpr).values():
        for eqn in sub.eqns:
            if eqn.primitive is functional_while_p and eqn.params["accumulators"]:
                out.update(eqn.outvars[-eqn.params["accumulators"]:])
    return out


class _Canvas:
    def __init__(self):
        self.parts: list[str] = []

    def rect(self, x, y, w, h, fill, stroke, rx=6, width=1.5):
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                          f'rx="{rx}" fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>')

    def text(self, x, y, s, size=13, weight="normal", color="#222", anchor="start"):
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
                          f'font-weight="{weight}" fill="{color}" text-anchor="{anchor}">'
                          f'{html.escape(s, quote=False)}</text>')

    def arrow(self, x, y1, y2):
        self.parts.append(f'<line x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y2:.1f}" '
                          f'stroke="#444" stroke-width="2" marker-end="url(#head)"/>')


def _wrap(s: str, width_px: float) -> list[str]:
    return textwrap.wrap(s, max(10, int(width_px / CHAR))) or [""]


def _box(c: _Canvas, x, y, w, title, lines, fill, stroke) -> float:
    """A titled box of wrapped lines; returns its height."""
    body = [w_ for line in lines for w_ in _wrap(line, w - 20)]
    h = 12 + LINE * (1 + len(body)) + 4
    c.rect(x, y, w, h, fill, stroke)
    c.text(x + 10, y + 20, title, weight="bold", color=stroke)
    for k, line in enumerate(body):
        c.text(x + 10, y + 20 + LINE * (k + 1), line)
    return h


def _stacks(c: _Canvas, x, y, avals, stroke) -> float:
    """Accumulator stacks as piles of offset sheets; returns the height used."""
    for k, label in enumerate(avals):
        sx = x + k * 170
        for d in (8, 4, 0):
            c.rect(sx + d, y + 8 - d, 140, 30, "#fff8e6", stroke, rx=2, width=1.2)
        c.text(sx + 70, y + 28, label, anchor="middle")
    return 50 if avals else 0


def _panel(c: _Canvas, loop: _Loop, y: float, stacks: set) -> float:
    """Draw one While; returns its height."""
    p = loop.eqn.params
    fill, stroke = COLORS.get(p["role"], COLORS["linear"])
    x, w = MARGIN + 20, WIDTH - 2 * MARGIN - 40
    top, mark = y, len(c.parts)
    y += 10
    bound = ("unbounded" if p["static_bound"] in (None, UNBOUNDED)
             else f"at most {p['static_bound']} iterations")
    c.text(x + 12, y + 18, f"While  ·  {p['role']}  ·  '{p['name']}'  ·  {bound}",
           size=15, weight="bold", color=stroke)
    y += 26
    if loop.parent:
        c.text(x + 12, y + 12, f"nested in the body of '{loop.parent}'", color=stroke)
        y += LINE
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    n_acc = p["accumulators"]
    carries = body.out_avals[:len(body.out_avals) - n_acc]
    consts = loop.eqn.invars[:p["cond_nconsts"] + p["body_nconsts"]]
    popped = [v for v in consts if not isinstance(v, Literal) and v in stacks]
    consts = [v for v in consts if isinstance(v, Literal) or v not in stacks]
    half = (w - 36) / 2
    h1 = _box(c, x + 12, y + 6, half, "cond",
              ["i < bound  AND  cond(i, carries)", f"ops: {_ops(cond.jaxpr)}",
               f"{len(cond.jaxpr.eqns)} equation(s)"], "#ffffff", stroke)
    h2 = _box(c, x + 24 + half, y + 6, half, "body",
              [f"(i, carries) -> (i + 1, carries{', stacks' if n_acc else ''})",
               f"ops: {_ops(body.jaxpr)}", f"{len(body.jaxpr.eqns)} equation(s)"],
              "#ffffff", stroke)
    y += 6 + max(h1, h2) + 8
    lines = [f"loop-carried: i32[] counter (output 0), "
             f"{', '.join(_aval(a) for a in carries) or 'nothing else'}"]
    if consts:
        lines.append(f"closed over (read every step, never carried): "
                     f"{', '.join(_aval(v) for v in consts)}")
    h3 = _box(c, x + 12, y, w - 24, "values", lines, "#ffffff", stroke)
    y += h3 + 8
    if n_acc:
        c.text(x + 12, y + 14, f"accumulator stacks: {n_acc}, one row pushed per iteration "
               f"(read back by the gradient While)", weight="bold", color=stroke)
        y += LINE + 2
        y += _stacks(c, x + 12, y, [_aval(a) for a in body.out_avals[-n_acc:]], stroke)
    if popped:
        c.text(x + 12, y + 14, f"reads {len(popped)} stack(s) of a forward While, one row per "
               f"iteration, last row first", weight="bold", color=stroke)
        y += LINE + 2
        y += _stacks(c, x + 12, y, [_aval(v) for v in popped], stroke)
    h = y - top + 6
    c.rect(x, top, w, h, fill, stroke, rx=10, width=2)
    c.parts.insert(mark, c.parts.pop())  # the panel's background goes behind its contents
    return h


def render_svg(functions) -> str:
    """SVG of the While loops of each `(title, jaxpr)` in `functions`."""
    c = _Canvas()
    y = MARGIN
    for title, jaxpr in functions:
        c.text(MARGIN, y + 16, title, size=16, weight="bold")
        y += 30
        loops = _loops(jaxpr)
        if not loops:
            c.text(MARGIN + 20, y + 14, "no While loops")
            y += 30
            continue
        edges = {(sid, *key): labels for sid, sub in _scope_jaxprs(jaxpr).items()
                 for key, labels in _edges(sub).items()}
        stacks = _stack_vars(jaxpr)
        by_key = {(lp.scope, lp.index): lp for lp in loops}
        for n, lp in enumerate(loops):
            y += _panel(c, lp, y, stacks)
            nxt = loops[n + 1] if n + 1 < len(loops) else None
            lines = []
            for (sid, i, j), labels in edges.items():
                if nxt is not None and (sid, j) == (nxt.scope, nxt.index):
                    src = by_key[(sid, i)].eqn.params
                    lines.append(f"from the {src['role']} While '{src['name']}': "
                                 + ", ".join(_edge_label(labels)))
            wrapped = [w for line in lines for w in _wrap(line, WIDTH / 2 - 40)]
            gap = max(40, LINE * len(wrapped) + 16) if n + 1 < len(loops) else 30
            if wrapped:
                c.arrow(WIDTH / 2, y + 2, y + gap - 4)
                for k, line in enumerate(wrapped):
                    c.text(WIDTH / 2 + 14, y + 14 + LINE * k, line, color="#333")
            y += gap
        y += 10
    height = y + MARGIN
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="DejaVu Sans Mono, Menlo, '
            f'Consolas, monospace">\n<defs><marker id="head" markerWidth="10" markerHeight="8" '
            f'refX="9" refY="4" orient="auto"><path d="M0,0 L10,4 L0,8 z" fill="#444"/>'
            f'</marker></defs>\n<rect width="100%" height="100%" fill="white"/>\n')
    return head + "\n".join(c.parts) + "\n</svg>\n"


def _edge_label(labels) -> list[str]:
    counts: dict = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    return [f"{n} × {label}s" if n > 1 else label for label, n in counts.items()]


def _scope_jaxprs(jaxpr) -> dict:
    """id -> jaxpr for `jaxpr` and every jaxpr nested in it."""
    out = {id(jaxpr): jaxpr}
    for eqn in jaxpr.eqns:
        for sub in jaxprs_in_params(eqn.params):
            out.update(_scope_jaxprs(sub))
    return out
