"""The `whilst` command (and the API under it) against hostile or mistaken input:
outputs that are not regular files, the traced source named as an output, inputs that
never end or never open, outputs that cannot be written (refused before any work),
and the messages for a new user's first mistakes. Real processes, real files, real
device nodes, FIFOs and sockets."""
import os
import socket
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import whilst
from whilst.cli import main

pytestmark = pytest.mark.iree

MODEL = textwrap.dedent('''
    import jax.numpy as jnp
    import whilst


    def halve(x, n):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5), [0, x])


    def halves(x):
        return jnp.sum(x.reshape(2, -1), axis=0)


    def tail(x):
        return x[1:] * 2.0
''')

# The largest module whilst reads (README, "Files, numbers and trust").
MODULE_SIZE_LIMIT = 4 << 30

COMPILE = ("compile", "model.py:halve", "--arg", "f32[3]", "--arg", "i32[]")
IR = ("ir", "model.py:halve", "--arg", "f32[3]", "--arg", "i32[]")


@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def whilst_cli(*argv, capsys):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def whilst_process(*argv, cwd, memory_limit=None):
    """`whilst ARGV` in a process of its own (stdin closed), which must finish within a
    minute (a hang fails the test) and, with `memory_limit`, within that many bytes of
    address space (reading without bound fails it too)."""
    start = ("import resource, runpy, sys\n"
             f"resource.setrlimit(resource.RLIMIT_AS, ({memory_limit}, {memory_limit}))\n"
             if memory_limit else "import runpy, sys\n")
    start += "sys.argv[0] = 'whilst'\nrunpy.run_module('whilst.cli', run_name='__main__')\n"
    try:
        return subprocess.run([sys.executable, "-c", start, *argv], cwd=cwd,
                              capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`whilst {' '.join(argv)}` did not finish (it must refuse at once)")


def make_special(path, kind):
    """A FIFO, a character device (the kernel's null device, as /dev/null), a Unix
    socket or a directory at `path`; returns a test of its kind."""
    if kind == "fifo":
        os.mkfifo(path)
        return stat.S_ISFIFO
    if kind == "char device":
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs root")
        return stat.S_ISCHR
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        s.close()
        return stat.S_ISSOCK
    os.mkdir(path)
    return stat.S_ISDIR


KINDS = ["fifo", "char device", "socket", "directory"]


@pytest.mark.parametrize("kind", KINDS)
def test_force_replaces_regular_files_only(work, capsys, kind):
    is_kind = make_special(work / "out", kind)
    for argv, option in [((*COMPILE, "-o", "out", "--force"), "-o"),
                         ((*IR, "--graph", "out", "--force"), "--graph")]:
        code, out, err = whilst_cli(*argv, capsys=capsys)
        assert code == 1 and err.startswith(f"whilst {argv[0]}: error: {option} 'out' is a"), err
        assert "regular file" in err or "directory" in err, err
        assert len(err.splitlines()) == 1, err
        assert "export halve" not in out and "functional_while" not in out   # before any work
        assert is_kind(os.lstat(work / "out").st_mode)


@pytest.mark.parametrize("name", ["output_0.npy", "output_5.npy"])
def test_run_output_force_replaces_and_removes_regular_files_only(work, capsys, module_file,
                                                                  name):
    """output_0.npy would be replaced, a stale output_5.npy removed: neither when it
    is a FIFO, and the run is refused before it starts."""
    (work / "out").mkdir()
    os.mkfifo(work / "out" / name)
    code, out, err = whilst_cli("run", str(module_file), "--input",
                                str(module_file.parent / "x.npy"), "--output", "out", "--force",
                                capsys=capsys)
    assert code == 1 and f"--output {os.path.join('out', name)!r} is a FIFO, not a regular " \
        f"file" in err, err
    assert out == "" and os.listdir(work / "out") == [name]
    assert stat.S_ISFIFO(os.lstat(work / "out" / name).st_mode)


@pytest.mark.parametrize("kind", KINDS[:3])
def test_save_replaces_regular_files_only(tmp_path, kind):
    compiled = whilst.compile(lambda x: x * 2.0, np.ones(2, np.float32))
    is_kind = make_special(tmp_path / "m.vmfb", kind)
    with pytest.raises(OSError, match="not a regular file"):
        compiled.save(tmp_path / "m.vmfb", overwrite=True)
    assert is_kind(os.lstat(tmp_path / "m.vmfb").st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["m.vmfb"]    # no temporary file left


def test_no_command_writes_over_the_traced_source(work, capsys):
    source = (work / "model.py").read_text()
    os.symlink("model.py", work / "link.svg")
    os.link(work / "model.py", work / "hard.svg")
    for argv, option, name in [((*IR, "--graph", "model.py", "--force"), "--graph", "model.py"),
                               ((*IR, "--graph", "link.svg", "--force"), "--graph", "link.svg"),
                               ((*IR, "--graph", "hard.svg", "--force"), "--graph", "hard.svg"),
                               ((*COMPILE, "-o", "link.svg", "--force"), "-o", "link.svg"),
                               ((*COMPILE, "-o", "hard.svg", "--force"), "-o", "hard.svg")]:
        code, out, err = whilst_cli(*argv, capsys=capsys)
        assert code == 1, (argv, out)
        assert f"{option} {name!r} is the source file of model.py:halve" in err, err
        assert "functional_while" not in out and "export halve" not in out
    assert (work / "model.py").read_text() == source and os.path.islink(work / "link.svg")


@pytest.fixture(scope="module")
def module_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("module")
    compiled = whilst.compile(lambda x: x * 2.0, np.ones(2, np.float32))
    compiled.save(d / "double.vmfb")
    np.save(d / "x.npy", np.ones(2, np.float32))
    return d / "double.vmfb"


@pytest.mark.parametrize("argv, message", [
    (["inspect", "/dev/zero"], "'/dev/zero' is a character device, not a regular file"),
    (["inspect", "/dev/urandom"], "'/dev/urandom' is a character device, not a regular file"),
    (["inspect", "fifo"], "'fifo' is a FIFO, not a regular file"),
    (["run", "fifo"], "'fifo' is a FIFO, not a regular file"),
    (["run", "double.vmfb", "--input", "fifo"], "--input 'fifo' is a FIFO, not a regular file"),
    (["inspect", "huge.vmfb"], f"is larger than the {MODULE_SIZE_LIMIT >> 30} GiB"),
])
def test_inputs_are_read_only_from_regular_files_of_bounded_size(module_file, argv, message):
    d = module_file.parent
    if not os.path.exists(d / "fifo"):
        os.mkfifo(d / "fifo")
        with open(d / "huge.vmfb", "wb") as f:      # sparse: no disk space used
            f.truncate(MODULE_SIZE_LIMIT + 1)
    run = whilst_process(*argv, cwd=d, memory_limit=2 << 30)
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.startswith(f"whilst {argv[0]}: error: ") and message in run.stderr, \
        run.stderr[-2000:]
    assert len(run.stderr.splitlines()) == 1, run.stderr


@pytest.mark.parametrize("argv, message", [
    ((*COMPILE, "-o", "no-such-dir/h.vmfb"),
     "-o: cannot write 'no-such-dir/h.vmfb': the directory 'no-such-dir' does not exist"),
    ((*COMPILE, "-o", "/proc/h.vmfb"), "-o: cannot write '/proc/h.vmfb': "),
    ((*COMPILE, "-o", "model.py/h.vmfb"),
     "-o: cannot write 'model.py/h.vmfb': 'model.py' is not a directory"),
    ((*COMPILE, "--emit-mlir", "model.py", "-o", "h.vmfb"),
     "--emit-mlir 'model.py' is a file, not a directory"),
    ((*COMPILE, "--emit-mlir", "/proc/mlir", "-o", "h.vmfb"), "--emit-mlir: cannot write"),
    ((*IR, "--graph", "no-such-dir/l.svg"),
     "--graph: cannot write 'no-such-dir/l.svg': the directory 'no-such-dir' does not exist"),
])
def test_outputs_are_checked_before_any_work(work, capsys, argv, message):
    code, out, err = whilst_cli(*argv, capsys=capsys)
    assert code == 1 and message in err, err
    assert len(err.splitlines()) == 1, err
    assert "export halve" not in out and "functional_while" not in out, out
    assert sorted(os.listdir(work)) == ["model.py"]


def test_emit_mlir_files_are_checked_before_any_work(work, capsys):
    (work / "mlir").mkdir()
    (work / "mlir" / "halve.stablehlo.mlir").write_text("mine")
    code, out, err = whilst_cli(*COMPILE, "--emit-mlir", "mlir", "-o", "h.vmfb", capsys=capsys)
    assert code == 1 and "halve.stablehlo.mlir' exists; pass --force" in err, err
    assert "export halve" not in out
    assert (work / "mlir" / "halve.stablehlo.mlir").read_text() == "mine"


@pytest.mark.parametrize("ref, message", [
    (".:halve", "'.' is a directory, not a Python file"),
    ("..model:halve", "'..model' is neither a Python file (MODULE.py) nor a module name"),
    ("a.npy:halve", "'a.npy' is not a Python file"),
    ("nomodel:halve", "no module 'nomodel' can be imported here"),
    ("sub/model.txt:halve", "'sub/model.txt' is not a Python file"),
    ("model.py.bak:halve", "'model.py.bak' is not a Python file"),
])
def test_function_references_that_are_not_python_are_one_line(work, capsys, ref, message):
    np.save(work / "a.npy", np.ones(3))
    (work / "model.py.bak").write_text(MODEL)
    code, _, err = whilst_cli("compile", ref, "--arg", "f32[3]", "-o", "z.vmfb", capsys=capsys)
    assert code == 1 and message in err and "MODULE.py:FUNCTION" in err, err
    assert len(err.splitlines()) == 1, err


def test_a_module_name_for_a_file_here_suggests_the_file(work):
    """The console script does not import from the current directory."""
    script = os.path.join(os.path.dirname(sys.executable), "whilst")
    run = subprocess.run([script, "compile", "model:halve", "--arg", "f32[3]", "--arg", "i32[]",
                          "-o", "z.vmfb"], cwd=work, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr == ("whilst compile: error: no module 'model' can be imported here; did "
                          "you mean model.py:halve?\n"), run.stderr


@pytest.mark.parametrize("bound, found", [
    (3.5, "found the float 3.5"), (np.float32(2.0), "found the float32 scalar 2.0"),
    ("3", "found str '3'"), (np.ones(2, np.int32), "found an array of shape (2,)"),
])
def test_maximum_iterations_names_what_was_passed(bound, found):
    """A float is named as one, not as the array JAX would make of it."""
    with pytest.raises(TypeError, match="maximum_iterations must be a non-negative integer") as e:
        whilst.while_loop(lambda i: i < 10, lambda i: i + 1, [0], maximum_iterations=bound)
    assert found in str(e.value), e.value


def test_symbolic_reshape_compiles_and_runs_for_every_size(work, capsys):
    code, out, err = whilst_cli("compile", "model.py:halves", "--arg", "f32[2*b]",
                                "-o", "halves.vmfb", capsys=capsys)
    assert code == 0, err
    module = whilst.runtime.load(work / "halves.vmfb")
    for b in (1, 3, 8):
        x = np.arange(2 * b, dtype=np.float32) ** 2
        np.testing.assert_array_equal(module.halves(x), x[:b] + x[b:])


def test_symbolic_ops_iree_cannot_compile_are_named_with_what_to_do(work, capsys):
    code, _, err = whilst_cli("compile", "model.py:tail", "--arg", "f32[b]", "-o", "t.vmfb",
                              capsys=capsys)
    assert code == 1
    assert "IREE 3.13 cannot compile 'stablehlo.dynamic_gather'" in err, err
    assert "static shape" in err
