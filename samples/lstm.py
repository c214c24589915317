"""LSTM over variable-length sequences: each example's loop runs while t < length[i].

    python samples/lstm.py [--small] [--figures DIR]

An LSTM cell is applied while t < length (one whilst loop per sequence, batched with
jax.vmap: every example stops at its own length, so no step is spent on padding and
no mask is needed). The task: read a sequence of numbers and output their running
sum at its end. The training step, the loss and its gradient with respect to the
weights (one forward While and one gradient While, both vmapped), is compiled by IREE
and called through whilst.runtime for every Adam step (numpy). The first loss and
gradient are checked against jax.grad of a Python-unrolled, masked LSTM (the oracle,
no whilst), and the per-example trip counts against the lengths.

The script's module holds `train_step` (loss and gradient in one call) and `predict`;
the loss and its gradient as `loss` and `loss_grad` from the command line:

    whilst compile samples/lstm.py:loss --arg 'f32[33,128]' --arg 'f32[128]' \\
        --arg 'f32[32]' --arg 'f32[64,20]' --arg 'i32[64]' --arg 'f32[64]' \\
        --grad 0,1,2 -o lstm.vmfb
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _harness import Stages, best_time, print_speed, run_main, save_figure

FIGURE = "lstm.png"


def cell(W, b, x, h, c):
    """One LSTM step on a scalar input x: gates from [x, h] @ W + b."""
    i, f, g, o = jnp.split(jnp.concatenate([x[None], h]) @ W + b, 4)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jnp.tanh(c) * jax.nn.sigmoid(o), c


def encode(W, b, xs, length):
    """Run the cell over xs[:length] (one sequence); returns (h, steps taken)."""
    hidden = b.shape[0] // 4

    def cond(t, h, c):
        return t < length

    def body(t, h, c):
        h, c = cell(W, b, xs[t], h, c)
        return t + 1, h, c

    # 16 MiB hold every step of a 64-sequence batch (about 115 kB a step): the
    # gradient replays stored steps instead of recomputing them (default: 1 MiB).
    steps, h, _ = whilst.while_loop(cond, body, [0, jnp.zeros(hidden), jnp.ones(hidden)],
                                    maximum_iterations=xs.shape[0], name="lstm",
                                    gradient_memory=16 * 2**20)
    return h, steps


def predict(W, b, w_out, xs, lengths):
    """Predictions for a batch and the steps each sequence took."""
    h, steps = jax.vmap(encode, in_axes=(None, None, 0, 0))(W, b, xs, lengths)
    return h @ w_out, steps


def loss(W, b, w_out, xs, lengths, targets):
    """Mean squared error of the predictions."""
    return jnp.mean((predict(W, b, w_out, xs, lengths)[0] - targets) ** 2)


def oracle_loss(W, b, w_out, xs, lengths, targets):
    """The same loss with the time loop unrolled in Python and padding masked."""
    h = jnp.zeros((xs.shape[0], b.shape[0] // 4))
    c = jnp.ones_like(h)
    for t in range(xs.shape[1]):
        h_next, c_next = jax.vmap(cell, in_axes=(None, None, 0, 0, 0))(W, b, xs[:, t], h, c)
        running = (t < lengths)[:, None]
        h, c = jnp.where(running, h_next, h), jnp.where(running, c_next, c)
    return jnp.mean((h @ w_out - targets) ** 2)


def batch(rng, size, max_length):
    """Random sequences, lengths in [1, max_length], targets the sums over each length."""
    xs = rng.normal(size=(size, max_length)).astype(np.float32)
    lengths = rng.integers(1, max_length + 1, size=size).astype(np.int32)
    targets = np.where(np.arange(max_length) < lengths[:, None], xs, 0).sum(axis=1)
    return xs, lengths, targets.astype(np.float32)


def init_weights(rng, hidden):
    scale = 1 / np.sqrt(hidden + 1)
    W = (scale * rng.normal(size=(hidden + 1, 4 * hidden))).astype(np.float32)
    b = np.zeros(4 * hidden, np.float32)
    b[hidden:2 * hidden] = 1.0  # forget gate open at the start
    w_out = (scale * rng.normal(size=hidden)).astype(np.float32)
    return [W, b, w_out]


def adam(train_step, weights, data, steps, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
    """Adam on numpy arrays; train_step(*weights, *batch) -> (loss, gradients);
    data(k) gives batch k. Returns the weights and the losses."""
    m = [np.zeros_like(w) for w in weights]
    v = [np.zeros_like(w) for w in weights]
    losses = []
    for k in range(1, steps + 1):
        value, grads = train_step(*weights, *data(k))
        losses.append(float(value))
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g ** 2
            weights[i] = weights[i] - lr * (m[i] / (1 - b1 ** k)) / (
                np.sqrt(v[i] / (1 - b2 ** k)) + eps)
    return weights, losses


def bench_program(hidden=32, batch_size=64, max_length=20):
    """`(fn, args)` for bench/iree_vs_jax.py: one training step's loss and gradient."""
    rng = np.random.default_rng(0)
    weights = init_weights(rng, hidden)
    return (jax.value_and_grad(loss, argnums=(0, 1, 2)),
            (*weights, *batch(rng, batch_size, max_length)))


def exported(hidden=32, batch_size=64, max_length=20):
    """`{name: (fn, export args, call args)}`: the functions `run` exports, called
    with its first batch."""
    rng = np.random.default_rng(0)
    weights = init_weights(rng, hidden)
    first_batch = batch(rng, batch_size, max_length)
    args = (*weights, *first_batch)
    return {"train_step": (jax.value_and_grad(loss, argnums=(0, 1, 2)), args, args),
            "predict": (predict, args[:-1], args[:-1])}


def run(hidden=32, batch_size=64, max_length=20, train_steps=300, figure=None):
    """Export, compile, check the first step against the oracle, then train on IREE."""
    rng = np.random.default_rng(0)
    weights = init_weights(rng, hidden)
    first_batch = batch(rng, batch_size, max_length)
    test_batch = batch(np.random.default_rng(1), batch_size, max_length)
    train_step = jax.value_and_grad(loss, argnums=(0, 1, 2))
    stages = Stages()
    with stages("trace + export to StableHLO"):
        exports = [whilst.export(fn, *args, name=name) for name, (fn, args, _)
                   in exported(hidden, batch_size, max_length).items()]
    with stages("IREE compile (llvm-cpu, host)"):
        compiled = whilst.compile(exports, target="llvm-cpu")
    with stages("load + first call on the IREE runtime"):
        module = whilst.runtime.load(compiled.data)
        first = module.train_step(*weights, *first_batch)
        _, steps = module.predict(*weights, *first_batch[:2])
    with stages("JAX oracle (Python-unrolled, masked)"):
        oracle = jax.value_and_grad(oracle_loss, argnums=(0, 1, 2))(*weights, *first_batch)
    data = lambda k: first_batch if k == 1 else batch(rng, batch_size, max_length)  # noqa: E731
    with stages(f"train: {train_steps} Adam steps on IREE"):
        trained, losses = adam(module.train_step, list(weights), data, train_steps)
    untrained, _ = module.predict(*weights, *test_batch[:2])
    predictions, _ = module.predict(*trained, *test_batch[:2])
    result = dict(steps=steps, lengths=first_batch[1], first=first,
                  oracle=jax.tree_util.tree_map(np.asarray, oracle), losses=losses,
                  test_loss_before=float(np.mean((untrained - test_batch[2]) ** 2)),
                  test_loss=float(np.mean((predictions - test_batch[2]) ** 2)))

    print(f"LSTM, hidden {hidden}, batch {batch_size}, lengths 1..{max_length}")
    print(f"  trip counts equal the lengths: {np.array_equal(steps, first_batch[1])} "
          f"(mean {steps.mean():.1f} steps of {max_length})")
    print(f"  first loss: IREE {first[0]:.5f}, oracle {result['oracle'][0]:.5f}; "
          f"gradient max |IREE - oracle| / max |oracle| = {grad_error(result):.2e}")
    print(f"  training loss: {np.mean(losses[:10]):.4f} (first 10 steps) -> "
          f"{np.mean(losses[-10:]):.4f} (last 10)")
    print(f"  held-out batch: {result['test_loss_before']:.4f} before training, "
          f"{result['test_loss']:.4f} after")
    stages.print()
    print_speed("train step (loss + gradient, vmapped loops)",
                best_time(module.train_step, *weights, *first_batch),
                best_time(jax.jit(train_step), *weights, *first_batch))
    if figure:
        plot(result, predictions, test_batch, figure)
    return result


def grad_error(result):
    return max(float(np.abs(g - o).max() / np.abs(o).max())
               for g, o in zip(result["first"][1], result["oracle"][1]))


def check(result):
    """Trip counts are the lengths; the first loss and gradient agree with the
    unrolled oracle; training lowers the loss on a held-out batch."""
    np.testing.assert_array_equal(result["steps"], result["lengths"])
    np.testing.assert_allclose(result["first"][0], result["oracle"][0], rtol=1e-4)
    assert grad_error(result) < 1e-3, grad_error(result)
    assert result["test_loss"] < result["test_loss_before"]


def plot(result, predictions, test_batch, path):
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.semilogy(result["losses"])
    left.set(xlabel="Adam step (loss and gradient on IREE)", ylabel="mean squared error",
             title="Training loss")
    _, lengths, targets = test_batch
    points = right.scatter(targets, predictions, c=lengths, s=12, cmap="viridis")
    lo, hi = targets.min(), targets.max()
    right.plot([lo, hi], [lo, hi], color="gray", lw=0.8)
    right.set(xlabel="target (sum of the sequence)", ylabel="LSTM output",
              title=f"Held-out batch, MSE {result['test_loss']:.3f}")
    fig.colorbar(points, ax=right, label="sequence length (= loop trip count)")
    save_figure(fig, path)


def main():
    run_main(__doc__, run, check, figure=FIGURE,
             small=dict(hidden=8, batch_size=8, max_length=6, train_steps=5),
             small_help="hidden 8, batch 8, lengths up to 6, 5 Adam steps")


if __name__ == "__main__":
    main()
