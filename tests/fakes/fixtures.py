"""pytest fixtures yielding a started wire fake and stopping it afterwards. `tests/conftest.py`
re-exports them with `from tests.fakes.fixtures import *`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.discord import FakeDiscord, patch_discord_urls
from tests.fakes.llm import FakeLLM
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

__all__ = ["fake_discord", "fake_llm", "fake_slack", "fake_telegram"]


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    fake = FakeLLM()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    fake = FakeSlack()
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
async def fake_discord() -> AsyncIterator[FakeDiscord]:
    """Also points discord.py's Route.BASE / DEFAULT_GATEWAY at the fake for the test's duration."""
    fake = FakeDiscord()
    await fake.start()
    with patch_discord_urls(fake):
        yield fake
    await fake.stop()
