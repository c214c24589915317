"""Sequence-to-sequence greedy decoding into TensorArrays, until every sequence has ended.

    python samples/seq2seq_decode.py [--small] [--figures DIR]

A small recurrent decoder learns to count down: given n (1..10), it emits the tokens
of n, n - 1, ..., 1 and then the end token. Greedy decoding of a batch is one whilst
loop that runs until every sequence has produced its end token (at most
`MAX_STEPS`), writing each step's tokens and logits into `whilst.TensorArray`s
(TensorFlow's `dynamic_decode` pattern); a sequence that has ended keeps emitting
the end token. Training uses teacher forcing: a second loop feeds the target tokens
and writes the logits of each step into a TensorArray, for as many steps as the
longest target of the batch; the loss is their masked cross-entropy. The loss and
its gradient (a forward and a gradient While) and the decoder are compiled by IREE
and called through whilst.runtime for every Adam step (numpy). Decoding is checked
against a plain-Python (numpy) decoder, the first loss and gradient against
`jax.grad` of the same loss with its loop unrolled in Python into a preallocated
array.

The script's module holds `train_step` (loss and gradient in one call) and `decode`;
from the command line (the 7 weight arrays, then the sources):

    whilst compile samples/seq2seq_decode.py:decode --arg 'f32[12,32]' \\
        --arg 'f32[12,16]' --arg 'f32[32,32]' --arg 'f32[16,32]' --arg 'f32[32]' \\
        --arg 'f32[32,12]' --arg 'f32[12]' --arg 'i32[32]' -o decode.vmfb
"""
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _harness import Stages, best_time, print_speed, run_main, save_figure
from lstm import adam  # the same Adam as the LSTM sample

FIGURE = "seq2seq_decode.png"
START, END = 0, 1          # tokens 2..VOCAB-1 stand for the numbers 1..VOCAB-2
VOCAB = 12
MAX_N = VOCAB - 2
TARGET_STEPS = MAX_N + 1   # n, n - 1, ..., 1, end
MAX_STEPS = TARGET_STEPS + 4


def init_weights(rng, hidden=32, embedding=16):
    """[source embedding, token embedding, W_h, W_x, b, W_out, b_out]."""
    def normal(*shape, scale):
        return (scale * rng.normal(size=shape)).astype(np.float32)
    return [normal(VOCAB, hidden, scale=1.0), normal(VOCAB, embedding, scale=1.0),
            normal(hidden, hidden, scale=0.5 / np.sqrt(hidden)),
            normal(embedding, hidden, scale=1 / np.sqrt(embedding)),
            np.zeros(hidden, np.float32), normal(hidden, VOCAB, scale=1 / np.sqrt(hidden)),
            np.zeros(VOCAB, np.float32)]


def step(weights, h, previous):
    """One decoder step for a batch: the new state and the next token's logits."""
    _, embed, W_h, W_x, b, W_out, b_out = weights
    h = jnp.tanh(h @ W_h + embed[previous] @ W_x + b)
    return h, h @ W_out + b_out


def decode(source_embed, embed, W_h, W_x, b, W_out, b_out, source):
    """Greedy decoding of a batch of sources until each has emitted END: the tokens
    [batch, MAX_STEPS] (END after a sequence's end, and in rows never run), the
    logits [batch, MAX_STEPS, VOCAB] (zero in steps never run) and the steps run."""
    weights = (source_embed, embed, W_h, W_x, b, W_out, b_out)
    batch = source.shape[0]
    tokens = whilst.TensorArray(jnp.int32, size=0, dynamic_size=True, element_shape=(batch,))
    logits = whilst.TensorArray(jnp.float32, size=0, dynamic_size=True,
                                element_shape=(batch, VOCAB))

    def not_all_done(t, h, previous, done, tokens, logits):
        return ~jnp.all(done)

    def body(t, h, previous, done, tokens, logits):
        h, logit = step(weights, h, previous)
        token = jnp.where(done, END, jnp.argmax(logit, axis=-1).astype(jnp.int32))
        return (t + 1, h, token, done | (token == END), tokens.write(t, token),
                logits.write(t, logit))

    h0 = jnp.tanh(source_embed[source])
    steps, _, _, _, tokens, logits = whilst.while_loop(
        not_all_done, body,
        [0, h0, jnp.full(batch, START, jnp.int32), jnp.zeros(batch, bool), tokens, logits],
        maximum_iterations=MAX_STEPS, name="decode")
    # tokens.stack() has MAX_STEPS rows; those past `steps` were never written (zeros).
    written = jnp.arange(MAX_STEPS)[:, None] < tokens.size()
    return (jnp.where(written, tokens.stack(), END).T, logits.stack().transpose(1, 0, 2),
            steps)


def loss(source_embed, embed, W_h, W_x, b, W_out, b_out, source, targets, lengths):
    """Teacher forcing: the masked mean cross-entropy of the targets' tokens, the
    decoder fed the target tokens, for as many steps as the longest target."""
    weights = (source_embed, embed, W_h, W_x, b, W_out, b_out)
    batch = source.shape[0]
    inputs = teacher_inputs(targets)
    logits = whilst.TensorArray(jnp.float32, size=TARGET_STEPS,
                                element_shape=(batch, VOCAB))

    def body(t, h, logits):
        h, logit = step(weights, h, inputs[:, t])
        return t + 1, h, logits.write(t, logit)
    _, _, logits = whilst.while_loop(lambda t, h, logits: t < jnp.max(lengths), body,
                                     [0, jnp.tanh(source_embed[source]), logits],
                                     maximum_iterations=TARGET_STEPS, name="teacher_forcing")
    return masked_cross_entropy(logits.stack(), targets, lengths)


def teacher_inputs(targets):
    """The decoder's input tokens under teacher forcing: START, then the targets."""
    start = jnp.full((targets.shape[0], 1), START, jnp.int32)
    return jnp.concatenate([start, targets[:, :-1]], axis=1)


def masked_cross_entropy(logits, targets, lengths):
    """logits [steps, batch, VOCAB]; targets [batch, steps]; steps past a target's
    length do not count."""
    log_p = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_p, targets.T[:, :, None], axis=-1)[:, :, 0]
    mask = jnp.arange(logits.shape[0])[:, None] < lengths
    return -jnp.sum(jnp.where(mask, picked, 0.0)) / jnp.sum(mask)


def oracle_loss(*weights_and_batch):
    """`loss` with its loop unrolled in Python into a preallocated array (no whilst)."""
    *weights, source, targets, lengths = weights_and_batch
    batch = source.shape[0]
    h = jnp.tanh(weights[0][source])
    inputs, logits = teacher_inputs(targets), jnp.zeros((TARGET_STEPS, batch, VOCAB))
    for t in range(int(np.max(lengths))):
        h, logit = step(weights, h, inputs[:, t])
        logits = logits.at[t].set(logit)
    return masked_cross_entropy(logits, targets, lengths)


def oracle_decode(weights, source):
    """`decode` in plain Python and numpy, one step at a time."""
    source_embed, embed, W_h, W_x, b, W_out, b_out = weights
    batch = source.shape[0]
    h = np.tanh(source_embed[source])
    previous, done = np.full(batch, START), np.zeros(batch, bool)
    tokens, logits = [], []
    while len(tokens) < MAX_STEPS and not done.all():
        h = np.tanh(h @ W_h + embed[previous] @ W_x + b)
        logit = h @ W_out + b_out
        previous = np.where(done, END, logit.argmax(axis=-1))
        done |= previous == END
        tokens.append(previous)
        logits.append(logit)
    steps = len(tokens)
    tokens = np.concatenate([np.array(tokens).T, np.full((batch, MAX_STEPS - steps), END)], 1)
    logits = np.concatenate([np.array(logits).transpose(1, 0, 2),
                             np.zeros((batch, MAX_STEPS - steps, VOCAB), np.float32)], 1)
    return tokens, logits, steps


def batch(rng, size):
    """Random sources n in 1..MAX_N, their count-down targets (padded with END) and
    target lengths n + 1."""
    n = rng.integers(1, MAX_N + 1, size=size)
    source = (n + 1).astype(np.int32)
    targets = np.maximum(source[:, None] - np.arange(TARGET_STEPS), END).astype(np.int32)
    return source, targets, (n + 1).astype(np.int32)


def exported(hidden=32, batch_size=32):
    """`{name: (fn, export args, call args)}`: the functions `run` exports, called
    with its first batch."""
    weights = init_weights(np.random.default_rng(0), hidden)
    first = batch(np.random.default_rng(1), batch_size)
    grad_args = tuple(range(len(weights)))
    return {"train_step": (jax.value_and_grad(loss, argnums=grad_args), (*weights, *first),
                           (*weights, *first)),
            "decode": (decode, (*weights, first[0]), (*weights, first[0]))}


def run(hidden=32, batch_size=32, train_steps=300, figure=None):
    """Export, compile, check decoding and the first gradient against the oracles,
    then train on IREE and decode a held-out batch."""
    weights = init_weights(np.random.default_rng(0), hidden)
    rng = np.random.default_rng(1)
    first = batch(rng, batch_size)
    held_out = batch(np.random.default_rng(2), batch_size)
    stages = Stages()
    with stages("trace + export to StableHLO"):
        exports = [whilst.export(fn, *args, name=name)
                   for name, (fn, args, _) in exported(hidden, batch_size).items()]
    with stages("IREE compile (llvm-cpu, host)"):
        compiled = whilst.compile(exports, target="llvm-cpu")
    with stages("load + first calls on the IREE runtime"):
        module = whilst.runtime.load(compiled.data)
        first_step = module.train_step(*weights, *first)
        untrained = module.decode(*weights, held_out[0])
    grad_args = tuple(range(len(weights)))
    with stages("oracles (numpy decoder, Python-unrolled loss)"):
        oracle_step = jax.tree_util.tree_map(np.asarray, jax.value_and_grad(
            oracle_loss, argnums=grad_args)(*weights, *first))
        untrained_oracle = oracle_decode(weights, held_out[0])
    data = lambda k: first if k == 1 else batch(rng, batch_size)  # noqa: E731
    with stages(f"train: {train_steps} Adam steps on IREE"):
        trained, losses = adam(module.train_step, list(weights), data, train_steps, lr=0.02)
    decoded = module.decode(*trained, held_out[0])
    result = dict(first=first_step, oracle=oracle_step, losses=losses, held_out=held_out,
                  untrained=untrained, untrained_oracle=untrained_oracle, decoded=decoded,
                  decoded_oracle=oracle_decode(trained, held_out[0]),
                  accuracy=float(np.mean(np.all(decoded[0][:, :TARGET_STEPS] == held_out[1],
                                                axis=1))))

    print(f"seq2seq count-down, hidden {hidden}, batch {batch_size}, targets of 2..{TARGET_STEPS} "
          f"tokens")
    print(f"  first loss: IREE {first_step[0]:.5f}, oracle {oracle_step[0]:.5f}; gradient "
          f"max |IREE - oracle| / max |oracle| = {grad_error(result):.2e}")
    for label, (tokens, _, steps), (want, _, want_steps) in (
            ("untrained", untrained, untrained_oracle),
            ("trained", decoded, result["decoded_oracle"])):
        print(f"  decode ({label}): {int(steps)} steps (numpy decoder {want_steps}), tokens equal "
              f"the numpy decoder's: {np.array_equal(tokens, want)}")
    print(f"  training loss: {np.mean(losses[:10]):.4f} (first 10 steps) -> "
          f"{np.mean(losses[-10:]):.4f} (last 10); held-out sequences decoded exactly: "
          f"{result['accuracy']:.0%}")
    stages.print()
    print_speed("decode (one whilst loop, two TensorArrays)",
                best_time(module.decode, *trained, held_out[0]),
                best_time(jax.jit(decode), *trained, held_out[0]))
    if figure:
        plot(result, figure)
    return result


def grad_error(result):
    return max(float(np.abs(g - o).max() / np.abs(o).max())
               for g, o in zip(result["first"][1], result["oracle"][1]))


def check(result):
    """Decoding on IREE gives the numpy decoder's tokens, logits and step count,
    before and after training; the first loss and gradient agree with jax.grad of
    the unrolled loss; training lowers the loss."""
    for got, want in ((result["untrained"], result["untrained_oracle"]),
                      (result["decoded"], result["decoded_oracle"])):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-4, atol=1e-4)
        assert int(got[2]) == want[2]
    np.testing.assert_allclose(result["first"][0], result["oracle"][0], rtol=1e-5)
    assert grad_error(result) < 1e-4, grad_error(result)
    assert np.mean(result["losses"][-3:]) < np.mean(result["losses"][:3])


def plot(result, path):
    import matplotlib.pyplot as plt
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4))
    left.semilogy(result["losses"])
    left.set(xlabel="Adam step (loss and gradient on IREE)", ylabel="cross-entropy",
             title="Teacher-forcing loss")
    order = np.argsort(result["held_out"][0])
    for axis, (tokens, _, steps), title in (
            (middle, result["untrained"], "before training"),
            (right, result["decoded"], "after training")):
        shown = np.where(tokens == END, np.nan, tokens - 1.0)[order]
        image = axis.imshow(shown, aspect="auto", cmap="viridis", vmin=1, vmax=MAX_N,
                            interpolation="nearest")
        axis.axvline(int(steps) - 0.5, color="red", lw=1)
        axis.set(xlabel="decoding step (red: the loop stopped)", ylabel="sequence (by n)",
                 title=f"Greedy decode {title}: {int(steps)} steps")
    fig.colorbar(image, ax=right, label="number emitted (blank: end token)")
    save_figure(fig, path)


def main():
    run_main(__doc__, run, check, figure=FIGURE, small=dict(hidden=8, batch_size=8, train_steps=5),
             small_help="hidden 8, batch 8, 5 Adam steps")


if __name__ == "__main__":
    main()
