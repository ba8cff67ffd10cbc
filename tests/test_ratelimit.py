"""Send limits: when each message may go out, per chat and per bot, measured on a virtual clock."""

from __future__ import annotations

import asyncio

import pytest

from gateway.delivery.ratelimit import PLATFORM_LIMITS, PlatformLimits, RateLimiter, Rule
from gateway.events import ChatRef
from tests.fakeclock import FakeClock


def limiter(clock: FakeClock) -> RateLimiter:
    return RateLimiter(clock=clock.monotonic, sleep=clock.sleep)


async def send_times(clock: FakeClock, lim: RateLimiter, chats: list[ChatRef]) -> list[float]:
    """Acquire a slot for each chat in turn (as one
    sender would); the clock time each one went out."""
    times = []
    for chat in chats:
        await lim.acquire(chat)
        times.append(clock.monotonic())
    return times


async def test_telegram_dm_gets_one_message_per_second() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    dm = ChatRef("telegram", "dm", "42")
    assert await clock.run(send_times(clock, lim, [dm] * 4)) == [0.0, 1.0, 2.0, 3.0]


async def test_telegram_group_gets_twenty_per_minute() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    group = ChatRef("telegram", "group", "-100")
    times = await clock.run(send_times(clock, lim, [group] * 22))
    assert times[:20] == [float(i) for i in range(20)]  # 1/s per chat for the first twenty
    assert times[20] == 60.0  # the 21st waits until the first leaves the one-minute window
    assert times[21] == 61.0


async def test_telegram_bot_gets_thirty_per_second_across_chats() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    chats = [ChatRef("telegram", "dm", str(i)) for i in range(35)]
    times = await clock.run(send_times(clock, lim, chats))
    assert times[:30] == [0.0] * 30
    assert times[30:] == [1.0] * 5


async def test_discord_channel_gets_five_per_five_seconds() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    channel = ChatRef("discord", "channel", "C")
    times = await clock.run(send_times(clock, lim, [channel] * 7))
    assert times == [0.0] * 5 + [5.0] * 2


async def test_slack_channel_gets_one_per_second_and_threads_share_it() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    thread_a = ChatRef("slack", "channel", "C1", "171.1")
    thread_b = ChatRef("slack", "channel", "C1", "171.2")
    other = ChatRef("slack", "channel", "C2")
    times = await clock.run(send_times(clock, lim, [thread_a, thread_b, other]))
    # C2 has its own window; it only waited behind the single sender
    assert times == [0.0, 1.0, 1.0]


async def test_our_own_platforms_are_not_limited() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    times = await clock.run(
        send_times(clock, lim, [ChatRef("web", "dm", "x")] * 50 + [ChatRef("cli", "dm", "y")] * 50)
    )
    assert set(times) == {0.0}


async def test_429_pauses_that_chat_only() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    a, b = ChatRef("telegram", "dm", "A"), ChatRef("telegram", "dm", "B")
    lim.pause(a, 7.5)
    assert lim.delay(a) == 7.5 and lim.delay(b) == 0.0
    got: dict[str, float] = {}

    async def one(chat: ChatRef) -> None:
        await lim.acquire(chat)
        got[chat.chat_id] = clock.monotonic()

    await clock.run(asyncio.gather(one(a), one(b)))
    assert got == {"A": 7.5, "B": 0.0}


async def test_global_429_pauses_the_whole_bot() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    a, b = ChatRef("discord", "channel", "A"), ChatRef("discord", "dm", "B")
    lim.pause(a, 3.0, is_global=True)
    assert lim.delay(b) == 3.0
    assert lim.delay(ChatRef("telegram", "dm", "T")) == 0.0  # another platform's bot is not touched
    assert lim.paused_for(b) == 3.0
    await clock.run(lim.acquire(b))
    assert clock.monotonic() == 3.0


async def test_a_shorter_later_429_does_not_shorten_a_pause() -> None:
    clock = FakeClock()
    lim = limiter(clock)
    chat = ChatRef("slack", "channel", "C")
    lim.pause(chat, 30)
    lim.pause(chat, 2)
    assert lim.delay(chat) == 30


async def test_concurrent_senders_never_share_the_last_slot() -> None:
    clock = FakeClock()
    lim = RateLimiter(
        {"x": PlatformLimits(per_bot=(Rule(2, 10.0),))}, clock=clock.monotonic, sleep=clock.sleep
    )
    times: list[float] = []

    async def one(i: int) -> None:
        await lim.acquire(ChatRef("x", "dm", str(i)))
        times.append(clock.monotonic())

    await clock.run(asyncio.gather(*(one(i) for i in range(5))))
    assert sorted(times) == [0.0, 0.0, 10.0, 10.0, 20.0]


def test_every_platform_limit_names_its_source() -> None:
    assert set(PLATFORM_LIMITS) == {"telegram", "discord", "slack"}
    assert all(limits.source.startswith("https://") for limits in PLATFORM_LIMITS.values())
    with pytest.raises(ValueError):
        Rule(0, 1.0)
