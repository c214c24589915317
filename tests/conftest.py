"""Test-wide settings: the compile cache lives in a temporary directory (never the
user's ~/.cache), shared by the tests of one session and their subprocesses; tests
that compile with IREE are marked `iree`, the samples and the corpus `slow`, the
JAX-side tests that take 10 s or more on the 2-core machine `long`, and all others
`quick`: `pytest -m quick -n 2` is the everyday loop (README, Set-up)."""
import os

import jax.numpy as jnp
import pytest

# Files whose every test compiles or loads IREE modules; elsewhere, tests named
# for IREE (`..._iree_...`).
IREE_FILES = {"test_cli.py", "test_cli_files.py", "test_compile_cache.py",
              "test_damaged_modules.py", "test_inputs.py", "test_iree.py",
              "test_iree_corpus.py", "test_runtime.py", "test_samples.py"}
SLOW_FILES = {"test_iree_corpus.py", "test_samples.py"}
# JAX-side tests (every parametrization) that took 10 s or more in one of two runs on
# the 2-core machine loaded by other jobs (pytest -n 2 --durations, 2026-11-27):
# unbounded, checkpointed and nested reverse mode, mostly.
LONG_TESTS = {
    "test_checkpoint_of_a_function_that_differentiates_a_loop",
    "test_data_dependent_stop_with_and_without_maximum_iterations",
    "test_fori_loop_traced_bounds_differentiate",
    "test_gradient_of_vmapped_loop_at_each_batch_size",
    "test_gradient_of_vmapped_pytree_loop_at_each_batch_size",
    "test_gradient_through_a_key_carrying_loop_matches_jax_grad_of_the_python_loop",
    "test_grad_of_grad_across_the_switch",
    "test_jit_vmap_per_example_trip_counts_and_switch",
    "test_stablehlo_holds_two_whiles_per_derivative_order",
    "test_unbounded_loop_under_checkpoint_as_without_it",
    "test_nested_loops_and_grad_of_grad_read_written_rows_only",
    "test_no_row_is_read_before_it_is_written",
    "test_unbounded_loop_differentiates_with_no_extra_argument",
    "test_vmap_per_example_trip_counts_read_written_rows_only",
    "test_forward_mode_and_second_order",
    "test_stacks_and_slots_are_left_unwritten_by_one_op_under_jit_and_empty_in_exports",
    "test_rows_at_carried_positions_read_nothing_back_and_match_python",
}


@pytest.hookimpl(tryfirst=True)       # before -m selects by these markers
def pytest_collection_modifyitems(items):
    for item in items:
        file = item.path.name
        if file in IREE_FILES or "iree" in item.name:
            item.add_marker(pytest.mark.iree)
        if file in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
        if getattr(item, "originalname", item.name) in LONG_TESTS:
            item.add_marker(pytest.mark.long)
        if not any(item.get_closest_marker(name) for name in ("iree", "slow", "long")):
            item.add_marker(pytest.mark.quick)


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

