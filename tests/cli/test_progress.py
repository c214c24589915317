"""Progress of long work: `whilst compile` shows the running stage and its elapsed
time on a terminal (a real pseudo-terminal here) and plain lines elsewhere;
`whilst.compile` reports its stages to a `progress=` hook and to the `whilst` logger,
which prints nothing unless the application configures logging; a fallback from
aggressive fusion says which failure caused it and why. Real compiles, real processes."""
import logging
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import time

import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import REPO
from whilst.lowering import compile_module

pytestmark = pytest.mark.iree

MODEL = textwrap.dedent('''
    import whilst


    def halve(x, n):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5), [0, x])
''')

COMPILE = [sys.executable, "-m", "whilst.cli", "compile", "model.py:halve", "--arg", "f32[3]",
           "--arg", "i32[]", "--no-cache", "-o", "h.vmfb"]
# The stage's result line: its label, which names the flag set where it is not the
# plain one (`halve`'s loop runs inside one dispatch), and its time.
STAGE_DONE = r"  iree-compile for llvm-cpu \(host\)( with [\w ,]+)?\s+[\d.]+ ms"


@pytest.fixture
def work(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    return tmp_path


def run_on_a_terminal(argv, cwd, limit=600):
    """Run `argv` with stdin, stdout and stderr on a new pseudo-terminal; returns its
    exit status and everything it wrote there."""
    master, slave = pty.openpty()
    process = subprocess.Popen(argv, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                               env={**os.environ, "TERM": "xterm"})
    os.close(slave)
    written = bytearray()
    deadline = time.monotonic() + limit
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:          # EIO: the child side closed
                break
            if not chunk:
                break
            written += chunk
        else:
            process.kill()
            pytest.fail(f"{argv} did not finish; it wrote {bytes(written)[-2000:]!r}")
    finally:
        os.close(master)
    return process.wait(), written.decode()


def test_compile_on_a_terminal_shows_the_running_stage_with_elapsed_time(work):
    code, screen = run_on_a_terminal(COMPILE, work)
    assert code == 0, screen
    # The live line: erased and rewritten in place, the stage and its seconds so far.
    live = re.findall(r"\r\x1b\[K  (iree-compile for llvm-cpu \(host\))\s+(\d+\.\d) s", screen)
    assert live, repr(screen)
    assert [float(s) for _, s in live] == sorted(float(s) for _, s in live)
    assert re.search(r"\r\x1b\[K  export halve to StableHLO\s+\d+\.\d s", screen), repr(screen)
    # Erased when the stage ends, before the stage's result line takes its place.
    assert re.search(r"\d s\r\x1b\[K" + STAGE_DONE, screen), repr(screen)
    assert "wrote h.vmfb" in screen and (work / "h.vmfb").stat().st_size > 0


def test_compile_elsewhere_prints_plain_lines(work):
    """Without a terminal, a plain line says that iree-compile runs, as it starts (stdout
    and stderr are one pipe here, so the order is the order of writing)."""
    run = subprocess.run(COMPILE, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL, text=True, timeout=600)
    assert run.returncode == 0, run.stdout
    assert "\r" not in run.stdout and "\x1b" not in run.stdout
    lines = run.stdout.splitlines()
    start = lines.index("whilst compile: iree-compile for llvm-cpu (host) ...")
    done = next(k for k, line in enumerate(lines) if re.fullmatch(STAGE_DONE, line))
    assert lines[start - 1].startswith("  prepare for IREE (1 function)") and start < done


IN_DISPATCH = ("iree-compile for llvm-cpu (host) with aggressive fusion, small loops in one "
               "dispatch each")


def step(x, n):
    return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x + 1.0), [0, x])


def test_whilst_compile_reports_stages_to_a_hook_and_the_whilst_logger(caplog):
    events = []
    with caplog.at_level(logging.INFO, logger="whilst"):
        compiled = whilst.compile(step, np.zeros(2, np.float32), np.int32(0), cache=False,
                                  progress=lambda *event: events.append(event))
    # The compile's stage is relabelled once its loop runs inside a dispatch.
    compile_labels = ["iree-compile for llvm-cpu (host)", IN_DISPATCH]
    assert [(label, done) for label, _, done in events] == [
        ("export main to StableHLO", False), ("export main to StableHLO", True),
        ("prepare for IREE (1 function)", False), ("prepare for IREE (1 function)", True),
        (compile_labels[0], False), (compile_labels[1], False), (compile_labels[1], True)]
    assert all(seconds == 0.0 for label, seconds, done in events
               if not done and label != IN_DISPATCH)     # a stage's start
    assert [(label, seconds) for label, seconds, done in events if done] == compiled.stages
    logged = [r.getMessage() for r in caplog.records if r.name == "whilst"]
    assert "iree-compile for llvm-cpu (host): running (0.0 s)" in logged, logged
    assert any(re.fullmatch(re.escape(IN_DISPATCH) + r": done in \d+\.\d{3} s", m)
               for m in logged), logged


COMPILE_IN_A_LIBRARY = textwrap.dedent('''
    import logging, sys
    import numpy as np
    import whilst
    if sys.argv[1] == "configured":
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    whilst.compile(lambda x: x * 2.0, np.ones(3, np.float32), cache=False)
    print("compiled")
''')


def test_the_whilst_logger_is_quiet_unless_configured(tmp_path):
    def stderr_of(mode):
        run = subprocess.run([sys.executable, "-c", COMPILE_IN_A_LIBRARY, mode], cwd=tmp_path,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and run.stdout == "compiled\n", run.stderr
        return run.stderr

    assert "iree-compile" not in stderr_of("quiet")
    assert "whilst INFO iree-compile for llvm-cpu (host): running" in stderr_of("configured")


def test_iree_compile_warnings_go_to_the_whilst_logger_not_to_stderr(capfd, caplog):
    """A compile that succeeds with warnings (here iree-compile's for a CPU it was not
    told: every whilst compile names one) prints nothing; the warnings are logged at
    DEBUG level."""
    from whilst.lowering._iree import _iree_compile

    text = ("func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %y = stablehlo.add %x, %x : tensor<4xf32>\n  return %y : tensor<4xf32>\n}\n")
    with caplog.at_level(logging.DEBUG, logger="whilst"):
        vmfb = _iree_compile(text, ["--iree-input-type=stablehlo", "--iree-hal-target-device=local",
                                    "--iree-hal-local-target-device-backends=llvm-cpu"])
    assert vmfb
    assert capfd.readouterr().err == ""
    assert any("Defaulting to targeting a generic CPU" in r.getMessage()
               for r in caplog.records if r.name.startswith("whilst")), caplog.records


def two_zeros_carries(x, n):
    """A program iree-compile 3.13 rejects with aggressive fusion ("operand #1 does not
    dominate this use"; iree_limits/reproduce.py aggressive_fusion_dominance): two
    9-row carries that start from one value, 9 unpredicated steps per iteration, a
    trip count computed from `n` when the module runs."""
    def body(i, a, b):
        return i + 1, a.at[i].set(x * i), b.at[i].set(x + i)
    return whilst.while_loop(lambda i, a, b: i < n, body, [0, jnp.zeros(9), jnp.zeros(9)],
                             maximum_iterations=9)


def test_a_fallback_from_aggressive_fusion_says_which_failure_and_why(tmp_path):
    events = []
    # Every loop stepped from the host: in a dispatch, this one compiles with aggressive
    # fusion.
    first = whilst.compile(two_zeros_carries, np.float32(2.0), np.int32(9), cache=tmp_path,
                           progress=lambda *event: events.append(event),
                           loops_in_dispatch=False)
    label = first.stages[-1][0]
    assert re.fullmatch(r"iree-compile for llvm-cpu \(host\) with default fusion \(with "
                        r"aggressive fusion, iree-compile failed: operand #\d+ does not "
                        r"dominate this use\)", label), label
    # The hook heard of the fallback while it ran, then of the stage's end.
    assert events[-2:] == [(label, events[-2][1], False), (label, first.stages[-1][1], True)]
    n, a, b = first.load().main(np.float32(2.0), np.int32(9))
    assert int(n) == 9 and list(a) == [2 * i for i in range(9)] \
        and list(b) == [2 + i for i in range(9)]
    again = whilst.compile(two_zeros_carries, np.float32(2.0), np.int32(9), cache=tmp_path,
                           loops_in_dispatch=False)
    assert again.cache_hit and again.stages[-1][0] == "compile cache hit" + label[len(
        "iree-compile"):]


def test_a_module_no_flag_set_compiles_says_what_each_met_and_what_to_do():
    """iree_limits/branches_in_loop.py: 34 host branches over 17 carries in a loop body
    stepped from the host, which iree-compile 3.13 fails to solve for timepoint
    coverage with every flag set (in a dispatch, the loop compiles).
    The error keeps the last diagnostics, says in one line what each flag set met, and
    gives the advice for many loops and branches in a body (TIMEPOINT_COVERAGE_HINT), as
    it does wherever any flag set met that failure (the third derivative of an
    unbounded loop met it with default fusion, and another error with the flag set
    after)."""
    from iree_limits.branches_in_loop import loop
    from whilst.lowering import flag_sets
    from whilst.lowering._iree import TIMEPOINT_COVERAGE_HINT

    reasons = []
    with pytest.raises(whilst.CompileError) as e:
        compile_module(loop(34, 17, "case"), loops_in_dispatch=False,
                       on_fallback=lambda reason, flags: reasons.append(reason))
    msg = str(e.value)
    assert msg.endswith(TIMEPOINT_COVERAGE_HINT), msg
    tried = msg.split("\nEach flag set tried failed:\n")[1][:-len(TIMEPOINT_COVERAGE_HINT)]
    lines = tried.split("\n")
    assert len(lines) == len(reasons) + 1 == len(flag_sets(("llvm-cpu",),
                                                             loops_in_dispatch=False)), msg
    assert [line.strip() for line in lines[:-1]] == reasons, msg
    for line in lines:
        assert re.fullmatch(r"  with (aggressive|default) fusion[\w ,-]*, iree-compile "
                            r"failed: failed to solve for timepoint coverage", line), msg


def test_a_fallback_for_a_module_that_cannot_run_says_so():
    """iree_limits/wide_scalar_dispatch.mlir: a dispatch over the runtime's 32
    bindings with every flag set (tests/iree/test_iree_bindings.py)."""
    from whilst.lowering import flag_sets

    wide = (REPO / "iree_limits" / "wide_scalar_dispatch.mlir").read_text()
    reasons = []
    with pytest.raises(whilst.CompileError):
        compile_module(wide, on_fallback=lambda reason, flags: reasons.append(reason))
    assert len(reasons) == len(flag_sets(("llvm-cpu",))) - 1, reasons
    for reason in reasons:
        assert re.fullmatch(
            r"with (aggressive|default) fusion[\w ,-]*, "
            r"iree-compile would make a module for targets \['llvm-cpu'\] that cannot run: "
            r"1 dispatch over the IREE runtime's limit of 32 buffer bindings per dispatch on "
            r"llvm-cpu \(\w+: \d+ bindings\)", reason), reasons
