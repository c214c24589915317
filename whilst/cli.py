"""The `whilst` command: compile, run, inspect and look at modules with While loops.

Each subcommand lives in `whilst._cli`; only `compile` and `ir` import jax, so
`whilst run` and `whilst inspect` work where only the runtime is installed.
Failures print one message and exit with status 1 (2 for a malformed command
line); `--debug` shows the Python traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from whilst import __version__
from whilst._cli._errors import CLIError
from whilst.runtime.targets import DRIVERS, TARGETS

_DESCRIPTION = """\
Ahead-of-time compilation of functions with whilst.while_loop into IREE modules
(.vmfb), and an embedded runtime to run them without JAX.

examples:
  whilst compile model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --grad 1 -o loss.vmfb
  whilst inspect loss.vmfb
  whilst run loss.vmfb --function loss_grad --input x.npy --input w.npy --output out/
  whilst ir model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --grad 1 --graph loops.svg
"""

_COMPILE = """\
Import FUNCTION from MODULE.py, export it to StableHLO (with --grad, also its
gradient as a second function FUNCTION_grad in the same module), compile it
with IREE and write the .vmfb. Prints each stage and how long it took; on a
terminal, the running stage and its elapsed time show on stderr as it runs. Compiled
modules are cached ($WHILST_CACHE_DIR, default ~/.cache/whilst; --no-cache or
WHILST_CACHE_DIR=off to skip it). Existing files are replaced only with --force,
and only regular files. Outputs are checked before any work.

Argument specs are DTYPE[DIMS]: f32[8,4], i32[] (a scalar), f64, bool[3].
A name in place of a size is a symbolic dimension, shared by all --arg
specs: the module then runs for every size (f32[b,4] and i32[b]: one b).
(With IREE 3.13, --grad needs static shapes: the residual stacks of a
symbolic-shaped loop do not compile.)
Several --target flags give one module that runs on each of them.

examples:
  whilst compile model.py:step --arg 'f32[8,4]' --arg 'i32[]' -o step.vmfb
  whilst compile model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --grad 1 -o loss.vmfb
  whilst compile model.py:predict --arg 'f32[b,4]' --arg 'f32[4,4]' -o predict.vmfb
  whilst compile model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' \\
      --target llvm-cpu --target cuda --gpu-arch cuda=sm_80 -o loss.vmfb
  whilst compile model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --emit-mlir mlir/ -o loss.vmfb
"""

_RUN = """\
Load a .vmfb with the embedded runtime (no JAX needed) and call one function on
.npy inputs, one --input per array in the order `whilst inspect` lists. Prints a
summary of each output; with --output, also writes output_0.npy, output_1.npy, ...
(an --output directory that already holds outputs is refused unless --force).
Inputs cast to the module's dtypes only where no value can change: a float64
.npy for an f32 input is refused; convert it with .astype first.

examples:
  whilst run step.vmfb --input x.npy --input n.npy
  whilst run loss.vmfb --function loss_grad --input x.npy --input w.npy --output out/
  whilst run step.vmfb --driver local-task --input x.npy --input n.npy
"""

_INSPECT = """\
Show a module's exported functions with their input and output pytree
structure, shapes and dtypes, the targets it was compiled for, and the
equivalent iree-run-module command line. Needs no JAX and no device.

example:
  whilst inspect loss.vmfb
"""

_IR = """\
Print the IR of FUNCTION (and, with --grad, of its gradient): the jaxpr with
its functional_while equations (role forward / gradient, accumulators), or the
StableHLO with its stablehlo.while ops. --graph draws the loop structure (each
While with its cond and body, the accumulator stacks, and the values passed
from the forward While to the gradient While) as an SVG picture.

examples:
  whilst ir model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]'
  whilst ir model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --grad 0 --stage stablehlo
  whilst ir model.py:loss --arg 'f32[8,4]' --arg 'f32[4,4]' --grad 0 --graph loops.svg
"""


def _parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="whilst", description=_DESCRIPTION, formatter_class=raw)
    parser.add_argument("--version", action="version", version=f"whilst {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show Python tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def function_args(p):
        p.add_argument("function", metavar="MODULE.py:FUNCTION",
                       help="the function to export, e.g. model.py:loss")
        p.add_argument("--arg", action="append", metavar="SPEC",
                       help="one per argument, in order: DTYPE[DIMS], e.g. 'f32[b,4]'")
        p.add_argument("--grad", metavar="ARGNUMS",
                       help="also the gradient with respect to these arguments (e.g. 0 or "
                            "0,1); FUNCTION must return a float scalar")

    def force_option(p):
        p.add_argument("--force", action="store_true",
                       help="replace existing output files (never done otherwise; regular "
                            "files only, never a device, FIFO or directory)")

    p = sub.add_parser("compile", help="export and compile a function to a .vmfb",
                       description=_COMPILE, formatter_class=raw)
    function_args(p)
    p.add_argument("--target", action="append", choices=list(TARGETS),
                   help="IREE target, repeat for a module that runs on each (default llvm-cpu)")
    p.add_argument("--cpu", default="host",
                   help="llvm-cpu target CPU: host (default), generic, or an LLVM CPU name")
    p.add_argument("--gpu-arch", action="append", metavar="[TARGET=]ARCH",
                   help="GPU architecture, e.g. sm_80, gfx942, or cuda=sm_80 for one target "
                        "(defaults: cuda sm_80, rocm gfx942)")
    p.add_argument("--emit-mlir", metavar="DIR",
                   help="also write the StableHLO of each function and the prepared module")
    p.add_argument("-o", "--output", required=True, metavar="OUT.vmfb")
    p.add_argument("--no-cache", action="store_true",
                   help="compile even if the compile cache ($WHILST_CACHE_DIR, default "
                        "~/.cache/whilst) holds this module")
    p.add_argument("--no-loops-in-dispatch", action="store_true",
                   help="step every loop from the host, as on GPUs (by default a module "
                        "for llvm-cpu alone runs each small loop whole inside one dispatch)")
    force_option(p)

    p = sub.add_parser("run", help="run a .vmfb on .npy inputs (no JAX needed)",
                       description=_RUN, formatter_class=raw)
    p.add_argument("module", metavar="MODULE.vmfb")
    p.add_argument("--function", help="function to call (default: main, else the first one)")
    p.add_argument("--input", action="append", metavar="X.npy",
                   help="an input array, one per input leaf, in order")
    p.add_argument("--output", metavar="DIR", help="write the outputs as .npy files here")
    p.add_argument("--driver", default="local-sync", choices=DRIVERS,
                   help="IREE runtime driver (default local-sync)")
    force_option(p)

    p = sub.add_parser("inspect", help="show a .vmfb's functions, signatures and targets",
                       description=_INSPECT, formatter_class=raw)
    p.add_argument("module", metavar="MODULE.vmfb")

    p = sub.add_parser("ir", help="print the IR with its While loops, or draw them",
                       description=_IR, formatter_class=raw)
    function_args(p)
    p.add_argument("--stage", choices=("jaxpr", "stablehlo"), default="jaxpr",
                   help="which IR to print (default jaxpr)")
    p.add_argument("--graph", metavar="OUT.svg", help="draw the loop structure as SVG")
    force_option(p)
    return parser


_COMMANDS = {"compile": "whilst._cli._compile_cmd", "run": "whilst._cli._run_cmd",
             "inspect": "whilst._cli._inspect_cmd", "ir": "whilst._cli._ir_cmd"}


def _require_compiler(command: str) -> None:
    missing = [name for name in ("jax", "iree.compiler") if not _installed(name)]
    if missing:
        raise CLIError(f"`whilst {command}` traces with JAX and compiles with IREE, but "
                       f"{' and '.join(missing)} is not installed here; install them with "
                       f"`pip install 'whilst[compile]'` (`whilst run` and `whilst inspect` "
                       f"need neither).")


def _installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def main(argv=None) -> int:
    """Run the `whilst` command with `argv` (default `sys.argv[1:]`); returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.command in ("compile", "ir"):
            _require_compiler(args.command)
        importlib.import_module(_COMMANDS[args.command]).main(args)
    except CLIError as e:
        if args.debug:
            raise
        print(f"whilst {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"whilst {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
