"""IREE 3.13's Python package (`iree.compiler`): its MLIR bindings look up a Python
module for an op's dialect (`iree.compiler.dialects.<namespace>`) every time they wrap
the op (`Value.owner`, iterating a block's operations), and a namespace without one,
`stablehlo` among them, is searched for on `sys.path` again each time: 50-100 us
per op wrapped, where a dialect with a module costs 1-3 us.

whilst registers an empty module for those dialects (`whilst/lowering/_iree_ir.py`);
this script prints the time per wrap without it and with it (in a second process).

    python iree_limits/dialect_module_lookup.py
"""
import subprocess
import sys
import time

N = 2000
MODULE = "\n".join([
    "func.func @main(%0: tensor<f32>) -> tensor<f32> {",
    *(f"  %{i + 1} = stablehlo.add %{i}, %{i} : tensor<f32>" for i in range(N)),
    f"  return %{N} : tensor<f32>",
    "}"])


def us_per_wrap() -> float:
    from iree.compiler import ir

    with ir.Context():
        module = ir.Module.parse(MODULE)
        start = time.perf_counter()
        ops = list(module.body.operations[0].regions[0].blocks[0].operations)
        owners = [op.operands[0].owner for op in ops if len(op.operands)]
        return (time.perf_counter() - start) / (len(ops) + len(owners)) * 1e6


if __name__ == "__main__":
    if sys.argv[1:] == ["--registered"]:
        import whilst.lowering._iree_ir  # noqa: F401  (registers the empty modules)
        print(f"with whilst's empty stablehlo module: {us_per_wrap():.1f} us per op wrapped")
    else:
        print(f"IREE 3.13 as installed: {us_per_wrap():.1f} us per op wrapped")
        subprocess.run([sys.executable, __file__, "--registered"], check=True)
