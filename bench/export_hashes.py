"""Hashes of what whilst exports for a fixed set of programs, so that a change meant to
keep behaviour (a restructuring) can show its modules are byte-identical.

Programs: the IREE conformance corpus (`tests/iree/test_iree_corpus.py`), the bench programs
and the samples (`bench/gpu_check.py`'s quick set). For each program and each target
(llvm-cpu, vulkan-spirv, cuda): the sha256 of the StableHLO text `whilst.export` makes and
of the prepared module text, both without source locations (the VHLO artifact records
the file and line of every op's Python source, whilst's own included, so any edit of
whilst changes it), and of the text iree-compile gets for each flag set `compile_module`
may try (`source_for`: loops moved into dispatches, host loop forms). No iree-compile
runs.

    python bench/export_hashes.py > before.json          # on the old code
    python bench/export_hashes.py --compare before.json  # on the new: lists differences
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ("llvm-cpu", "vulkan-spirv", "cuda")


def programs() -> dict:
    """name -> (fn, args): every program hashed."""
    tests = os.path.join(HERE, "..", "tests")
    sys.path[:0] = [HERE, tests, os.path.join(tests, "iree")]  # the corpus imports helpers
    import gpu_check
    import test_iree_corpus

    found = {f"bench: {name}": (fn, args)
             for name, (fn, args, _) in gpu_check.programs(quick=True).items()}
    for group, cases in test_iree_corpus.GROUPS.items():
        for case in cases:
            found[f"corpus {group}: {case.name}"] = (case.fn, case.args)
    return found


def hashes() -> dict:
    """`{program: {target: {"stablehlo": sha256, "prepared": sha256, "sources":
    {flags described: sha256 or None}}}}` (or the error)."""
    import whilst
    from whilst._compile import prepare_stage
    from whilst.lowering import describe_flags, flag_sets, source_for

    out = {}
    for name, (fn, args) in programs().items():
        out[name] = {}
        for target in TARGETS:
            try:
                exported = whilst.export(fn, *args, name="main", targets=(target,))
                prepared = prepare_stage([exported], (target,))
            except Exception as e:  # a program a target refuses is hashed by its error
                out[name][target] = {"error": f"{type(e).__name__}: {e}"}
                continue
            forms = {}
            sources = {describe_flags(flags): source_for(prepared, flags, forms)
                       for flags in flag_sets([target])}
            out[name][target] = {
                "stablehlo": _sha256(_without_locations(exported.text)),
                "prepared": _sha256(prepared),
                "sources": {k: v and _sha256(v) for k, v in sources.items()}}
        print(f"hashed {name}", file=sys.stderr, flush=True)
    return out


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _without_locations(text: str) -> str:
    from whilst.lowering._iree_ir import ir
    with ir.Context():
        return ir.Module.parse(text).operation.get_asm(enable_debug_info=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", metavar="JSON",
                        help="hashes from before; print what differs, exit 1 if anything does")
    args = parser.parse_args()
    now = hashes()
    if args.compare is None:
        json.dump(now, sys.stdout, indent=1, sort_keys=True)
        return
    with open(args.compare) as f:
        before = json.load(f)
    differ = sorted(name for name in before.keys() | now.keys()
                    if before.get(name) != now.get(name))
    for name in differ:
        print(f"differs: {name}\n  before {before.get(name)}\n  now    {now.get(name)}")
    total = len(before.keys() | now.keys())
    print(f"{total - len(differ)} of {total} programs identical on {', '.join(TARGETS)}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
