"""Test-wide setting: the compile cache lives in a temporary directory (never the
user's ~/.cache), shared by the tests of one session and their subprocesses."""
import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def compile_cache_dir(tmp_path_factory):
    os.environ["WHILST_CACHE_DIR"] = str(tmp_path_factory.mktemp("whilst-cache"))
    return os.environ["WHILST_CACHE_DIR"]
