"""The casting rule for inputs: what a function of a compiled module accepts for an
input leaf of dtype D (safe casts are accepted, lossy ones refused).

* numpy data (arrays of any rank, numpy scalars, `.npy` files, anything with a
  `dtype`) keeps its dtype, which must cast to D without loss by numpy's "safe"
  rule (`np.can_cast(dtype, D, "safe")`: int16 -> f32 and f32 -> f64 are safe;
  f64 -> f32 and int64 -> int32 are not, even for values that would fit).
* Python numbers (bool, int, float) and lists of them have no dtype of their own
  (like JAX's weakly typed scalars) and are taken by value: ints must lie in D's
  range (and be exact in a float D), floats must not overflow a float D (they are
  rounded to its nearest value) and are refused for an integer or bool D, and
  only bools are accepted for a bool D.

Everything else (None, strings, objects) is refused.
"""
from __future__ import annotations

import numbers

import numpy as np


def convert(value, want: np.dtype, path: str, expected: str) -> np.ndarray:
    """`value` as a C-contiguous array of dtype `want`, or a TypeError/ValueError
    naming `path` and `expected` (e.g. `f32[b,3]`) that says what to do."""
    if type(value) is np.ndarray and value.dtype == want and value.flags.c_contiguous:
        return value  # the common case, as it is
    if isinstance(value, (np.ndarray, np.generic)) or (
            hasattr(value, "dtype") and hasattr(value, "__array__")):
        arr = np.asarray(value)
        if arr.dtype != want:  # the module's own dtype (bfloat16 too) needs no check
            _check_numeric(arr.dtype, value, path, expected)
        if arr.dtype != want and not np.can_cast(arr.dtype, want, "safe"):
            raise ValueError(
                f"{path} has dtype {arr.dtype}, but the module expects {expected}; "
                f"{arr.dtype} -> {want} can lose values, so it is not done implicitly. "
                f"Convert it with .astype({want.name}) if that is what you want.")
    else:
        arr = _from_python(value, want, path, expected)
    return _c_order(arr.astype(want, copy=False))


def _check_numeric(dtype, value, path, expected) -> None:
    if dtype.kind not in "biufc":
        raise TypeError(f"{path} is {_describe(value)} (dtype {dtype}), but the module "
                        f"expects {expected}; pass numbers.")


def _describe(value) -> str:
    return f"{type(value).__name__} {value!r}"[:60]


def _from_python(value, want, path, expected) -> np.ndarray:
    if not _is_python_numbers(value):
        raise TypeError(f"{path} is {_describe(value)}, but the module expects {expected}; "
                        f"pass a numpy array or a Python number.")
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError) as e:
        raise ValueError(f"{path} cannot be an array of {expected}: {e}.") from None
    if arr.dtype == object:  # ints too large for int64
        raise ValueError(f"{path} holds an int outside the range of {expected}.")
    _check_numeric(arr.dtype, value, path, expected)
    kind = want.kind
    if kind == "b" and arr.dtype.kind != "b":
        raise ValueError(f"{path} is {_describe(value)}, but the module expects {expected}; "
                         f"pass True or False.")
    if kind in "iu":
        if arr.dtype.kind not in "biu":
            raise ValueError(f"{path} is {_describe(value)}, but the module expects "
                             f"{expected}, an integer; pass an int (e.g. round() it).")
        info = np.iinfo(want)
        if arr.size and (arr.min() < info.min or arr.max() > info.max):
            raise ValueError(f"{path} is {_describe(value)}, outside the range of {expected} "
                             f"[{info.min}, {info.max}]; it would wrap around.")
    if kind in "fc":
        if arr.dtype.kind == "c" and kind == "f":
            raise ValueError(f"{path} is complex, but the module expects {expected}.")
        with np.errstate(over="ignore", invalid="ignore"):
            cast = arr.astype(want)
        if np.any(np.isinf(cast) & np.isfinite(arr)):
            raise ValueError(f"{path} is {_describe(value)}, beyond the range of {expected} "
                             f"(it would become inf).")
        if arr.dtype.kind in "iu" and np.any(cast.astype(arr.dtype) != arr):
            raise ValueError(f"{path} is {_describe(value)}, which {expected} cannot hold "
                             f"exactly; pass a float if rounding is what you want.")
    return arr


def _is_python_numbers(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(map(_is_python_numbers, value))
    return isinstance(value, numbers.Number) and not isinstance(value, np.generic)


def convert_untyped(value, path: str) -> np.ndarray:
    """An input of a function without a whilst signature (its dtypes are unknown):
    any array of numbers, as it is; IREE checks the dtype and shape."""
    if not (_is_python_numbers(value) or hasattr(value, "__array__")):
        raise TypeError(f"{path} is {_describe(value)}; pass a numpy array or a number.")
    arr = np.asarray(value)
    _check_numeric(arr.dtype, value, path, "an array of numbers")
    return _c_order(arr)


def _c_order(arr: np.ndarray) -> np.ndarray:
    """`arr` in C order (np.ascontiguousarray would make a 0-d array 1-d)."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")
