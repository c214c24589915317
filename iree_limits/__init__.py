"""Reproducers of the IREE 3.13 limits that whilst works around, refuses or falls back
from (README.md lists them); a package so that the tests can import their programs."""
