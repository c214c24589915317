"""Test-wide settings: the compile cache lives in a temporary directory (never the
user's ~/.cache), shared by the tests of one session and their subprocesses; tests
that compile with IREE are marked `iree`, the longest ones `slow`, so that
`pytest -m "not iree"` checks the JAX side in a few minutes."""
import os

import jax.numpy as jnp
import pytest

# Files whose every test compiles or loads IREE modules; elsewhere, tests named
# for IREE (`..._iree_...`).
IREE_FILES = {"test_cli.py", "test_cli_files.py", "test_compile_cache.py",
              "test_damaged_modules.py", "test_drivers.py", "test_inputs.py", "test_iree.py",
              "test_iree_corpus.py", "test_runtime.py", "test_samples.py"}
SLOW_FILES = {"test_iree_corpus.py", "test_samples.py"}


def pytest_collection_modifyitems(items):
    for item in items:
        file = item.path.name
        if file in IREE_FILES or "iree" in item.name:
            item.add_marker(pytest.mark.iree)
        if file in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


def unrolled(cond, body, loop_vars, maximum_iterations=None):
    """The oracle shared by the tests: the loop in plain Python. numpy values give a
    numpy oracle, JAX values one that `jax.grad` differentiates as straight-line
    code (no whilst involved)."""
    i = 0
    while (maximum_iterations is None or i < maximum_iterations) and bool(cond(*loop_vars)):
        loop_vars = body(*loop_vars)
        loop_vars = list(loop_vars) if isinstance(loop_vars, (list, tuple)) else [loop_vars]
        i += 1
    return loop_vars


def nested_sin_oracle(x, outer, a=1.0):
    """The nested loops of the nested-gradient tests, unrolled in plain Python: step
    i of the outer loop runs i + 1 inner steps `y = sin(y) * a + x`."""
    for i in range(outer):
        y = x
        for _ in range(i + 1):
            y = jnp.sin(y) * a + x
        x = y * 0.9
    return x


@pytest.fixture(autouse=True, scope="session")
def compile_cache_dir(tmp_path_factory):
    os.environ["WHILST_CACHE_DIR"] = str(tmp_path_factory.mktemp("whilst-cache"))
    return os.environ["WHILST_CACHE_DIR"]

