"""The one compiled part of whilst: an XLA:CPU handler that leaves residual stacks
and checkpoint slots unwritten (csrc/uninitialized_cpu.c). It is optional: where no
C compiler is found, the install goes on and whilst fills them instead (slower on
JAX CPU, same results). Everything else is declared in pyproject.toml."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("whilst._uninitialized_cpu", ["csrc/uninitialized_cpu.c"],
                             include_dirs=["csrc"], optional=True)])
