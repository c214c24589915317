"""Test-wide settings: the compile cache lives in a temporary directory (never the
user's ~/.cache), shared by the tests of one session and their subprocesses.

Tests that compile with IREE are marked `iree` (the file's `pytestmark` where all of
them do, else the test's own decorator), the longest ones `slow`, so that
`pytest -m "not iree"` checks the JAX side in a few minutes. The oracles the tests
share are in helpers.py."""
import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def compile_cache_dir(tmp_path_factory):
    os.environ["WHILST_CACHE_DIR"] = str(tmp_path_factory.mktemp("whilst-cache"))
    return os.environ["WHILST_CACHE_DIR"]
