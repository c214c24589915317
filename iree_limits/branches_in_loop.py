"""IREE 3.13 (llvm-cpu): iree-compile fails on a loop whose body holds many
data-dependent branches (`stablehlo.case`) over many loop-carried buffers:

    error: failed to solve for timepoint coverage

in `iree-stream-elide-timepoints` (run inside `iree-util-fixed-point-iterator`,
`--mlir-print-ir-after-failure` names both): the pass's fixed-point solver
(DFX) gives up after its 32 iterations, which no flag raises. Each case is a
branch on the host (its index read back from the device), so the body becomes
a chain of CFG blocks whose timepoint arguments the solver must resolve around
the loop.

The loop below carries C `f32[8]` tensors; step k of its body branches on the
sign of sum(carry (k+1) % C) and replaces carry k % C by (carry k % C) *
(carry (k+1) % C) or (carry k % C) + 0.5. With C = 17 carries it fails from
N = 29 cases on (fewer carries or cases compile); the same loop with each case
written as its two branches and an elementwise select compiles at every size.

whilst met this in `jax.grad(jax.grad(f))` of a loop with `checkpoints=2`
(tests/iree/test_iree_corpus.py checkpoint_jvp_and_grad_of_grad): the gradient Whiles
of the checkpoint schedule branch with a three-way `lax.switch` whose
re-planning branches each hold a `lax.cond` (whilst/ir/reverse/_checkpointed.py), and the
second gradient's body held 7 cases over 21 carries. Worked around: linearizing
a gradient While computes every branch of its schedule and selects one
(whilst/ir/iree_forms/_selected_branches.py); with aggressive fusion the program still
fails this way, and compiles with the default fusion whilst falls back to.
First-order gradients keep their branches (selecting there runs the body's vjp in
every step, which made them slower on IREE: README.md).

    python iree_limits/branches_in_loop.py [N C]
"""
import sys

from iree.compiler import tools

FLAGS = ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
         "--iree-hal-local-target-device-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
T = "tensor<8xf32>"


def loop(n_cases: int, n_carries: int, form: str) -> str:
    """The module text; `form` is "case" (host branches) or "select"."""
    C = n_carries
    types = ", ".join([T] * C)
    lines = [f"func.func @main(%x0: {T}, %n: tensor<i32>) -> {T} {{",
             f"  %half = stablehlo.constant dense<0.5> : {T}",
             "  %zf = stablehlo.constant dense<0.0> : tensor<f32>",
             "  %one = stablehlo.constant dense<1> : tensor<i32>",
             "  %zero = stablehlo.constant dense<0> : tensor<i32>",
             f"  %init0 = stablehlo.add %x0, %x0 : {T}"]
    lines += [f"  %init{c} = stablehlo.multiply %init{c - 1}, %x0 : {T}" for c in range(1, C)]
    lines += [f"  %r:{C + 1} = stablehlo.while(%i = %zero, "
              + ", ".join(f"%c{c} = %init{c}" for c in range(C)) + f") : tensor<i32>, {types}",
              "  cond {",
              "    %go = stablehlo.compare LT, %i, %n, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>",
              "    stablehlo.return %go : tensor<i1>",
              "  } do {"]
    cur = [f"%c{c}" for c in range(C)]
    for k in range(n_cases):
        a, b, s = cur[k % C], cur[(k + 1) % C], f"%s{k}"
        lines += [f"    {s}r = stablehlo.reduce({b} init: %zf) applies stablehlo.add across dimensions = [0] : ({T}, tensor<f32>) -> tensor<f32>",
                  f"    {s}p = stablehlo.compare GT, {s}r, %zf : (tensor<f32>, tensor<f32>) -> tensor<i1>"]
        if form == "case":
            lines += [f"    {s}i = stablehlo.convert {s}p : (tensor<i1>) -> tensor<i32>",
                      f'    {s} = "stablehlo.case"({s}i) ({{',
                      f"      {s}a = stablehlo.multiply {a}, {b} : {T}",
                      f"      stablehlo.return {s}a : {T}",
                      "    }, {",
                      f"      {s}b = stablehlo.add {a}, %half : {T}",
                      f"      stablehlo.return {s}b : {T}",
                      f"    }}) : (tensor<i32>) -> {T}"]
        else:
            lines += [f"    {s}a = stablehlo.multiply {a}, {b} : {T}",
                      f"    {s}b = stablehlo.add {a}, %half : {T}",
                      f"    {s}q = stablehlo.broadcast_in_dim {s}p, dims = [] : (tensor<i1>) -> tensor<8xi1>",
                      f"    {s} = stablehlo.select {s}q, {s}b, {s}a : tensor<8xi1>, {T}"]
        cur[k % C] = s
    lines += ["    %i1 = stablehlo.add %i, %one : tensor<i32>",
              f"    stablehlo.return %i1, {', '.join(cur)} : tensor<i32>, {types}",
              "  }",
              f"  return %r#1 : {T}",
              "}"]
    return "\n".join(lines)


def outcome(text: str) -> str:
    try:
        tools.compile_str(text, extra_args=FLAGS)
    except tools.CompilerToolError as e:
        errors = [line for line in str(e).splitlines() if "error:" in line]
        return "iree-compile fails: " + (errors[0] if errors else str(e)[-300:])
    return "compiles"


def main():
    n_cases, n_carries = map(int, sys.argv[1:3]) if len(sys.argv) > 2 else (34, 17)
    for form in ("case", "select"):
        print(f"{n_cases} {form}s over {n_carries} carries: "
              f"{outcome(loop(n_cases, n_carries, form))}", flush=True)


if __name__ == "__main__":
    main()
