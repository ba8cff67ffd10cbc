"""Shared fixtures: the wire fakes (tests/fakes) and a gateway home with a config pointing at them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakes.fixtures import *  # noqa: F403 - fixtures are found by name

# Never let a developer's real keys or home leak into a test run.
for _var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "GATEWAY_HOME", "OPENAI_BASE_URL",
             "ANTHROPIC_BASE_URL"):
    os.environ.pop(_var, None)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path
