"""Two processes on this machine (`jax.distributed` on a loopback address, gloo CPU
collectives), 2 CPU devices each: a data-parallel gradient through vmapped whilst
loops under `jax.jit`, the batch sharded over all 4 devices, equals the one-process
result and the gradient of the loops unrolled in plain Python."""
import json
import os
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import REPO
from multiprocess_worker import W, XS, batch_loss

WORKER = REPO / "tests" / "sharding" / "multiprocess_worker.py"
TIMEOUT_S = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_processes():
    """Process 0's JSON line; both processes are killed on any failure or timeout."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(k), str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in (0, 1)]
    try:
        outs = [p.communicate(timeout=TIMEOUT_S) for p in procs]
    except subprocess.TimeoutExpired:
        pytest.fail(f"the two processes did not finish in {TIMEOUT_S} s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    return json.loads(outs[0][0].strip().splitlines()[-1])


def python_loss(w, xs):
    """The oracle: each example's loop in plain Python, its trip count taken at W."""
    total = 0.0
    for x in xs:
        steps, y = 0, x
        while np.sum(y) < 10.0:
            steps, y = steps + 1, y * W + np.float32(0.5)
        for _ in range(steps):
            x = x * w + 0.5
        total = total + jnp.sum(x ** 2)
    return total


def test_data_parallel_gradient_across_two_processes_equals_one_process():
    got = run_two_processes()
    loss, grad = jax.jit(jax.value_and_grad(batch_loss))(W, XS)
    np.testing.assert_allclose(got["grad"], grad, rtol=2e-5)
    np.testing.assert_allclose(got["loss"], loss, rtol=2e-6)
    np.testing.assert_allclose(grad, jax.grad(python_loss)(W, XS), rtol=2e-5)
