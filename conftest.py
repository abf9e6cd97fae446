"""Shared by the tests in ``tests/`` and the doctests of ``twill/`` (``--doctest-modules``): the doctests
name files by their path in the checkout (``examples/gemm.py``), so they run in its root."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def _doctests_in_the_checkout_root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if isinstance(request.node, pytest.DoctestItem):
        monkeypatch.chdir(ROOT)
