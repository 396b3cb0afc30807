"""Fixtures of the reliability tests.

``checked``: the consistency checker (``PYACC_CHECK=1``) is on for the test, so every
directive is checked as it ends and ``acc.testing.check_consistency()`` can be called;
it is switched off again afterwards.
"""

import pytest

import pyacc as acc


@pytest.fixture
def checked(monkeypatch):
    monkeypatch.setenv("PYACC_CHECK", "1")
    acc.observe.configure()
    yield
    monkeypatch.delenv("PYACC_CHECK")
    acc.observe.configure()
