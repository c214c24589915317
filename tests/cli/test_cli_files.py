"""The `whilst` command never overwrites, follows a link, or writes outside the place
it was told, and its input errors are one line. Real compiles and runs."""
import os
import textwrap

import numpy as np
import pytest

from whilst.cli import main

pytestmark = pytest.mark.iree


MODEL = textwrap.dedent('''
    import jax.numpy as jnp
    import whilst


    def halve(x, n):
        return whilst.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, x * 0.5), [0, x])


    def total(x):
        return jnp.sum(x)


    globals()["../../escape"] = total
''')


@pytest.fixture
def work(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def whilst(*argv, capsys):
    code = main(list(argv))
    out, err = capsys.readouterr()
    if code:
        assert err.startswith(f"whilst {argv[0]}: error: ") and "Traceback" not in err, err
        assert len(err.splitlines()) <= 2, err
    return code, out, err


COMPILE = ("compile", "model.py:halve", "--arg", "f32[3]", "--arg", "i32[]")


@pytest.fixture(scope="module")
def vmfb(tmp_path_factory):
    d = tmp_path_factory.mktemp("compiled")
    (d / "model.py").write_text(MODEL)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        assert main([*COMPILE, "-o", "halve.vmfb"]) == 0
    finally:
        os.chdir(cwd)
    return (d / "halve.vmfb").read_bytes()


def test_compile_never_replaces_the_source_or_an_existing_module(work, capsys):
    source = (work / "model.py").read_text()
    code, _, err = whilst(*COMPILE, "-o", "model.py", capsys=capsys)
    assert code == 1 and "is the source file of model.py:halve" in err
    code, _, err = whilst(*COMPILE, "-o", "model.py", "--force", capsys=capsys)
    assert code == 1 and "is the source file of model.py:halve" in err
    assert (work / "model.py").read_text() == source
    (work / "old.vmfb").write_bytes(b"keep me")
    code, _, err = whilst(*COMPILE, "-o", "old.vmfb", capsys=capsys)
    assert code == 1 and (work / "old.vmfb").read_bytes() == b"keep me"


def test_function_names_that_are_not_identifiers_are_refused(work, capsys):
    code, _, err = whilst("compile", "model.py:../../escape", "--arg", "f32[3]",
                          "--emit-mlir", "mlir", "-o", "e.vmfb", capsys=capsys)
    assert code == 1 and "'../../escape' is not a Python identifier" in err
    assert not (work / "mlir").exists() and not (work.parent / "escape.stablehlo.mlir").exists()


def test_emit_mlir_refuses_existing_files_and_files_as_directories(work, capsys):
    (work / "mlir").mkdir()
    (work / "mlir" / "module.mlir").write_text("mine")
    code, _, err = whilst(*COMPILE, "--emit-mlir", "mlir", "-o", "h.vmfb", capsys=capsys)
    assert code == 1 and "module.mlir' exists; pass --force" in err
    assert (work / "mlir" / "module.mlir").read_text() == "mine" and not (work / "h.vmfb").exists()
    code, _, err = whilst(*COMPILE, "--emit-mlir", "model.py", "-o", "h.vmfb", capsys=capsys)
    assert code == 1 and "--emit-mlir 'model.py' is a file, not a directory" in err


def test_unwritable_output_is_one_line(work, capsys):
    code, _, err = whilst(*COMPILE, "-o", "no-such-dir/h.vmfb", capsys=capsys)
    assert code == 1 and ("-o: cannot write 'no-such-dir/h.vmfb': the directory "
                          "'no-such-dir' does not exist" in err)


def test_run_output_refuses_existing_outputs_and_follows_no_links(work, vmfb, capsys):
    (work / "h.vmfb").write_bytes(vmfb)
    np.save(work / "x.npy", np.array([1.0, 2.0, 4.0], np.float32))
    np.save(work / "n.npy", np.array(2, np.int32))
    run = ("run", "h.vmfb", "--input", "x.npy", "--input", "n.npy", "--output", "out")
    (work / "out").mkdir()
    (work / "victim.txt").write_text("precious")
    os.symlink(work / "victim.txt", work / "out" / "output_0.npy")
    code, _, err = whilst(*run, capsys=capsys)
    assert code == 1 and "already holds output_0.npy; pass --force" in err
    np.save(work / "out" / "output_7.npy", np.zeros(1))        # stale, from a bigger run
    assert whilst(*run, "--force", capsys=capsys)[0] == 0
    assert (work / "victim.txt").read_text() == "precious"      # the link was replaced
    assert not os.path.islink(work / "out" / "output_0.npy")
    assert sorted(os.listdir(work / "out")) == ["output_0.npy", "output_1.npy"]
    assert int(np.load(work / "out" / "output_0.npy")) == 2
    np.testing.assert_array_equal(np.load(work / "out" / "output_1.npy"), [0.25, 0.5, 1.0])
    code, _, err = whilst("run", "h.vmfb", "--input", "x.npy", "--input", "n.npy",
                          "--output", "x.npy", capsys=capsys)
    assert code == 1 and "--output 'x.npy' is a file, not a directory" in err


def _npy_header_claiming(path, shape):
    """A .npy file whose header claims `shape` (float32) but holds 8 bytes of data."""
    header = {"descr": "<f4", "fortran_order": False, "shape": shape}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\0" * 8)


@pytest.mark.parametrize("make, message", [
    (lambda p: _npy_header_claiming(p, (10**6, 10**6)),
     "its header says float32[1000000, 1000000] (4000000000000 bytes), but the file holds 8"),
    (lambda p: np.savez(open(p, "wb"), a=np.ones(3)), "is an .npz archive"),
    (lambda p: p.write_text("1 2 3\n"), "not a .npy file (no NumPy header)"),
    (lambda p: np.save(p, np.array(["a", "b"])), "holds <U1 data, not numbers"),
    (lambda p: np.save(p, np.array(2.5)), "float64 -> float32 can lose values"),
])
def test_bad_input_files_are_one_line(work, vmfb, capsys, make, message):
    (work / "h.vmfb").write_bytes(vmfb)
    make(work / "x.npy")
    np.save(work / "n.npy", np.array(2, np.int32))
    code, _, err = whilst("run", "h.vmfb", "--input", "x.npy", "--input", "n.npy",
                          capsys=capsys)
    assert code == 1 and message in err, err


def test_ir_graph_is_not_overwritten(work, capsys):
    (work / "loops.svg").write_text("mine")
    code, _, err = whilst("ir", "model.py:halve", "--arg", "f32[3]", "--arg", "i32[]",
                          "--graph", "loops.svg", capsys=capsys)
    assert code == 1 and "--graph: 'loops.svg' exists" in err
    assert (work / "loops.svg").read_text() == "mine"


def test_model_file_named_like_an_installed_module(work, capsys):
    (work / "numpy.py").write_text(MODEL)
    code, _, err = whilst("compile", "numpy.py:halve", "--arg", "f32[3]", "--arg", "i32[]",
                          "-o", "n.vmfb", capsys=capsys)
    assert code == 1 and "has the name of the module 'numpy'" in err


def test_second_compile_hits_the_cache_unless_told_not_to(work, capsys):
    code, out, _ = whilst(*COMPILE, "-o", "a.vmfb", capsys=capsys)
    assert code == 0
    code, out, _ = whilst(*COMPILE, "-o", "b.vmfb", capsys=capsys)
    assert code == 0 and "compile cache hit for llvm-cpu (host)" in out
    assert (work / "a.vmfb").read_bytes() == (work / "b.vmfb").read_bytes()
    code, out, _ = whilst(*COMPILE, "-o", "c.vmfb", "--no-cache", capsys=capsys)
    assert code == 0 and "iree-compile for llvm-cpu (host)" in out and "cache hit" not in out


def test_version(capsys):
    import importlib.metadata

    import whilst as package

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"whilst {importlib.metadata.version('whilst')}"
    assert package.__version__ == importlib.metadata.version("whilst")
