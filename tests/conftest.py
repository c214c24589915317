"""Test-wide settings: the compile cache lives in a temporary directory (never the
user's ~/.cache), shared by the tests of one session, its pytest-xdist workers and their
subprocesses; `$WHILST_TEST_CACHE_DIR` names another (`.ci/run` gives its JAX versions
one: the same prepared module is the same compile whichever JAX traced it, see
whilst/_cache.py). Entries are written atomically, so workers share it safely.

Tests that compile with IREE are marked `iree` (the file's `pytestmark` where all of
them do, else the test's own decorator), the samples and the corpus `slow`; here, the
JAX-side tests that take 10 s or more on the 2-core machine are marked `long`, and all
others `quick`: `pytest -m quick -n 2` is the everyday loop (README, Set-up); `by_hand`
marks the tests CI leaves out. The oracles the tests share are in helpers.py."""
import gc
import os
import sys

import pytest

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
    "test_second_derivative_of_an_unbounded_loop_eagerly_and_under_jit",
    "test_third_derivative_of_an_unbounded_loop_under_jit",
    "test_second_derivative_of_a_vmapped_unbounded_loop_eagerly_and_under_jit",
    "test_checkified_second_derivative",
    # tests/clients (2026-11-27, 2 loaded cores): diffrax solves traced and jitted twice
    "test_whilst_adjoint_matches_diffrax_on_jax",
    "test_whilst_adjoint_with_checkpoints_matches_on_jax",
    "test_sharded_loops_match_the_single_device_program",
    "test_gradient_loops_hold_no_collective",
}

# Tests CI leaves out (`.ci/run` deselects `-m by_hand`; README, "Run the tests"), run by
# hand: six Runge-Kutta gradients of diffrax solves compiled into one IREE module, 8 of
# the jax 0.12 suite's 34 minutes on the 2-core machine (2026-11-27); a second reverse
# Jacobian of a loop without a bound, a minute and a half of iree-compile; a second
# derivative of a loop of 64 floats without a bound, a minute.
BY_HAND_TESTS = {
    "test_rk_gradients_of_every_policy_match_diffrax_on_jax",
    "test_a_reverse_jacobian_of_a_reverse_jacobian_runs_on_local_task",
    "test_second_derivative_of_an_unbounded_loop_of_64_floats_runs_on_iree",
}


@pytest.hookimpl(tryfirst=True)       # before -m selects by these markers
def pytest_collection_modifyitems(items):
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in LONG_TESTS:
            item.add_marker(pytest.mark.long)
        if name in BY_HAND_TESTS:
            item.add_marker(pytest.mark.by_hand)
        if not any(item.get_closest_marker(name) for name in ("iree", "slow", "long")):
            item.add_marker(pytest.mark.quick)


@pytest.hookimpl(trylast=True)   # after pytest's tmp_path_factory is made
def pytest_configure(config):
    """whilst's compile cache (IREE modules) in one directory per test session, found
    by its xdist workers and the subprocesses the tests start through the
    environment. (JAX's persistent compilation cache is left off: on for every
    program, it stored each small one that eager tests dispatch; the one suite run
    with it on took 44 minutes, most of them lost to spinning Vulkan threads, as
    every run then (bench/NOTES.md); not tried since.)"""
    where = os.environ.get("WHILST_TEST_CACHE_DIR")
    if not where:
        session = config._tmp_path_factory.getbasetemp()  # an xdist worker's: <session>/gwN
        if os.environ.get("PYTEST_XDIST_WORKER"):
            session = session.parent
        where = session / "whilst-cache"
    os.makedirs(where, exist_ok=True)
    os.environ["WHILST_CACHE_DIR"] = str(where)


@pytest.fixture(autouse=True, scope="module")
def no_vulkan_device_outlives_its_file():
    """An error at the end of a test file that leaves whilst's Vulkan device alive: on
    lavapipe it spins two threads for as long as it lives
    (iree_limits/vulkan_idle_spin.py), and the tests of the other pytest worker run
    many times slower beside it."""
    yield
    devices = sys.modules.get("whilst.runtime._devices")
    if devices is None:
        return
    gc.collect()
    if devices.current("vulkan") is not None:
        pytest.fail("a Vulkan device outlives this test file: something (a module-scoped "
                    "fixture, a global) still holds a module loaded on vulkan")
