"""End-to-end tests of the `whilst` command on the CPU target (real iree-compile,
real runtime), compile-only tests for the GPU targets, and its error messages."""
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst as whilst_api
from helpers import REPO, no_device
from whilst.cli import main

pytestmark = pytest.mark.iree


MODEL = textwrap.dedent('''
    import jax.numpy as jnp
    import whilst


    def loss(x, w):
        def cond(i, h):
            return jnp.sum(h) < 100.0

        def body(i, h):
            return i + 1, jnp.tanh(h @ w) + h * 1.1

        _, h = whilst.while_loop(cond, body, [0, x], maximum_iterations=20, name="rnn")
        return jnp.sum(h ** 2)


    def collatz(n):
        def body(i, k):
            return i + 1, jnp.where(k % 2 == 0, k // 2, 3 * k + 1)

        return whilst.while_loop(lambda i, k: jnp.any(k != 1), body, [0, n],
                                 maximum_iterations=1000)


    def broken(x):
        return x @ jnp.ones((3, 3))
''')


def reference_loss(x, w):
    """The loop of MODEL's `loss`, unrolled in Python (the oracle for jax.grad)."""
    h = x
    for _ in range(20):
        if not jnp.sum(h) < 100.0:
            break
        h = jnp.tanh(h @ w) + h * 1.1
    return jnp.sum(h ** 2)


def reference_collatz(n):
    n, i = np.array(n), 0
    while np.any(n != 1) and i < 1000:
        n, i = np.where(n % 2 == 0, n // 2, 3 * n + 1), i + 1
    return i, n


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "model.py").write_text(MODEL)
    return d


def whilst(work, *argv, capsys):
    """Run the command in `work`; returns (exit status, stdout, stderr)."""
    cwd = os.getcwd()
    os.chdir(work)
    try:
        code = main(list(argv))
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    return code, out, err


X = np.full((3, 4), 0.1, np.float32)
W = (np.eye(4) * 0.5 + 0.05).astype(np.float32)


@pytest.fixture(scope="module")
def grad_module(work):
    """model.py:loss and its gradient (argnums 0,1) compiled by the command."""
    assert main(["compile", f"{work}/model.py:loss", "--arg", "f32[3,4]", "--arg", "f32[4,4]",
                 "--grad", "0,1", "--emit-mlir", str(work / "mlir"),
                 "-o", str(work / "loss.vmfb")]) == 0
    np.save(work / "x.npy", X)
    np.save(work / "w.npy", W)
    return work / "loss.vmfb"


@pytest.fixture(scope="module")
def batch_module(work):
    """model.py:collatz with a symbolic batch dimension."""
    assert main(["compile", f"{work}/model.py:collatz", "--arg", "i32[b]",
                 "-o", str(work / "collatz.vmfb")]) == 0
    return work / "collatz.vmfb"


def test_compile_reports_stages_and_writes_mlir(work, capsys):
    # --no-cache: the iree-compile stage runs even where the tests' cache holds the module
    code, out, _ = whilst(work, "compile", "model.py:loss", "--arg", "f32[3,4]", "--arg",
                          "f32[4,4]", "--grad", "0", "--no-cache", "-o", "l0.vmfb",
                          capsys=capsys)
    assert code == 0
    for stage in ("import model.py", "export loss to StableHLO", "export loss_grad to StableHLO",
                  "prepare for IREE (2 functions)", "iree-compile for llvm-cpu (host)"):
        assert re.search(re.escape(stage) + r"( with [\w ,]+)?\s+[\d.]+ ms", out), (stage, out)
    assert "wrote l0.vmfb" in out and "loss_grad(x: f32[3,4], w: f32[4,4]) -> f32[3,4]" in out
    assert (work / "l0.vmfb").stat().st_size > 0


@pytest.mark.parametrize("option", [[], ["--no-loops-in-dispatch"]])
def test_small_loops_run_in_a_dispatch_unless_told_not_to(work, capsys, option):
    """By default the Collatz loop over 4 numbers runs inside one dispatch (the stage
    line says so); --no-loops-in-dispatch steps it from the host. Both run it right."""
    out_file = f"collatz{len(option)}.vmfb"
    code, out, _ = whilst(work, "compile", "model.py:collatz", "--arg", "i32[4]", "--no-cache",
                          *option, "-o", out_file, capsys=capsys)
    assert code == 0
    assert ("small loops in one dispatch each" in out) == (not option), out
    n = np.array([1, 6, 27, 97], np.int32)
    np.save(work / "n.npy", n)
    code, out, _ = whilst(work, "run", out_file, "--input", "n.npy", "--output", "out_" + out_file,
                          capsys=capsys)
    assert code == 0, out
    steps, values = reference_collatz(n)
    got = sorted((work / ("out_" + out_file)).iterdir())
    assert int(np.load(got[0])) == steps and np.array_equal(np.load(got[1]), values), got


def test_emit_mlir_has_forward_and_gradient_while(grad_module):
    mlir = grad_module.parent / "mlir"
    assert sorted(os.listdir(mlir)) == ["loss.stablehlo.mlir", "loss_grad.stablehlo.mlir",
                                        "module.mlir"]
    grad_text = (mlir / "loss_grad.stablehlo.mlir").read_text()
    assert 'whilst.role = "forward"' in grad_text and 'whilst.role = "gradient"' in grad_text


def test_run_gradient_matches_jax_grad_of_unrolled_loop(grad_module, work, capsys):
    code, out, _ = whilst(work, "run", "loss.vmfb", "--function", "loss_grad", "--input",
                          "x.npy", "--input", "w.npy", "--output", "out", capsys=capsys)
    assert code == 0, out
    assert out.startswith("loss_grad on local-sync: 2 input(s), 2 output(s)")
    dx, dw = jax.grad(reference_loss, argnums=(0, 1))(X, W)
    np.testing.assert_allclose(np.load(work / "out" / "output_0.npy"), dx, rtol=2e-4)
    np.testing.assert_allclose(np.load(work / "out" / "output_1.npy"), dw, rtol=2e-4)
    code, out, _ = whilst(work, "run", "loss.vmfb", "--input", "x.npy", "--input", "w.npy",
                          capsys=capsys)
    value = float(re.search(r"result\s+f32\[\]\s+= (\S+)", out).group(1))
    np.testing.assert_allclose(value, reference_loss(X, W), rtol=1e-5)


def test_symbolic_batch_runs_at_three_sizes(batch_module, work, capsys):
    for b in (1, 5, 12):
        n = np.arange(1, b + 1, dtype=np.int32) * 7
        np.save(work / f"n{b}.npy", n)
        code, out, err = whilst(work, "run", "collatz.vmfb", "--input", f"n{b}.npy",
                                "--output", f"c{b}", capsys=capsys)
        assert code == 0, err
        steps, final = reference_collatz(n)
        assert np.load(work / f"c{b}" / "output_0.npy") == steps
        np.testing.assert_array_equal(np.load(work / f"c{b}" / "output_1.npy"), final)


def test_inspect_shows_functions_targets_and_iree_run_module(grad_module, batch_module, work,
                                                           capsys):
    code, out, _ = whilst(work, "inspect", "loss.vmfb", capsys=capsys)
    assert code == 0
    assert "targets: llvm-cpu (host) -> driver local-sync or local-task" in out
    assert "whilst seal verified" in out and "detect damage, not tampering" in out
    assert "function loss(x: f32[3,4], w: f32[4,4]) -> f32[]" in out
    assert "function loss_grad(x: f32[3,4], w: f32[4,4]) -> (f32[3,4], f32[4,4])" in out
    assert re.search(r"0  x\s+f32\[3,4\]", out) and re.search(r"1  w\s+f32\[4,4\]", out)
    assert re.search(r"1  result\[1\]\s+f32\[4,4\]", out)
    cmd = re.search(r"(iree-run-module .*--function=loss_grad.*)", out).group(1)
    code, out, _ = whilst(work, "inspect", "collatz.vmfb", capsys=capsys)
    assert "function collatz(n: i32[b]) -> [i32[], i32[b]]" in out
    assert "symbolic dimensions: b" in out
    # The printed command line runs the module with IREE's own tool, on files named
    # after the arguments (x.npy, w.npy: saved by grad_module).
    assert "--input=@x.npy --input=@w.npy" in cmd
    tool = os.path.join(os.path.dirname(sys.executable), "iree-run-module")
    run = subprocess.run([tool if a == "iree-run-module" else a for a in cmd.split()],
                         cwd=work, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "4x4xf32" in run.stdout


def test_ir_prints_while_loops_and_draws_them(work, capsys):
    code, out, _ = whilst(work, "ir", "model.py:loss", "--arg", "f32[3,4]", "--arg", "f32[4,4]",
                          "--grad", "0", "--graph", "loops.svg", capsys=capsys)
    assert code == 0
    # (jax 0.10 keeps tanh's output and the carry, jax 0.12 one `one_minus_square` row)
    assert re.search(r"//   forward While 'rnn': at most 20 iterations, [12] accumulator "
                     r"stack\(s\)", out)
    assert "//   gradient While 'rnn': at most 20 iterations" in out
    assert "functional_while[" in out and "role=gradient" in out
    svg = (work / "loops.svg").read_text()
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    namespace = {}
    exec(MODEL, namespace)
    report = whilst_api.residual_report(namespace["loss"], np.ones((3, 4), np.float32),
                                        np.ones((4, 4), np.float32))
    stack = report.loops[0].stack_shapes[0][0]
    assert stack[0] >= 20 and stack[1:] == (3, 4)  # at least maximum_iterations rows
    for text in ("While  ·  forward  ·  'rnn'", "While  ·  gradient  ·  'rnn'",
                 f"f32[{','.join(map(str, stack))}]", "from the forward While 'rnn'",
                 ">cond<", ">body<"):
        assert text in svg, text
    code, out, _ = whilst(work, "ir", "model.py:loss", "--arg", "f32[3,4]", "--arg",
                          "f32[4,4]", "--stage", "stablehlo", capsys=capsys)
    assert code == 0 and 'stablehlo.while' in out and 'whilst.role = "forward"' in out


def test_help_explains_each_subcommand_with_examples(capsys):
    for argv in ([], ["compile"], ["run"], ["inspect"], ["ir"]):
        with pytest.raises(SystemExit) as e:
            main([*argv, "--help"])
        assert e.value.code == 0
        assert "example" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["compile", "nope.py:f", "--arg", "f32", "-o", "z.vmfb"], "cannot find 'nope.py'"),
    (["compile", "model.py:nope", "--arg", "f32", "-o", "z.vmfb"],
     "model.py has no function 'nope'; it defines ['broken', 'collatz', 'loss']"),
    (["compile", "model.py:loss", "--arg", "f32[3,", "-o", "z.vmfb"],
     "--arg 'f32[3,' is not an argument spec"),
    (["compile", "model.py:loss", "--arg", "q8[3]", "-o", "z.vmfb"], "unknown dtype 'q8'"),
    (["compile", "model.py:broken", "--arg", "f32[2,2]", "-o", "z.vmfb"],
     "exporting broken(f32[2,2]) failed: TypeError: dot_general requires contracting "
     "dimensions to have the same shape"),
    (["compile", "model.py:collatz", "--arg", "f32[3]", "--grad", "0", "-o", "z.vmfb"],
     "--grad needs collatz to return one float scalar"),
    (["compile", "model.py:loss", "--arg", "f32[3,4]", "--arg", "f32[4,4]", "--grad", "2",
      "-o", "z.vmfb"], "so [2] is out of range"),
    (["run", "missing.vmfb"], "cannot read module 'missing.vmfb'"),
    (["inspect", "model.py"], "not a valid IREE module"),
])
def test_errors_are_one_message_and_nonzero_exit(work, capsys, argv, message):
    code, _, err = whilst(work, *argv, capsys=capsys)
    assert code == 1
    assert err.startswith(f"whilst {argv[0]}: error: ") and message in err, err
    assert "Traceback" not in err


def test_errors_name_the_user_code_location(work, capsys):
    _, _, err = whilst(work, "compile", "model.py:broken", "--arg", "f32[2,2]", "-o", "z.vmfb",
                       capsys=capsys)
    assert "(at model.py:" in err and "in broken)" in err


def test_unknown_target_is_a_usage_error(work, capsys):
    with pytest.raises(SystemExit) as e:
        main(["compile", "model.py:loss", "--arg", "f32", "--target", "tpu", "-o", "z.vmfb"])
    assert e.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_iree_compile_failure_keeps_diagnostics(work, capsys):
    code, _, err = whilst(work, "compile", "model.py:collatz", "--arg", "i32[3]", "--target",
                          "cuda", "--gpu-arch", "sm_90", "-o", "z.vmfb", capsys=capsys)
    assert code == 1
    assert "iree-compile failed for targets ['cuda']" in err and "Diagnostics:" in err
    assert "missing GPU target" in err
    assert "Traceback" not in err


def test_unknown_cpu_is_one_line(work, capsys):
    code, _, err = whilst(work, "compile", "model.py:collatz", "--arg", "i32[3]", "--cpu",
                          "no-such-cpu", "-o", "z.vmfb", capsys=capsys)
    assert code == 1
    assert "--cpu 'no-such-cpu' is not a CPU LLVM knows" in err
    error = err[err.index("whilst compile: error: "):]       # after the progress lines
    assert "List of accepted CPUs" not in err and len(error.splitlines()) <= 2


def test_operations_iree_cannot_read_are_one_message(work, capsys):
    (work / "lapack.py").write_text("import jax.numpy as jnp\n\n"
                                    "def solve(a, b):\n    return jnp.linalg.eigh(a)[0] @ b\n")
    code, _, err = whilst(work, "compile", "lapack.py:solve", "--arg", "f32[3,3]", "--arg",
                          "f32[3]", "-o", "z.vmfb", capsys=capsys)
    assert code == 1
    assert "calls `eigh`" in err and "LAPACK" in err   # refused at export, with a fix
    assert "Traceback" not in err


def test_debug_shows_the_traceback(work, capsys):
    os.chdir(work)
    try:
        with pytest.raises(Exception, match="cannot find 'nope.py'"):
            main(["--debug", "compile", "nope.py:f", "--arg", "f32", "-o", "z.vmfb"])
    finally:
        os.chdir(REPO)


def test_console_script_runs(grad_module, work):
    exe = os.path.join(os.path.dirname(sys.executable), "whilst")
    run = subprocess.run([exe, "inspect", "loss.vmfb"], cwd=work, capture_output=True, text=True)
    assert run.returncode == 0 and "function loss_grad" in run.stdout


def _formats(vmfb):
    """The executable formats of each executable in a module, from iree-dump-module."""
    tool = os.path.join(os.path.dirname(sys.executable), "iree-dump-module")
    dump = subprocess.run([tool, str(vmfb)], capture_output=True, text=True, check=True).stdout
    return {frozenset(f.split(", ")) for f in re.findall(r"available formats: \[([^\]]*)\]", dump)}


@pytest.mark.parametrize("target, arch, fmt", [
    ("vulkan-spirv", None, "vulkan-spirv-fb"),
    ("cuda", "sm_80", "cuda-nvptx-fb"),
    ("rocm", "gfx942", "rocm-hsaco-fb"),
])
def test_gpu_targets_compile_into_one_module_with_the_cpu(grad_module, work, capsys, target,
                                                          arch, fmt):
    out_file = f"multi-{target}.vmfb"
    argv = ["compile", "model.py:loss", "--arg", "f32[3,4]", "--arg", "f32[4,4]", "--grad", "0",
            "--target", target, "--target", "llvm-cpu", "-o", out_file]
    if arch:
        argv[-2:-2] = ["--gpu-arch", f"{target}={arch}"]
    code, out, err = whilst(work, *argv, capsys=capsys)
    assert code == 0, err
    # Every executable has a variant for each target (none dropped by linking).
    formats = _formats(work / out_file)
    assert formats == {frozenset({fmt, "embedded-elf-x86_64"})}, formats
    code, out, _ = whilst(work, "inspect", out_file, capsys=capsys)
    assert f"targets: {target}" in out and "llvm-cpu (host)" in out
    # The same module runs on the CPU; on the GPU only where there is one.
    code, out, err = whilst(work, "run", out_file, "--function", "loss_grad", "--input",
                            "x.npy", "--input", "w.npy", "--output", f"out-{target}",
                            capsys=capsys)
    assert code == 0, err
    np.testing.assert_allclose(np.load(work / f"out-{target}" / "output_0.npy"),
                               jax.grad(reference_loss)(X, W), rtol=2e-4)


@pytest.mark.parametrize("target, driver", [("vulkan-spirv", "vulkan"), ("cuda", "cuda"),
                                            ("rocm", "hip")])
def test_gpu_runtime_or_skip(work, capsys, target, driver):
    why = no_device(driver)
    if why:
        pytest.skip(f"no {driver} device here: {why[:80]}")
    out_file = f"gpu-{target}.vmfb"
    assert main(["compile", f"{work}/model.py:loss", "--arg", "f32[3,4]", "--arg", "f32[4,4]",
                 "--target", target, "-o", str(work / out_file)]) == 0
    np.save(work / "x.npy", X)
    np.save(work / "w.npy", W)
    code, out, err = whilst(work, "run", out_file, "--driver", driver, "--input", "x.npy",
                            "--input", "w.npy", capsys=capsys)
    assert code == 0, err
    value = float(re.search(r"= (\S+)", out).group(1))
    np.testing.assert_allclose(value, reference_loss(X, W), rtol=1e-4)
