"""What `whilst.runtime` adds to a call of a compiled function, on IREE local-sync.

Per program, in this process: the median time of a call through whilst's runtime
(`module.fn(*args)`: the pytree flattened and checked against the signature,
inputs copied to the device, outputs copied back as numpy arrays and unflattened),
and of the same work done with `iree.runtime` alone (the same module in a VM
context of its own on the same device: the flat inputs copied with their element
types known, the results mapped and copied), calls interleaved; the difference
(whilst's overhead per call) and the ratio whilst / bare.

    .venv/bin/python bench/call_overhead.py
"""
from __future__ import annotations

import iree.runtime as rt
import jax
import jax.numpy as jnp
import numpy as np

import whilst
from _timing import fmt_ratio, fmt_time, measure, table


def cos_steps(x):
    """One float, `y <- cos(y)` 8 times."""
    return whilst.while_loop(lambda i, y: i < 8, lambda i, y: (i + 1, jnp.cos(y)), [0, x])[1]


def decay(state):
    """A dict of three arrays in, a pair out: `y <- y - rate * y` while `t < t1`."""
    def body(t, y):
        return t + state["dt"], y - state["rate"] * y * state["dt"]
    t, y = whilst.lax.while_loop(lambda c: c[0] < 1.0, lambda c: body(*c),
                                 (jnp.float32(0.0), state["y0"]))
    return t, y


PROGRAMS = {   # name: (fn, args)
    "cos_steps": (cos_steps, (np.float32(0.5),)),
    "decay_dict": (decay, ({"y0": np.linspace(1, 2, 16, dtype=np.float32),
                            "rate": np.float32(0.3), "dt": np.float32(0.05)},)),
}


def bare_call(compiled, device, args):
    """`compiled`'s main on the flat inputs through `iree.runtime` alone, on `device`."""
    config = rt.Config(device=device)
    vm_module = rt.VmModule.copy_buffer(config.vm_instance, compiled.data)
    context = rt.VmContext(config.vm_instance, [*config.default_vm_modules, vm_module])
    function = vm_module.lookup_function("main")
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(args)]
    types = [rt.array_interop.map_dtype_to_element_type(x.dtype) for x in leaves]

    def call():
        inputs = rt.VmVariantList(len(leaves))
        for x, element_type in zip(leaves, types):
            inputs.push_ref(device.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                device=device, buffer=x, element_type=element_type))
        results = rt.VmVariantList(1)
        context.invoke(function, inputs, results)
        outs = []
        for k in range(results.size):
            view = results.get_as_ref(k).deref(rt.HalBufferView, True)
            dtype = rt.HalElementType.map_to_dtype(view.element_type)
            outs.append(np.array(view.map().asarray(tuple(view.shape), dtype), copy=True))
        return outs
    return call


def main():
    rows = []
    for name, (fn, args) in PROGRAMS.items():
        compiled = whilst.compile(fn, *args)
        module = compiled.load("local-sync")
        function = module.main
        times = measure({"whilst": lambda: function(*args),
                         "bare": bare_call(compiled, module.device, args)})
        ours, bare = times["whilst"].median, times["bare"].median
        rows.append([name, fmt_time(ours), fmt_time(bare), fmt_time(ours - bare),
                     fmt_ratio(ours / bare)])
    table("A call through whilst.runtime against the same call through iree.runtime alone "
          "(local-sync, interleaved medians)",
          ["program", "whilst", "bare", "overhead", "whilst/bare"], rows)


if __name__ == "__main__":
    main()
