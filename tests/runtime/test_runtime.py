"""The embedded runtime: input validation, drivers, threads, memory, damaged
modules, and running with no JAX installed. Real modules, real IREE runtime."""
import concurrent.futures
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import whilst
from helpers import REPO, no_device, vulkan_or_skip
from whilst.runtime import LoadError, describe, load

pytestmark = pytest.mark.iree


def scan(x, state):
    """Repeat state <- 0.5 * state + x.sum(0) while state.sum() < 10, at most 50 times;
    returns a dict and a tuple to exercise pytrees."""
    def body(i, s):
        return i + 1, 0.5 * s + jnp.sum(x, axis=0)

    steps, s = whilst.while_loop(lambda i, s: jnp.sum(s) < 10.0, body, [0, state["s"]],
                                 maximum_iterations=50)
    return {"steps": steps, "s": s}, (s * 2.0,)


def reference_scan(x, s):
    i = 0
    while s.sum() < 10.0 and i < 50:
        s, i = 0.5 * s + x.sum(0), i + 1
    return i, s


@pytest.fixture(scope="module")
def compiled():
    spec = (jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 3"), np.float32),
            {"s": jax.ShapeDtypeStruct((3,), np.float32)})
    return whilst.compile(whilst.export(scan, *spec, name="scan"))


@pytest.fixture(scope="module")
def module(compiled):
    return load(compiled.data)


def test_calls_return_the_pytrees_and_match_python(module):
    x = np.linspace(0.01, 0.2, 12, dtype=np.float32).reshape(4, 3)
    out, (twice,) = module.scan(x, {"s": np.zeros(3, np.float32)})
    steps, s = reference_scan(x, np.zeros(3, np.float32))
    assert int(out["steps"]) == steps
    np.testing.assert_allclose(out["s"], s, rtol=1e-5)
    np.testing.assert_allclose(twice, 2 * s, rtol=1e-5)


@pytest.mark.parametrize("args, message", [
    ((np.zeros((4, 3), np.float32),), "expected a tuple of 2 entries, found a tuple of 1"),
    ((np.zeros((4, 3), np.float32), {"t": np.zeros(3, np.float32)}),
     "args[1]: expected a dict with keys ['s'], found ['t']"),
    ((np.zeros((4, 2), np.float32), {"s": np.zeros(3, np.float32)}),
     "args[0] has shape (4, 2), but the module expects f32[b,3] (axis 1 must be 3)"),
    ((np.zeros((4, 3), np.float64), {"s": np.zeros(3, np.float32)}),
     "args[0] has dtype float64, but the module expects f32[b,3]; float64 -> float32 can "
     "lose values"),
    ((np.zeros((0, 3), np.float32), {"s": np.zeros(3, np.float32)}),
     "symbolic dimension 'b' must be at least 1"),
    ((np.zeros(3, np.float32), {"s": np.zeros(3, np.float32)}),
     "args[0] has shape (3,), but the module expects f32[b,3] (rank 2)"),
])
def test_inputs_are_validated_before_the_call(module, args, message):
    with pytest.raises(ValueError) as e:
        module.scan(*args)
    assert message in str(e.value)


def test_symbolic_dims_bind_consistently():
    def f(x, y):
        return whilst.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a + y), [0, x])[1]

    b = jax.export.symbolic_shape("b")
    spec = [jax.ShapeDtypeStruct(b, np.float32)] * 2
    m = whilst.compile(f, *spec).load()
    np.testing.assert_allclose(m(np.ones(5, np.float32), np.ones(5, np.float32)), 4.0)
    with pytest.raises(ValueError, match=r"args\[1\] axis 0 is 4, but symbolic dimension 'b' "
                                         r"was bound to 5 by args\[0\]"):
        m(np.ones(5, np.float32), np.ones(4, np.float32))


def test_targets_are_in_the_metadata(compiled):
    info = describe(compiled.data)
    assert info.targets == [{"name": "llvm-cpu", "arch": "host",
                             "drivers": ["local-sync", "local-task"]}]
    assert list(info.functions) == ["scan"] and info.sealed


def test_local_task_driver_gives_the_same_results(compiled, module):
    x = np.full((2, 3), 0.3, np.float32)
    s = {"s": np.zeros(3, np.float32)}
    a = load(compiled.data, driver="local-task").scan(x, s)
    b = module.scan(x, s)
    np.testing.assert_array_equal(a[0]["s"], b[0]["s"])


def test_driver_that_does_not_match_the_targets_lists_both(compiled):
    with pytest.raises(LoadError) as e:
        load(compiled.data, driver="cuda")
    msg = str(e.value)
    assert "compiled for llvm-cpu (host) -> driver local-sync or local-task" in msg
    assert "cannot run with driver 'cuda'" in msg and "driver='local-sync'" in msg


def test_driver_without_a_device_lists_the_drivers():
    data = whilst.compile(lambda x: x * 2.0, np.zeros(2, np.float32),
                          target=["vulkan-spirv", "llvm-cpu"]).data
    if no_device("vulkan"):
        with pytest.raises(LoadError) as e:
            load(data, driver="vulkan")
        assert "found no usable device" in str(e.value)
        assert "vulkan-spirv -> driver vulkan" in str(e.value)
        assert "'local-sync'" in str(e.value)
    np.testing.assert_array_equal(load(data)(np.ones(2, np.float32)), 2.0)


def test_unknown_driver_is_refused(compiled):
    with pytest.raises(ValueError, match="driver must be one of"):
        load(compiled.data, driver="tpu")


def test_results_left_on_the_device_feed_later_calls(module):
    """`on_device` gives DeviceArrays, which a later call takes as inputs (also
    inside pytrees) and `np.asarray` copies back: the same numbers as numpy calls."""
    x = np.linspace(0.01, 0.2, 12, dtype=np.float32).reshape(4, 3)
    s0 = np.zeros(3, np.float32)
    out, (twice,) = module.scan.on_device(x, {"s": s0})
    assert isinstance(out["s"], whilst.runtime.DeviceArray)
    assert out["s"].shape == (3,) and out["s"].dtype == np.float32
    steps, s = reference_scan(x, s0)
    assert int(np.asarray(out["steps"])) == steps
    np.testing.assert_allclose(np.asarray(out["s"]), s, rtol=1e-5)
    again, _ = module.scan(module.to_device(x), {"s": out["s"]})
    want_steps, want = reference_scan(x, s)
    assert int(again["steps"]) == want_steps
    np.testing.assert_allclose(again["s"], want, rtol=1e-5)
    np.testing.assert_allclose(twice.to_host(), 2 * s, rtol=1e-5)


def test_device_arrays_of_the_wrong_dtype_or_device_are_refused(compiled, module):
    x = np.full((2, 3), 0.1, np.float32)
    with pytest.raises(ValueError, match=r"args\[0\] is a DeviceArray of dtype float64, but "
                                         r"the module expects f32\[b,3\]"):
        module.scan(module.to_device(x.astype(np.float64)), {"s": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"args\[0\] has shape \(2, 4\)"):
        module.scan(module.to_device(np.zeros((2, 4), np.float32)),
                    {"s": np.zeros(3, np.float32)})
    other = load(compiled.data, driver="local-task")
    with pytest.raises(ValueError, match="DeviceArray on another device than this module's "
                                         "\\('local-sync'\\)"):
        module.scan(other.to_device(x), {"s": np.zeros(3, np.float32)})


def test_results_outlive_the_call_and_later_calls(module):
    """Results are the caller's arrays: later calls (which reuse device buffers)
    leave them as they were."""
    s = {"s": np.zeros(3, np.float32)}
    first = [module.scan(np.full((2, 3), 0.01 * (k + 1), np.float32), s) for k in range(20)]
    for k, (out, (twice,)) in enumerate(first):
        steps, want = reference_scan(np.full((2, 3), 0.01 * (k + 1), np.float32),
                                     np.zeros(3, np.float32))
        assert int(out["steps"]) == steps
        np.testing.assert_allclose(out["s"], want, rtol=1e-5)
        np.testing.assert_allclose(twice, 2 * want, rtol=1e-5)


def vulkan_loss(x, w):
    steps, y = whilst.while_loop(lambda i, y: jnp.sum(y) < 4.0,
                                 lambda i, y: (i + 1, jnp.tanh(w * y) + 0.5), [0, x],
                                 maximum_iterations=20)
    return jnp.sum(y ** 2), steps


VULKAN_ARGS = (np.linspace(0.1, 0.4, 4, dtype=np.float32), np.float32(0.7))


@pytest.fixture(scope="module")
def cpu_and_vulkan():
    """A loop's value and gradient compiled for llvm-cpu and vulkan-spirv."""
    vulkan_or_skip()
    fn = jax.value_and_grad(vulkan_loss, argnums=(0, 1), has_aux=True)
    return whilst.compile(fn, *VULKAN_ARGS, target=["llvm-cpu", "vulkan-spirv"]).data


def test_vulkan_calls_give_the_cpu_results_through_staging_buffers(cpu_and_vulkan):
    """On a Vulkan device (lavapipe in CI) results are not mappable by the host and
    come back through whilst's staging buffers: one copy per output, one wait per
    call (IREE's own transfer imported unaligned numpy memory, which Vulkan refuses).
    A loop's value and gradient, with numpy and with device arrays, match the CPU."""
    x, w = VULKAN_ARGS
    cpu, gpu = load(cpu_and_vulkan), load(cpu_and_vulkan, driver="vulkan")
    want = jax.tree_util.tree_leaves(cpu.main(x, w))
    for got in (gpu.main(x, w), gpu.main.on_device(gpu.to_device(x), w)):
        got = jax.tree_util.tree_leaves(got)
        assert len(got) == len(want) == 4
        for g, c in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), c, rtol=1e-5, atol=1e-6)


def test_modules_move_to_the_new_device_that_replaces_a_lost_one(cpu_and_vulkan):
    """After a device loss (iree_limits/vulkan_device_lost.py) whilst replaces the
    driver's device; each module loaded on the lost one moves to the new one on its
    next call and gives the same results; a DeviceArray of the lost device is refused."""
    from whilst.runtime._devices import replace_lost

    x, w = VULKAN_ARGS
    want = jax.tree_util.tree_leaves(load(cpu_and_vulkan).main(x, w))
    gpu = load(cpu_and_vulkan, driver="vulkan")
    lost = gpu.device
    on_lost = gpu.to_device(x)
    replace_lost("vulkan", lost)
    for got in (gpu.main(x, w), load(cpu_and_vulkan, driver="vulkan").main(x, w)):
        for g, c in zip(jax.tree_util.tree_leaves(got), want):
            np.testing.assert_allclose(np.asarray(g), c, rtol=1e-5, atol=1e-6)
    assert gpu.device is not lost
    with pytest.raises(ValueError, match="DeviceArray on another device"):
        gpu.main.on_device(on_lost, w)


def test_calls_that_lose_their_device_run_again_and_the_lost_devices_go_quietly():
    """lavapipe loses its device in about a third of the calls of two nested
    checkpointed loops' gradient (iree_limits/vulkan_device_lost.py). 8 calls in a
    row all give `jax.grad` of the loops unrolled (a lost call runs again on a fresh
    device, up to `LOST_DEVICE_RETRIES` times), and the lost devices, released with
    the buffers of the calls that failed on them, take the process down neither then
    nor when collected."""
    import gc

    from iree_limits.vulkan_device_lost import nested, nested_unrolled

    vulkan_or_skip()
    x, a = np.float32(0.6), np.float32(0.7)
    run = whilst.compile(jax.grad(nested, (0, 1)), x, a, target="vulkan-spirv").load("vulkan")
    want = jax.grad(nested_unrolled, (0, 1))(x, a)
    for _ in range(8):
        np.testing.assert_allclose(run(x, a), want, rtol=1e-4)
    gc.collect()


def test_a_call_run_again_after_its_device_was_lost_leaves_no_hold_on_the_device(
        compiled, caplog, monkeypatch):
    """The warning of a call that lost its device (here its first run fails as a
    lost Vulkan device does) keeps the cause as text: pytest keeps the records it
    captures, and a kept exception would keep the failed run's frames, the module
    and so its device (on lavapipe, two spinning threads) past the module's end."""
    import gc

    from whilst.runtime import _devices
    from whilst.runtime._loader import Module, RunError

    real_run, runs = Module._run, []

    def first_run_lost(self, *args):
        runs.append(self)
        if len(runs) == 1:
            try:
                raise RuntimeError("VK_ERROR_DEVICE_LOST")
            except RuntimeError as e:
                raise RunError("scan: VK_ERROR_DEVICE_LOST") from e
        return real_run(self, *args)

    monkeypatch.setattr(Module, "_run", first_run_lost)
    x = np.linspace(0.01, 0.2, 12, dtype=np.float32).reshape(4, 3)
    m = load(compiled.data, driver="local-task")
    out, _ = m.scan(x, {"s": np.zeros(3, np.float32)})
    assert int(out["steps"]) == reference_scan(x, np.zeros(3, np.float32))[0]
    assert len(runs) == 2 and "device was lost" in caplog.text
    del m, runs, out
    gc.collect()
    assert _devices.current("local-task") is None


def test_a_vulkan_device_goes_with_the_last_module_or_device_array_holding_it(
        cpu_and_vulkan):
    """On lavapipe an IREE 3.13 Vulkan device keeps two threads spinning for as long
    as it exists (iree_limits/vulkan_idle_spin.py), so whilst releases it with its
    last holder: while a DeviceArray outlives its module, a module loaded then gets
    the same device and takes the array; once both are gone the device's threads
    are too, with no help from Python's cycle collector."""
    import gc

    def threads():
        return len(os.listdir("/proc/self/task"))

    x, w = VULKAN_ARGS
    want = jax.tree_util.tree_leaves(load(cpu_and_vulkan).main(x, w))
    before = threads()
    gc.disable()   # released by reference counts alone
    try:
        gpu = load(cpu_and_vulkan, driver="vulkan")
        assert threads() > before
        device, on_device = gpu.device, gpu.to_device(x)
        del gpu
        again = load(cpu_and_vulkan, driver="vulkan")
        assert again.device is device
        for g, c in zip(jax.tree_util.tree_leaves(again.main(on_device, w)), want):
            np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-6)
        del again, device, on_device
        assert threads() == before
    finally:
        gc.enable()


def test_modules_of_one_driver_share_its_device(compiled, module):
    from whilst.runtime._devices import tool_flags

    assert load(compiled.data).device is module.device
    assert load(compiled.data, driver="local-task").device is not module.device
    assert tool_flags("cuda") == ["--cuda_async_allocations=false",
                                  "--device_allocator=caching"]
    assert tool_flags("local-sync") == []


def test_threads_get_the_results_of_sequential_calls(module):
    rng = np.random.default_rng(0)
    inputs = [(rng.uniform(0, 0.3, (int(rng.integers(1, 9)), 3)).astype(np.float32),
               {"s": rng.uniform(-1, 1, 3).astype(np.float32)}) for _ in range(200)]
    sequential = [module.scan(*a) for a in inputs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(lambda a: module.scan(*a), inputs))
    for (o1, (t1,)), (o2, (t2,)) in zip(sequential, threaded):
        assert int(o1["steps"]) == int(o2["steps"])
        np.testing.assert_array_equal(o1["s"], o2["s"])
        np.testing.assert_array_equal(t1, t2)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_no_memory_growth_over_10000_calls(module):
    x, s = np.full((8, 3), 0.01, np.float32), {"s": np.zeros(3, np.float32)}
    for _ in range(500):
        module.scan(x, s)
    before = _rss_bytes()
    for _ in range(10_000):
        module.scan(x, s)
    growth = _rss_bytes() - before
    assert growth < 32 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB over 10,000 calls"


def _corruptions(data: bytes):
    flipped = bytearray(data)
    for k in range(len(data) // 2, len(data) // 2 + 64):
        flipped[k] ^= 0xFF
    return {"truncated": data[:len(data) // 3], "empty": b"", "not a module": b"hello" * 100,
            "bytes flipped": bytes(flipped), "last tenth cut off": data[:len(data) * 9 // 10]}


def test_damaged_modules_give_a_clear_error(compiled, tmp_path):
    for what, data in _corruptions(compiled.data).items():
        path = tmp_path / "damaged.vmfb"
        path.write_bytes(data)
        with pytest.raises(LoadError) as e:
            load(path)
            pytest.fail(f"{what} module loaded")
        assert ("truncated or corrupted" in str(e.value)
                or "the module is corrupted" in str(e.value)), what


def test_damaged_code_never_crashes_the_process(compiled, tmp_path):
    """Flip bytes all over the module, each in a fresh process: an error, never a signal."""
    path = tmp_path / "m.vmfb"
    path.write_bytes(compiled.data)
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from whilst.runtime import LoadError, load
        data = bytearray(open({str(path)!r}, "rb").read())
        for offset in range(0, len(data), len(data) // 24):
            damaged = bytearray(data)
            for k in range(offset, min(offset + 64, len(data))):
                damaged[k] ^= 0xFF
            try:
                load(bytes(damaged)).scan(np.ones((2, 3), np.float32),
                                          {{"s": np.zeros(3, np.float32)}})
            except LoadError:
                continue
            print("loaded damaged module at", offset)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "loaded damaged module" not in run.stdout


def test_unsealed_modules_from_iree_compile_still_load(compiled):
    from whilst.runtime.seal import unseal

    plain = unseal(compiled.data)
    assert len(plain) < len(compiled.data)
    assert not describe(plain).sealed
    x = np.full((2, 3), 0.2, np.float32)
    out, _ = load(plain).scan(x, {"s": np.zeros(3, np.float32)})
    assert int(out["steps"]) == reference_scan(x, np.zeros(3, np.float32))[0]


def test_runtime_and_whilst_run_work_without_jax(compiled, tmp_path):
    """In a subprocess where importing jax fails, load and call a module, and run and
    inspect it with the command line."""
    blocker = tmp_path / "blocker" / "jax"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('jax is not installed here')\n")
    vmfb = tmp_path / "scan.vmfb"
    compiled.save(vmfb)
    np.save(tmp_path / "x.npy", np.full((3, 3), 0.25, np.float32))
    np.save(tmp_path / "s.npy", np.zeros(3, np.float32))
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        try:
            import jax
            sys.exit("jax imported")
        except ImportError:
            pass
        from whilst.runtime import load
        out, _ = load({str(vmfb)!r}).scan(np.full((3, 3), 0.25, np.float32),
                                          {{"s": np.zeros(3, np.float32)}})
        print("steps", int(out["steps"]))
        from whilst.cli import main
        assert main(["inspect", {str(vmfb)!r}]) == 0
        assert main(["run", {str(vmfb)!r}, "--input", {str(tmp_path / 'x.npy')!r},
                     "--input", {str(tmp_path / 's.npy')!r}]) == 0
        assert not any(m == "jax" or m.startswith("jax.") for m in sys.modules
                       if sys.modules[m] is not None)
        assert main(["compile", "model.py:f", "--arg", "f32[2]", "-o", "m.vmfb"]) == 1
    """)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'blocker'}{os.pathsep}{REPO}")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    steps = reference_scan(np.full((3, 3), 0.25, np.float32), np.zeros(3, np.float32))[0]
    assert f"steps {steps}" in run.stdout
    assert "function scan" in run.stdout and "scan on local-sync" in run.stdout
    assert "pip install 'whilst[compile]'" in run.stderr
