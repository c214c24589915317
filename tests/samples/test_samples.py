"""The samples at a small size: each runs end to end (export, IREE compile, run on the
embedded runtime) and its `check` compares the IREE results with an oracle that does
not use whilst."""
import pytest

# samples/ (on the tests' pythonpath, pyproject.toml)
import cg
import lstm
import newton
import ode_fit
import seq2seq_decode

pytestmark = [pytest.mark.iree, pytest.mark.slow]


def test_ode_fit_module_is_the_same_text_each_time_its_loops_move():
    """`source_for` (the loops moved into dispatches, and the copies host loops read,
    `_host_loop_inits_copied`) gives one text for one module: copies made in a set's
    order gave three texts in four calls, one of which failed on every call."""
    import whilst
    from whilst.lowering import flag_sets, prepare, source_for

    exports = [whilst.export(fn, *args, name=name)
               for name, (fn, args, _) in ode_fit.exported(5).items()]
    text = prepare(exports)
    flags = flag_sets(["llvm-cpu"])[0]
    assert len({source_for(text, flags, {}) for _ in range(4)}) == 1


def test_cg_solution_and_gradient_match_linalg_solve():
    cg.check(cg.run(n=16))


def test_newton_root_and_its_derivative_match_implicit_function_theorem():
    newton.check(newton.run(n=8))


def test_ode_fit_first_gradient_matches_jax_and_fixed_step_count_oracle():
    ode_fit.check(ode_fit.run(n_obs=5, train_steps=5))


def test_lstm_trip_counts_are_lengths_and_first_gradient_matches_unrolled_oracle():
    lstm.check(lstm.run(hidden=8, batch_size=8, max_length=6, train_steps=5))


def test_seq2seq_decoding_matches_numpy_decoder_and_loss_gradient_matches_unrolled_oracle():
    seq2seq_decode.check(seq2seq_decode.run(hidden=8, batch_size=8, train_steps=5))
