# The Python tests run against the build (PYTHONPATH=build/python, set by
# tests/python_tests.cmake) with Debian's numpy and PyTorch.
import os

import pytest


@pytest.fixture(scope="session")
def torch():
    """PyTorch, the reference. Under KILN_REQUIRE_TORCH (CI) a missing one fails the test instead of skipping it."""
    if os.environ.get("KILN_REQUIRE_TORCH"):
        import torch as t
        return t
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def kiln_cli():
    path = os.environ.get("KILN")
    if not path:
        pytest.skip("KILN (the kiln command) is not set; ctest sets it")
    return path


@pytest.fixture(scope="session")
def source_dir():
    return os.environ.get("KILN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
