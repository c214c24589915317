"""One of two processes of `test_multiprocess.py`: joins `jax.distributed` on a
loopback address with 2 CPU devices of its own (the test sets
XLA_FLAGS=--xla_force_host_platform_device_count=2), and computes under `jax.jit` the
gradient of a loss over a batch sharded across the 4 devices of both, through
vmapped whilst loops (trip counts differ per example). Process 0 prints
`{"grad": [...], "loss": ...}` as one JSON line.

Usage: multiprocess_worker.py PROCESS_ID PORT
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import whilst

W = np.array([1.3, 0.7], np.float32)
XS = np.arange(16, dtype=np.float32).reshape(8, 2) / 10  # 8 examples, 1 to 7 steps each


def example_loss(w, x):
    """The loss of one example: a data-dependent loop, as in sharded_cases.py."""
    _, y = whilst.while_loop(lambda i, x: jnp.sum(x) < 10.0,
                             lambda i, x: (i + 1, x * w + 0.5), [0, x],
                             maximum_iterations=20)
    return jnp.sum(y ** 2)


def batch_loss(w, xs):
    return jnp.sum(jax.vmap(lambda x: example_loss(w, x))(xs))


def main(process_id, port):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2,
                               process_id=process_id, initialization_timeout=60)
    assert jax.device_count() == 4 and jax.local_device_count() == 2
    mesh = Mesh(np.array(jax.devices()), ("b",))
    batch = NamedSharding(mesh, P("b"))
    local = XS[4 * process_id:4 * (process_id + 1)]  # this process's half of the batch
    xs = jax.make_array_from_process_local_data(batch, local, XS.shape)
    w = jax.device_put(W, NamedSharding(mesh, P()))
    loss, grad = jax.jit(jax.value_and_grad(batch_loss), out_shardings=NamedSharding(mesh, P()))(
        w, xs)
    if process_id == 0:
        print(json.dumps({"grad": np.asarray(grad).tolist(), "loss": float(loss)}), flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
