"""whilst loops inside `jax.shard_map` (default check_vma) and `jax.pmap`, on 4 CPU
devices: forward, reverse (every gradient policy), vmapped, nested, forward mode.
The cases run in one subprocess (`sharded_cases.py`), which must set XLA_FLAGS
before jax is imported; expected values are the single-device program with the
loops unrolled in plain Python (no whilst)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import REPO

HERE = REPO / "tests" / "sharding"


@pytest.fixture(scope="module")
def results():
    try:
        run = subprocess.run([sys.executable, str(HERE / "sharded_cases.py")],
                             capture_output=True, text=True, timeout=900, cwd=REPO)
    except subprocess.TimeoutExpired as e:  # a collective no device joins waits forever
        pytest.fail(f"the sharded cases did not finish in {e.timeout} s (a deadlock?)")
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


CASES = ["grad_stored", "grad_stored_vmap", "grad_budget_chunks_vmap",
         "grad_checkpoints_vmap", "grad_unbounded_default", "grad_nested",
         "grad_inlined_vmap", "forward_vmap", "jvp_vmap", "pmap_grad"]


@pytest.mark.parametrize("case", CASES)
def test_sharded_loops_match_the_single_device_program(results, case):
    got, expected = results[case]
    np.testing.assert_allclose(got, expected, rtol=2e-5)


def test_gradient_loops_hold_no_collective(results):
    # A psum inside a gradient While runs once per step; devices whose loops take
    # different trip counts then wait for each other forever.
    assert results["psums_in_loops"] == 0
