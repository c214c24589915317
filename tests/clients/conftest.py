"""The client libraries' settings for every test here: equinox's runtime error checks
as NaN (`EQX_ON_ERROR=nan`, read when equinox is imported), as a deployed program
needs them (host callbacks do not export; tests/clients/test_refusals.py)."""
import os

os.environ.setdefault("EQX_ON_ERROR", "nan")
