"""`whilst.TensorArray`: TensorFlow 2's TensorArray as a functional JAX pytree.

A TensorArray of capacity n is a buffer `f[n, *element_shape]`, and for a dynamic
array its size (the highest index written + 1, at least the initial size);
`write` returns a new array, as in TensorFlow 2::

    ta = TensorArray(jnp.float32, size=3)       # buffer = zeros((3, ...))
    ta = ta.write(1, v)                         # buffer[1] = v
    ta.read(1), ta.stack(), ta.size()           # v, buffer, 3

Rules that differ from TensorFlow's eager arrays, all those of its XLA path:

- Elements share one shape and dtype (`infer_shape=False` with varying shapes is
  refused): `concat` and `split` need equal lengths. An array entering a loop
  with its element shape unknown takes the shape one step of the body writes.
- Unwritten rows read as zeros in `stack`, `gather` and `concat`; `read` of an
  index known to be unwritten is an error.
- Checks that depend on an index (range, written or not) raise where the index is
  known while tracing: eagerly, and under `jax.jit` for Python-int indices.
  Which indices were written is known for writes made in Python code (not those
  inside a loop or at traced indices; past a dynamic array's size, nothing was).
  Where it is not known, arrays made with `run_time_checks=True` check at run
  time, with `checkify.debug_check`s and a mask of written elements: reported by
  `checkify.checkify(f, errors=checkify.user_checks)`, dropped otherwise. Without
  run-time checks (the default: `jax.jit` calls any program holding a
  `debug_check` through a slower path), a write out of range is dropped, a read
  out of range gives zeros, an unwritten index reads zeros, and a second write
  replaces the first.
- `clear_after_read` is accepted and has no effect (reads never clear, as in
  TensorFlow 2's `tf.function` and XLA paths).
- `dynamic_size=True`: a write past the end with a known index grows the array
  to index + 1 rows. As a loop variable of a loop bounded by a Python-int
  `maximum_iterations`, or by a trip count known at trace time (`i < 2` from
  `i = 0`, `whilst.ir._trip_count.static_trips`), it enters the loop with room for
  that many more elements (one write per step); a loop without such a bound is
  refused. `stack()` returns every row of the capacity (zeros from `size()` on)
  and `size()` the highest index written + 1, a traced value after a loop.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify
from jax.tree_util import GetAttrKey

__all__ = ["TensorArray"]


class TensorArray:
    """A list of equally shaped arrays, written and read by position, that JAX
    can carry through loops, `jit`, `vmap`, `grad`, `jvp` and `checkpoint`.

    Args:
      dtype: the elements' dtype.
      size: the number of elements (a Python int); 0 or None with
        `dynamic_size=True` starts empty.
      dynamic_size: whether writes past the end grow the array (module docstring).
      clear_after_read: accepted for TensorFlow compatibility; reads never clear.
      tensor_array_name, name: the array's name, shown in errors. The arguments
        after it are keyword-only (TensorFlow has `handle` and `flow` there).
      element_shape: the elements' shape (a tuple; None dimensions or None
        take the first write's shape).
      infer_shape: True; False (elements of varying shapes) is refused.
      run_time_checks: check indices known only at run time (module docstring),
        keeping a mask of written elements (one bool each, updated by every write).
        whilst's own argument.

    Raises:
      ValueError: size missing or negative for a fixed-size array, infer_shape False.
      TypeError: size not a Python int, element_shape not a shape.
    """

    def __init__(self, dtype, size=None, dynamic_size=False, clear_after_read=True,
                 tensor_array_name=None, *, element_shape=None, infer_shape=True, name=None,
                 run_time_checks=False):
        label = name if name is not None else tensor_array_name
        label = "TensorArray" if label is None else f"TensorArray {label!r}"
        if size is None and not dynamic_size:
            raise ValueError(f"{label}: size is required when dynamic_size is False. Pass "
                             f"size=N (a Python int), or dynamic_size=True to grow on write.")
        size = 0 if size is None else size
        if isinstance(size, bool) or not isinstance(size, (numbers.Integral, np.integer)):
            raise TypeError(
                f"{label}: size must be a Python int (whilst's arrays have static shapes); "
                f"found {type(size).__name__} {size!r}. Pass an int, e.g. the loop's "
                f"maximum_iterations.")
        if size < 0:
            raise ValueError(f"{label}: size must be 0 or more; found {size}.")
        if not infer_shape:
            raise ValueError(
                f"{label}: infer_shape=False (elements of varying shapes) is not supported: "
                f"elements share one shape, as on TensorFlow's XLA path. Pad the elements "
                f"to one shape and keep their lengths in another TensorArray.")
        self._dtype = jax.dtypes.canonicalize_dtype(dtype)
        self._element_shape = _shape_argument(label, element_shape)
        self._dynamic = bool(dynamic_size)
        self._clear_after_read = bool(clear_after_read)
        self._label = label
        self._run_time_checks = bool(run_time_checks)
        self._capacity = self._initial_size = int(size)
        self._buffer = self._size = self._written = None
        self._known = np.zeros(self._capacity, bool)
        if self._element_shape is not None and None not in self._element_shape:
            self._allocate(self._element_shape)

    # -- pytree ------------------------------------------------------------------------

    def _tree_flatten_with_keys(self):
        aux = (self._dtype, self._element_shape, self._dynamic, self._clear_after_read,
               self._label, self._run_time_checks,
               None if self._buffer is not None else self._capacity)
        return ((GetAttrKey("buffer"), self._buffer), (GetAttrKey("size"), self._size),
                (GetAttrKey("written"), self._written)), aux

    def _tree_flatten(self):
        children, aux = self._tree_flatten_with_keys()
        return [c for _, c in children], aux

    @classmethod
    def _tree_unflatten(cls, aux, children):
        ta = object.__new__(cls)
        (ta._dtype, ta._element_shape, ta._dynamic, ta._clear_after_read, ta._label,
         ta._run_time_checks, ta._capacity) = aux
        ta._buffer, ta._size, ta._written = children
        ta._initial_size = ta._capacity  # used only while no buffer is allocated
        ta._known = None  # which indices were written is not known
        return ta

    def _replace(self, buffer, size, known, written):
        ta = object.__new__(type(self))
        ta.__dict__.update(self.__dict__)
        ta._buffer, ta._size, ta._known, ta._written = buffer, size, known, written
        return ta

    # -- properties --------------------------------------------------------------------

    @property
    def dtype(self):
        """The elements' dtype."""
        return self._dtype

    @property
    def element_shape(self):
        """The elements' shape as a tuple (None dimensions unknown), or None."""
        return self._element_shape

    @property
    def dynamic_size(self):
        """Whether writes past the end grow the array."""
        return self._dynamic

    def size(self):
        """The number of elements: the size of a fixed-size array; for a dynamic
        one `max(size, *(i + 1 for i written))` (`size` the constructor's), a traced
        int32 after a loop."""
        if not self._dynamic:
            return jnp.asarray(self.capacity, jnp.int32)
        if self._size is None:
            return jnp.asarray(self._capacity, jnp.int32)
        return self._size

    @property
    def capacity(self):
        """The rows held: `size()` of a fixed-size array, the room of a dynamic one."""
        return self._capacity if self._buffer is None else self._buffer.shape[0]

    # -- writes ------------------------------------------------------------------------

    def write(self, index, value):
        """`buffer[index] = value` in a new array (module docstring: checks, growth)."""
        value = self._element("write", "value", value)
        ta = self._with_elements(value.shape, "write")
        i, known_i = _index_argument(ta._label, "write", "index", index)
        if known_i is not None:
            ta = ta._reach("write", known_i)
            ta._check_unwritten("write", [known_i])
            if ta._known is None:
                ta._check_writes_at_run_time("write", i[None])
            return ta._replace(lax.dynamic_update_index_in_dim(ta._buffer, value, i, 0),
                               ta._size_after(known_i + 1), ta._known_after([known_i]),
                               ta._written_after(i[None]))
        ta._check_writes_at_run_time("write", i[None])
        if ta.capacity == 0:
            return ta  # dropped: out of range
        in_range = (i >= 0) & (i < ta.capacity)
        return ta._replace(ta._buffer.at[i].set(value, mode="drop"),
                           ta._size_after(jnp.where(in_range, i + 1, 0)), None,
                           ta._written_after(i[None]))

    def unstack(self, value):
        """`write(k, value[k])` for each k, in a new array."""
        value = self._elements("unstack", "value", value)
        n = value.shape[0]
        ta = self._with_elements(value.shape[1:], "unstack")
        if n:
            ta = ta._reach("unstack", n - 1)
        ta._check_unwritten("unstack", range(n))
        rows = jnp.arange(n, dtype=jnp.int32)
        if ta._known is None:
            ta._check_writes_at_run_time("unstack", rows)
        return ta._replace(lax.dynamic_update_slice_in_dim(ta._buffer, value, 0, 0),
                           ta._size_after(n), ta._known_after(range(n)), ta._written_after(rows))

    def scatter(self, indices, value):
        """`write(indices[k], value[k])` for each k, in a new array."""
        value = self._elements("scatter", "value", value)
        idx, known_idx = _indices_argument(self._label, "scatter", indices)
        if idx.shape[0] != value.shape[0]:
            raise ValueError(
                f"{self._label}.scatter: indices has {idx.shape[0]} entries but value has "
                f"{value.shape[0]} rows. Pass one row of value per index.")
        ta = self._with_elements(value.shape[1:], "scatter")
        if known_idx is not None:
            if len(set(known_idx.tolist())) != len(known_idx):
                raise ValueError(
                    f"{self._label}.scatter: indices {known_idx.tolist()} repeat an index; "
                    f"each element may be written once. Pass distinct indices.")
            if len(known_idx):
                ta = ta._reach("scatter", int(known_idx.max()), int(known_idx.min()))
            ta._check_unwritten("scatter", known_idx.tolist())
            if ta._known is None:
                ta._check_writes_at_run_time("scatter", idx)
            return ta._replace(ta._buffer.at[idx].set(value, mode="drop"),
                               ta._size_after(int(known_idx.max(initial=-1)) + 1),
                               ta._known_after(known_idx.tolist()), ta._written_after(idx))
        ta._check_writes_at_run_time("scatter", idx)
        in_range = (idx >= 0) & (idx < ta.capacity)
        return ta._replace(ta._buffer.at[idx].set(value, mode="drop"),
                           ta._size_after(jnp.max(jnp.where(in_range, idx + 1, 0), initial=0)),
                           None, ta._written_after(idx))

    def split(self, value, lengths):
        """`unstack` of `value` cut into pieces of `lengths` rows (equal lengths:
        elements share one shape)."""
        value = self._element("split", "value", value)
        try:
            lengths = np.asarray(lengths)
        except jax.errors.TracerArrayConversionError:
            raise TypeError(f"{self._label}.split: lengths must be known while tracing (a "
                            f"list of ints); found a traced array. Pass Python ints.") from None
        if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
            raise ValueError(f"{self._label}.split: lengths must be a vector of ints; "
                             f"found shape {lengths.shape} and dtype {lengths.dtype}. Pass "
                             f"a list such as [2, 2, 2].")
        if value.ndim == 0:
            raise ValueError(f"{self._label}.split: value must be at least a vector; found "
                             f"a scalar. Pass an array whose first axis is cut.")
        if int(lengths.sum()) != value.shape[0]:
            raise ValueError(
                f"{self._label}.split: lengths must sum to value.shape[0] = "
                f"{value.shape[0]}; they sum to {int(lengths.sum())}. Pass lengths that "
                f"cover every row of value.")
        if len(set(lengths.tolist())) > 1:
            raise ValueError(
                f"{self._label}.split: lengths {lengths.tolist()} differ; elements share one "
                f"shape (TensorFlow's XLA path). Pad the pieces to one length.")
        if not self._dynamic and len(lengths) != self.capacity:
            raise ValueError(
                f"{self._label}.split: the array's size is {self.capacity} but lengths has "
                f"{len(lengths)} entries, and the array is not dynamic_size. Pass one "
                f"length per element.")
        n = len(lengths)
        piece = int(lengths[0]) if n else 0
        return self.unstack(value.reshape((n, piece) + value.shape[1:]))

    # -- reads -------------------------------------------------------------------------

    def read(self, index):
        """`buffer[index]` (module docstring: checks)."""
        self._require_elements("read")
        i, known_i = _index_argument(self._label, "read", "index", index)
        if known_i is not None:
            self._check_range("read", known_i)
            if self._unwritten(known_i):
                raise ValueError(
                    f"{self._label}.read: index {known_i} has not been written. Write it "
                    f"before reading it, or use stack()/gather(), which read unwritten "
                    f"elements as zeros.")
        if known_i is None or self._known is None:
            self._check_reads_at_run_time("read", i[None], unwritten=True)
        if known_i is not None:
            return lax.dynamic_index_in_dim(self._buffer, i, 0, False)
        if self.capacity == 0:
            return jnp.zeros(self._buffer.shape[1:], self._dtype)
        return self._buffer.at[i].get(mode="fill", fill_value=0)

    def gather(self, indices):
        """`stack()[indices]`; indices out of range give zeros."""
        self._require_elements("gather")
        idx, known_idx = _indices_argument(self._label, "gather", indices)
        if known_idx is not None:
            for k in known_idx.tolist():
                self._check_range("gather", k)
        if known_idx is None:
            self._check_reads_at_run_time("gather", idx, unwritten=False)
        if self.capacity == 0:
            return jnp.zeros(idx.shape + self._buffer.shape[1:], self._dtype)
        return jnp.take(self._buffer, idx, axis=0, mode="fill", fill_value=0)

    def stack(self):
        """All `capacity` elements stacked on a new first axis (unwritten ones zero)."""
        self._require_elements("stack")
        return self._buffer

    def concat(self):
        """The elements joined along their first axis (`stack()` with its first two
        axes merged)."""
        self._require_elements("concat")
        if not self._buffer.shape[1:]:
            raise ValueError(
                f"{self._label}.concat: elements are scalars, but concat needs at least "
                f"vectors. Use stack() for scalar elements.")
        return self._buffer.reshape((-1,) + self._buffer.shape[2:])

    def identity(self):
        """The same array (TensorFlow's `identity`: a new handle on the same data)."""
        return self._replace(self._buffer, self._size, self._known, self._written)

    def close(self):
        """Nothing to release (TensorFlow 2's `close` in eager mode)."""

    # -- loops -------------------------------------------------------------------------

    def _for_loop(self, path, maximum_iterations, api):
        """This array as it enters a loop bounded by `maximum_iterations` (a Python
        int or None): dynamic arrays get room for that many more elements."""
        if self._buffer is None:
            raise ValueError(
                f"{api}: {path} is a TensorArray whose element shape is not known: no "
                f"element_shape, nothing written before the loop, and one step of the body "
                f"did not show it (the body reads the array before writing it, or failed "
                f"when traced alone). Pass element_shape=... to TensorArray, or write one "
                f"element before the loop.")
        if not self._dynamic:
            return self
        if maximum_iterations is None:
            raise ValueError(
                f"{api}: {path} is a TensorArray with dynamic_size=True, whose room in a "
                f"loop comes from maximum_iterations (as on TensorFlow's XLA path) or from a "
                f"trip count known at trace time (a counter stepped from a known start to a "
                f"known limit: `i < 2` from `i = 0`), but this loop has neither. Pass "
                f"maximum_iterations=N (the most steps, one write each), or create the array "
                f"with dynamic_size=False and size=N.")
        return self._grown(self.capacity + maximum_iterations)

    # -- helpers -----------------------------------------------------------------------

    def _allocate(self, shape):
        self._buffer = jnp.zeros((self._capacity,) + tuple(shape), self._dtype)
        if self._run_time_checks:
            self._written = jnp.zeros(self._capacity, bool)
        if self._dynamic:
            self._size = jnp.asarray(self._initial_size, jnp.int32)
        self._element_shape = tuple(shape)

    def _with_elements(self, shape, method):
        """This array with its buffer allocated for elements of `shape`, or a
        ValueError where `shape` is not its element shape."""
        expected = self._element_shape
        if expected is not None and (len(expected) != len(shape) or any(
                e is not None and e != s for e, s in zip(expected, shape))):
            raise ValueError(
                f"{self._label}.{method}: the element has shape {tuple(shape)}, but the "
                f"array's elements have shape {_show(expected)}. Reshape the value, or "
                f"use another TensorArray for elements of this shape.")
        if self._buffer is not None:
            return self
        ta = self._replace(None, None, self._known, None)
        ta._allocate(shape)
        return ta

    def _require_elements(self, method):
        if self._buffer is None:
            raise ValueError(
                f"{self._label}.{method}: the element shape is not known (no element_shape "
                f"and nothing written). Pass element_shape=... to TensorArray, or write "
                f"an element first.")

    def _unwritten(self, k):
        """Whether index `k` is known not to have been written."""
        if self._known is not None:
            return not self._known[k]
        try:  # a dynamic array wrote nothing past its size
            return self._dynamic and k >= int(np.asarray(self._size))
        except jax.errors.TracerArrayConversionError:
            return False

    def _size_after(self, reached):
        """A dynamic array's size once index `reached - 1` is written (None if fixed)."""
        return None if not self._dynamic else jnp.maximum(self._size, reached).astype(jnp.int32)

    def _known_after(self, indices):
        """The record of written indices once `indices` are written (None: unknown)."""
        if self._known is None:
            return None
        known = self._known.copy()
        known[list(indices)] = True
        return known

    def _check_range(self, method, k):
        if not 0 <= k < self.capacity:
            raise IndexError(
                f"{self._label}.{method}: index {k} is out of range for an array of size "
                f"{self.capacity}. Pass an index in [0, {self.capacity}).")

    def _reach(self, method, k, low=None):
        """This array with room for index `k` (grown if dynamic), or an IndexError."""
        low = k if low is None else low
        if low < 0:
            raise IndexError(f"{self._label}.{method}: index {low} is negative. Pass an "
                             f"index in [0, {self.capacity}).")
        if k < self.capacity:
            return self
        if not self._dynamic:
            raise IndexError(
                f"{self._label}.{method}: index {k} is out of range: the array's size is "
                f"{self.capacity} and it is not dynamic_size. Pass a larger size, or "
                f"dynamic_size=True.")
        return self._grown(k + 1)

    def _grown(self, capacity):
        pad = capacity - self.capacity
        known, written = self._known, self._written
        return self._replace(
            jnp.concatenate([self._buffer, jnp.zeros((pad,) + self._buffer.shape[1:],
                                                      self._dtype)]),
            self._size, None if known is None else np.concatenate([known, np.zeros(pad, bool)]),
            None if written is None else jnp.concatenate([written, jnp.zeros(pad, bool)]))

    def _check_unwritten(self, method, indices):
        if self._known is None:
            return
        twice = [k for k in indices if self._known[k]]
        if twice:
            raise ValueError(
                f"{self._label}.{method}: could not write to index {twice[0]}: it has "
                f"already been written to. Each element is written once; write to another "
                f"index, or use a new TensorArray.")

    def _written_after(self, indices):
        """The mask of written elements once `indices` are written (None: no mask)."""
        if self._written is None:
            return None
        return self._written.at[indices].set(True, mode="drop")

    def _check_writes_at_run_time(self, method, indices):
        """For arrays with run-time checks, `checkify.debug_check`s (dropped unless
        checkified) that `indices` are in range, neither written before nor repeated."""
        if not self._run_time_checks:
            return
        cap = self.capacity
        in_range = (indices >= 0) & (indices < cap)
        _debug_check_each(~in_range, indices, self._out_of_range(method))
        before = self._written.at[indices].get(mode="fill", fill_value=False)
        counts = jnp.zeros(cap, jnp.int32).at[indices].add(1, mode="drop")
        repeated = counts.at[indices].get(mode="fill", fill_value=0) > 1
        _debug_check_each(
            in_range & (before | repeated), indices,
            f"{_escaped(self._label)}.{method}: could not write to index {{index}}: it has "
            f"already been written to. Each element is written once; write to another "
            f"index, or use a new TensorArray.")

    def _check_reads_at_run_time(self, method, indices, unwritten):
        """For arrays with run-time checks, `checkify.debug_check`s (dropped unless
        checkified) that `indices` are in range and, if `unwritten`, written."""
        if not self._run_time_checks:
            return
        in_range = (indices >= 0) & (indices < self.capacity)
        _debug_check_each(~in_range, indices, self._out_of_range(method))
        if not unwritten:
            return
        written = self._written.at[indices].get(mode="fill", fill_value=False)
        _debug_check_each(
            in_range & ~written, indices,
            f"{_escaped(self._label)}.{method}: index {{index}} has not been written. Write "
            f"it before reading it, or use stack()/gather(), which read unwritten elements "
            f"as zeros.")

    def _out_of_range(self, method):
        cap = self.capacity
        room = (" (a dynamic array grows past it only at indices known while tracing; in "
                "a loop its room is maximum_iterations more elements)" if self._dynamic else "")
        return (f"{_escaped(self._label)}.{method}: index {{index}} is out of range for an "
                f"array of size {cap}{room}. Pass an index in [0, {cap}).")

    def _element(self, method, arg, value):
        """`value` as a JAX array of this array's dtype, or a TypeError."""
        where = f"{self._label}.{method}: {arg}"
        if isinstance(value, (jax.Array, np.ndarray, np.generic)) and not (
                isinstance(value, jax.Array) and jax.typeof(value).weak_type):
            if value.dtype != self._dtype:
                raise TypeError(
                    f"{where} has dtype {value.dtype}, but the array holds {self._dtype}. "
                    f"Cast it with .astype({self._dtype}).")
            return jnp.asarray(value)
        if isinstance(value, jax.Array):
            data_dtype = value.dtype
        else:
            try:
                data_dtype = np.asarray(value).dtype
            except (ValueError, TypeError):
                data_dtype = np.dtype(object)
        if not (np.issubdtype(data_dtype, np.number) or data_dtype == bool) or not (
                np.can_cast(data_dtype, self._dtype, "same_kind")):
            raise TypeError(
                f"{where} is {type(value).__name__} {value!r} (dtype {data_dtype}), which "
                f"does not convert to the array's dtype {self._dtype}. Pass numbers of "
                f"that kind, or an array of dtype {self._dtype}.")
        return jnp.asarray(value, self._dtype)

    def _elements(self, method, arg, value):
        value = self._element(method, arg, value)
        if value.ndim == 0:
            raise ValueError(f"{self._label}.{method}: {arg} must be at least a vector (one "
                             f"row per element); found a scalar.")
        return value

    def __repr__(self):
        return (f"{self._label}(dtype={self._dtype}, capacity={self.capacity}, "
                f"element_shape={_show(self._element_shape)}, "
                f"dynamic_size={self._dynamic})")


jax.tree_util.register_pytree_with_keys(
    TensorArray, TensorArray._tree_flatten_with_keys, TensorArray._tree_unflatten,
    TensorArray._tree_flatten)


def has_dynamic_arrays(tree) -> bool:
    """Whether `tree` holds a TensorArray made with `dynamic_size=True`."""
    is_ta = lambda x: isinstance(x, TensorArray)  # noqa: E731
    return any(is_ta(x) and x.dynamic_size
               for x in jax.tree_util.tree_leaves(tree, is_leaf=is_ta))


def arrays_for_loop(tree, root, maximum_iterations, api, body):
    """`tree` (loop variables named `root`) with each TensorArray in it as it
    enters a loop bounded by `maximum_iterations` (a Python int or None). An
    array whose element shape is not known yet takes the shape `body` (loop
    variables -> loop variables, as a list of the same entries) writes into it,
    found by `jax.eval_shape` (TensorFlow's XLA path infers it so too)."""
    is_ta = lambda x: isinstance(x, TensorArray)  # noqa: E731
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_ta)
    if not any(is_ta(x) for _, x in leaves):
        return tree
    if any(is_ta(x) and x._buffer is None for _, x in leaves):
        leaves = _with_written_shapes(leaves, treedef, body)
    return jax.tree_util.tree_unflatten(treedef, [
        x._for_loop(root + jax.tree_util.keystr(p), maximum_iterations, api) if is_ta(x)
        else x for p, x in leaves])


def _with_written_shapes(leaves, treedef, body):
    """`leaves` (path, leaf) with each TensorArray of unknown element shape given
    the shape of the elements one step of `body` writes into it, where it can."""
    is_ta = lambda x: isinstance(x, TensorArray)  # noqa: E731
    try:
        out = jax.eval_shape(body, jax.tree_util.tree_unflatten(treedef, [x for _, x in leaves]))
    except Exception:  # noqa: BLE001 -- the body cannot run yet: _for_loop says what to do
        return leaves
    out_leaves = jax.tree_util.tree_leaves(out, is_leaf=is_ta)
    if len(out_leaves) != len(leaves):
        return leaves
    return [(p, x._with_elements(y._buffer.shape[1:], "write")
             if is_ta(x) and x._buffer is None and is_ta(y) and y._buffer is not None
             else x) for (p, x), y in zip(leaves, out_leaves)]


def _shape_argument(label, element_shape):
    if element_shape is None:
        return None
    if hasattr(element_shape, "as_list"):  # a TensorShape-like object
        element_shape = element_shape.as_list()
    try:
        shape = tuple(None if d is None else _dimension(d) for d in element_shape)
    except TypeError:
        raise TypeError(f"{label}: element_shape must be a tuple of ints (None for an "
                        f"unknown dimension) or None; found {element_shape!r}.") from None
    return shape


def _dimension(d):
    if isinstance(d, bool) or operator.index(d) < 0:
        raise TypeError(d)
    return operator.index(d)


def _index_argument(label, method, arg, index):
    """(int32 scalar, its value or None where traced), or a TypeError."""
    i, known = _integers(index)
    if i is None or i.shape != ():
        raise TypeError(f"{label}.{method}: {arg} must be an integer scalar; found "
                        f"{type(index).__name__} {index!r}. Pass an int.")
    return i, None if known is None else int(known)


def _indices_argument(label, method, indices):
    """(int32 vector, its numpy value or None where traced), or a TypeError."""
    idx, known = _integers(indices)
    if idx is None or idx.ndim != 1:
        raise TypeError(f"{label}.{method}: indices must be a vector of ints; found "
                        f"{type(indices).__name__} {indices!r}. Pass a list of ints.")
    return idx, known


def _integers(x):
    """(`x` as an int32 array, its numpy value or None where traced), or (None, None)
    where `x` holds no integers (an empty list counts as integers)."""
    try:
        known = np.asarray(x)
    except jax.errors.TracerArrayConversionError:
        known = None
    except (TypeError, ValueError):
        return None, None
    if known is not None:
        if known.size == 0 and known.dtype == np.float64:
            known = known.astype(np.int32)
        if not np.issubdtype(known.dtype, np.integer):
            return None, None
        return jnp.asarray(known, jnp.int32), known
    if not jnp.issubdtype(x.dtype, jnp.integer):
        return None, None
    return x.astype(jnp.int32), None


def _debug_check_each(bad, indices, message):
    """A `checkify.debug_check` that no entry of `bad` holds; `message` names the
    first index where one does as `{index}`."""
    if bad.shape[0]:
        checkify.debug_check(~jnp.any(bad), message, index=indices[jnp.argmax(bad)])


def _escaped(text):
    """`text` in a `str.format` template, as is."""
    return text.replace("{", "{{").replace("}", "}}")


def _show(shape):
    return "unknown" if shape is None else str(tuple(shape))
