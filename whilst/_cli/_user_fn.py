"""The user's function named on the command line (`MODULE.py:FUNCTION`), its
argument specs, and its gradient (`--grad ARGNUMS`). Imports jax."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
import traceback

from whilst._cli._errors import CLIError
from whilst._cli._specs import parse_spec, to_shape_dtype_structs


@dataclasses.dataclass
class Target:
    """A function to export under `name`, with its example `args`."""
    name: str
    fn: object
    args: list
    description: str


def where(exc: BaseException, path: str | None) -> str:
    """` (at FILE:LINE in FUNC)` for the innermost traceback frame in `path`."""
    frames = traceback.extract_tb(exc.__traceback__)
    if path is not None:
        inside = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(path)]
        frames = inside or frames
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {os.path.relpath(f.filename)}:{f.lineno} in {f.name})"


HOW = "write MODULE.py:FUNCTION (or package.module:FUNCTION), e.g. model.py:loss"


def split_ref(ref: str) -> tuple[str, str]:
    """`MODULE.py:FUNCTION` or `package.module:FUNCTION` -> (module part, function name),
    checked for form only (nothing is imported)."""
    module_ref, sep, name = ref.rpartition(":")
    if not sep or not module_ref or not name:
        raise CLIError(f"{ref!r} does not name a function; {HOW}.")
    if not name.isidentifier():
        raise CLIError(f"{ref!r}: {name!r} is not a Python identifier; FUNCTION must be the "
                       f"plain name of a function defined in {module_ref} (it also names the "
                       f"compiled function and its files).")
    if module_ref.endswith(".py"):
        return module_ref, name
    if os.path.isdir(module_ref):
        raise CLIError(f"{ref!r}: {module_ref!r} is a directory, not a Python file; {HOW}.")
    if os.path.exists(module_ref) or os.sep in module_ref or "/" in module_ref:
        raise CLIError(f"{ref!r}: {module_ref!r} is not a Python file (a name ending in .py); "
                       f"{HOW}.")
    if not all(part.isidentifier() for part in module_ref.split(".")):
        raise CLIError(f"{ref!r}: {module_ref!r} is neither a Python file (MODULE.py) nor a "
                       f"module name (package.module); {HOW}.")
    return module_ref, name


def function_names(ref: str, grad: str | None) -> list[str]:
    """The names of the functions exported for `ref` (and its gradient with --grad)."""
    name = split_ref(ref)[1]
    return [name] if grad is None else [name, f"{name}_grad"]


def source_path(ref: str) -> str | None:
    """The file that defines `ref`'s function, found without running it (a module's
    parent packages are imported), or None if there is none yet."""
    module_ref, _ = split_ref(ref)
    if module_ref.endswith(".py"):
        return os.path.abspath(module_ref) if os.path.isfile(module_ref) else None
    try:
        spec = importlib.util.find_spec(module_ref)
    except (ImportError, ValueError):
        return None
    return spec.origin if spec is not None and spec.has_location else None


def load_function(ref: str):
    """`MODULE.py:FUNCTION` or `package.module:FUNCTION` -> (function, source path)."""
    module_ref, name = split_ref(ref)
    path = None
    try:
        if module_ref.endswith(".py"):
            if not os.path.isfile(module_ref):
                raise CLIError(f"cannot find {module_ref!r} (looked in {os.getcwd()}); give "
                               f"the path to the Python file that defines {name}.")
            path = os.path.abspath(module_ref)
            stem = os.path.splitext(os.path.basename(path))[0]
            _check_not_shadowing(stem, path)
            sys.path.append(os.path.dirname(path))
            spec = importlib.util.spec_from_file_location(stem, path)
            module = importlib.util.module_from_spec(spec)
            setattr(module, _USER_MODEL, True)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_ref)
    except CLIError:
        raise
    except ModuleNotFoundError as e:
        if path is None and e.name is not None and (module_ref + ".").startswith(e.name + "."):
            hint = (f"; did you mean {module_ref}.py:{name}?" if os.path.isfile(module_ref + ".py")
                    else f"; {HOW}, or install the module")
            raise CLIError(f"no module {module_ref!r} can be imported here{hint}") from None
        raise CLIError(f"importing {module_ref} failed: {type(e).__name__}: {e}"
                       f"{where(e, path)}.") from e
    except Exception as e:
        raise CLIError(f"importing {module_ref} failed: {type(e).__name__}: {e}"
                       f"{where(e, path)}.") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        found = sorted(k for k, v in vars(module).items()
                       if callable(v) and not k.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        raise CLIError(f"{module_ref} has no function {name!r}; it defines {found}.")
    return fn, path or getattr(module, "__file__", None)


_USER_MODEL = "__whilst_user_model__"


def _check_not_shadowing(stem: str, path: str) -> None:
    """Refuse a model file named like a module whilst or the model needs (numpy.py)."""
    if getattr(sys.modules.get(stem), _USER_MODEL, False):
        return  # a model file loaded before, in this process
    if stem in sys.modules or stem in sys.stdlib_module_names:
        raise CLIError(f"{os.path.relpath(path)} has the name of the module {stem!r} it would "
                       f"hide (whilst and your code import it); rename the file, e.g. to "
                       f"{stem}_model.py.")
    try:
        found = importlib.util.find_spec(stem)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin and os.path.abspath(found.origin) != path:
        raise CLIError(f"{os.path.relpath(path)} has the name of the installed module "
                       f"{stem!r} ({found.origin}); rename the file, e.g. to {stem}_model.py.")


def parse_argnums(text: str, nargs: int):
    """`"0"` -> 0, `"0,2"` -> (0, 2), checked against the number of arguments."""
    try:
        nums = tuple(int(t) for t in text.split(","))
    except ValueError:
        raise CLIError(f"--grad {text!r}: expected argument numbers such as 0 or 0,1.") from None
    bad = [n for n in nums if not 0 <= n < nargs]
    if bad:
        raise CLIError(f"--grad {text!r}: the function takes {nargs} argument(s) (numbered "
                       f"from 0), so {bad} is out of range.")
    return nums[0] if len(nums) == 1 else nums


def targets(ref: str, arg_specs: list[str], grad: str | None):
    """The function (and its gradient) with example args, ready to export or trace."""
    import jax
    import numpy as np

    if not arg_specs:
        raise CLIError("give the function's argument specs with --arg, one per argument, "
                       "e.g. --arg 'f32[8,4]' --arg 'i32[]'.")
    specs = [parse_spec(s) for s in arg_specs]
    fn, path = load_function(ref)
    name, *grad_name = function_names(ref, grad)
    args = to_shape_dtype_structs(specs)
    sig = ", ".join(s.text for s in specs)
    out = [Target(name, fn, args, f"{name}({sig})")]
    if grad is None:
        return out, path
    argnums = parse_argnums(grad, len(args))
    try:
        result = jax.eval_shape(fn, *args)
    except Exception as e:
        raise CLIError(f"tracing {name}({sig}) failed: {type(e).__name__}: {e}"
                       f"{where(e, path)}.") from e
    leaves = jax.tree_util.tree_leaves(result)
    if len(leaves) != 1 or leaves[0].shape != () or \
            not jax.numpy.issubdtype(leaves[0].dtype, np.inexact):
        found = ", ".join(f"{np.dtype(x.dtype).name}{list(x.shape)}" for x in leaves)
        raise CLIError(f"--grad needs {name} to return one float scalar (a loss); it returns "
                       f"{found or 'nothing'}. Export a scalar loss instead, e.g. "
                       f"`def loss(*args): return jnp.sum({name}(*args))`.")
    for n in (argnums if isinstance(argnums, tuple) else (argnums,)):
        if not jax.numpy.issubdtype(args[n].dtype, np.inexact):
            raise CLIError(f"--grad {grad}: argument {n} is {specs[n].text}; gradients are "
                           f"taken with respect to float arguments only.")
    out.append(Target(grad_name[0], jax.grad(fn, argnums=argnums), args,
                      f"{grad_name[0]} = jax.grad({name}, argnums={argnums})"))
    return out, path


def run_traced(target: Target, path, what, action):
    """`action()`, turning any exception from the user's code into one CLIError."""
    try:
        return action()
    except CLIError:
        raise
    except Exception as e:
        raise CLIError(f"{what} {target.description} failed: {type(e).__name__}: "
                       f"{str(e).strip()}{where(e, path)}.") from e
