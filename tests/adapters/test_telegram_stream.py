"""Telegram live previews end to end: real aiogram against the fake Bot API (which enforces about
one edit or draft a second per chat, and refuses entities outside the text), the whole gateway, and
the fake LLM streaming for real, held piece by piece by a StreamGate. The fake and the gateway share
one virtual clock."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.adapters.test_telegram import ALICE, GROUP, VirtualTime, running
from tests.fakes.llm import FakeLLM, Paced, Reply, StreamGate
from tests.fakes.telegram import FakeTelegram, SentMessage, retry_after


class HeldTime(VirtualTime):
    """VirtualTime whose long waits (a draft's keep-alive, say) end when the test moves the clock
    past them (`advance`), as a real clock would, instead of never."""

    def __init__(self) -> None:
        super().__init__()
        self._parked: list[tuple[float, asyncio.Future[None]]] = []

    async def sleep(self, seconds: float) -> None:
        if seconds <= self.SHORT:
            await super().sleep(seconds)
            return
        self.sleeps.append(seconds)
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked.append((self.t + seconds, woken))
        await woken

    async def advance(self, seconds: float) -> None:
        for _ in range(20):
            # what runs now (a wait that is about to start) starts before the clock moves
            await asyncio.sleep(0)
        self.t += seconds
        for deadline, woken in self._parked:
            if deadline <= self.t and not woken.done():
                woken.set_result(None)
        self._parked = [(d, w) for d, w in self._parked if not w.done()]


ANSWER = (
    "Here is the plan, in **three** steps:\n\n1. read the file\n2. change it\n\n```python\n"
    "def run():\n    return 42\n```\nand that is all."
)
EDIT_GROUPS = "streaming:\n  mode: edit\n"
MENTION = "@gw_test_bot what is the plan?"


async def answer_piece_by_piece(
    tg: FakeTelegram, gate: StreamGate, visible: Callable[[], int], count: int = 3
) -> None:
    """Hand out one piece at a time until the chat
    showed `count` updates (`visible()` counts them)."""
    for n in range(1, count + 1):
        gate.release(1)
        await tg.wait_until(
            partial(shown_at_least, visible, n), 10, partial(str, f"update {n} never showed")
        )
    gate.release_all()


def shown_at_least(visible: Callable[[], int], n: int) -> bool:
    return visible() >= n


def updates(tg: FakeTelegram, chat: int) -> int:
    """How many versions of the bot's first message in `chat` the user has seen (opened + edits)."""
    sent = tg.sent_messages(chat)
    return len(sent[0].edits) + 1 if sent else 0


async def unstreamed(
    tmp_path: Path, llm: FakeLLM, chat: int, text: str, *, chat_type: str = "private"
) -> SentMessage:
    """What the same answer looks like with streaming
    off: the bytes the streamed answer must end up as."""
    home = tmp_path / "unstreamed"
    home.mkdir()
    async with FakeTelegram() as tg:
        llm.script(Reply(ANSWER))
        async with running(home, llm, tg, "streaming:\n  mode: off\n"):
            tg.inject_message(chat, text, chat_type=chat_type)
            return await tg.wait_for_sent(chat)


async def test_a_private_chat_sees_drafts_then_one_normal_message(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    tg = FakeTelegram()
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, tg) as run:  # the default: drafts in private chats
            tg.inject_message(ALICE, "what is the plan?")
            await answer_piece_by_piece(tg, gate, lambda: len(tg.drafts_to(ALICE)))
            final = await tg.wait_for_sent(ALICE)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    drafts = tg.drafts_to(ALICE)
    assert len(drafts) >= 3 and all(b.startswith(a.rstrip()) for a, b in itertools.pairwise(drafts))
    # one draft id: Telegram animates it as it grows
    assert len({d.draft_id for d in tg.drafts}) == 1
    times = [d.at for d in tg.drafts]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))
    plain = await unstreamed(tmp_path, fake_llm, ALICE, "what is the plan?")
    assert (final.text, final.entities) == (plain.text, plain.entities)  # byte for byte
    assert len(tg.sent_messages(ALICE)) == 1 and final.edits == ()
    assert tg.flood_violations == [] and tg.refused == []


async def test_a_group_sees_one_message_grow_and_become_the_answer(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    tg = FakeTelegram()
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, tg, EDIT_GROUPS) as run:
            asked = tg.inject_message(GROUP, MENTION, chat_type="supergroup")
            await answer_piece_by_piece(tg, gate, lambda: updates(tg, GROUP))
            await tg.wait_until(lambda: tg.sent_messages(GROUP)[0].text.endswith("all."), 10)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    [message] = tg.sent_messages(GROUP)  # the preview became the answer: no second message
    assert len(message.edits) >= 3  # visible updates before the final
    assert message.reply_to_message_id == int(tg.injected[asked]["message"]["message_id"])
    plain = await unstreamed(tmp_path, fake_llm, GROUP, MENTION, chat_type="supergroup")
    assert (message.text, message.entities) == (plain.text, plain.entities)
    assert tg.flood_violations == [] and tg.refused == []
    edits = [c.at for c in tg.calls if c.name in ("sendmessage", "editmessagetext")]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(edits))


async def test_a_code_fence_cut_by_the_stream_is_never_refused(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    tg = FakeTelegram()
    await tg.start()
    code = "Look:\n```python\n" + "".join(
        f"x{i} = {i} * 2  # a comment with *stars* and _under_\n" for i in range(8)
    )
    try:
        async with FakeLLM(stream_chunk_chars=23) as llm:
            # pieces end inside the fence and inside the markers
            llm.script(Paced(Reply(code + "```\ndone"), gate=gate))
            async with running(home, llm, tg, EDIT_GROUPS) as run:
                tg.inject_message(GROUP, MENTION, chat_type="supergroup")
                await answer_piece_by_piece(tg, gate, lambda: updates(tg, GROUP), 6)
                await tg.wait_until(lambda: tg.sent_messages(GROUP)[0].text.endswith("done"), 10)
                await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    shown = [c.body for c in tg.calls if c.name in ("sendmessage", "editmessagetext")]
    assert len(shown) >= 5 and tg.refused == []
    # fence closed
    assert all(any(e["type"] == "pre" for e in body.get("entities") or ()) for body in shown[1:])


async def test_a_429_on_a_draft_pauses_the_stream_for_the_wait(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()
    tg = FakeTelegram()
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        tg.fail("sendMessageDraft", None, retry_after(5))
        async with running(home, fake_llm, tg, time_=virtual) as run:
            tg.inject_message(ALICE, "what is the plan?")
            gate.release(1)
            await tg.wait_for_call("sendmessagedraft")
            gate.release(1)
            await tg.wait_for_call("sendmessagedraft", count=2)
            gate.release_all()
            final = await tg.wait_for_sent(ALICE)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    assert final.text.endswith("and that is all.") and tg.flood_violations == []
    calls = [c.at for c in tg.calls if c.name in ("sendmessagedraft", "sendmessage")]
    assert calls[2] - calls[1] >= 5.0  # nothing went out inside the flood wait


async def test_without_drafts_a_private_chat_previews_by_edits(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    tg = FakeTelegram(drafts_supported=False)
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, tg) as run:
            tg.inject_message(ALICE, "what is the plan?")
            await answer_piece_by_piece(tg, gate, lambda: updates(tg, ALICE))
            await tg.wait_until(lambda: tg.sent_messages(ALICE)[0].text.endswith("all."), 10)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    [message] = tg.sent_messages(ALICE)
    assert len(message.edits) >= 3 and tg.drafts == [] and tg.flood_violations == []


async def test_a_kill_mid_stream_in_a_group_gives_one_answer_in_the_preview(
    home: Path, fake_llm: FakeLLM
) -> None:
    gate = StreamGate()
    virtual = VirtualTime()  # time goes on across the restart, for the gateway and Telegram alike
    tg = FakeTelegram()
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate), Reply(ANSWER))
        async with running(
            home, fake_llm, tg, EDIT_GROUPS + "daemon:\n  drain_seconds: 0\n", time_=virtual
        ):
            tg.inject_message(GROUP, MENTION, chat_type="supergroup")
            gate.release(2)
            await tg.wait_until(
                lambda: bool(tg.sent_messages(GROUP)) and bool(tg.sent_messages(GROUP)[0].edits), 10
            )
        # the daemon died mid-answer (drain 0: the turn was cut and stays stored); a new one starts
        # a while later
        gate.release_all()
        virtual.t += 5.0
        async with running(home, fake_llm, tg, EDIT_GROUPS, time_=virtual) as run:
            await tg.wait_until(lambda: tg.sent_messages(GROUP)[0].text.endswith("all."), 10)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    [message] = tg.sent_messages(GROUP)  # the stale preview became the one answer
    assert message.text.endswith("and that is all.") and tg.flood_violations == []


async def test_a_draft_is_kept_alive_through_a_long_pause_in_the_answer(
    home: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Telegram drops a draft 30 s after its last update: through a long tool call (the model's
    stream held for 90 s) the user keeps seeing what was written so far, and then the answer."""
    gate = StreamGate()
    virtual = HeldTime()
    tg = FakeTelegram()
    await tg.start()

    def fresh() -> bool:
        draft = tg.draft_showing(ALICE)
        return draft is not None and virtual.t - draft.at < 21.0

    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        async with running(home, fake_llm, tg, time_=virtual) as run:
            tg.inject_message(ALICE, "what is the plan?")
            gate.release(1)
            await tg.wait_until(lambda: tg.draft_showing(ALICE) is not None, 10)
            first = tg.drafts_to(ALICE)
            for _ in range(30):  # the model says nothing for 90 s
                await virtual.advance(3.0)
                await tg.wait_until(
                    fresh, 5, lambda: f"the draft vanished at t={virtual.t}: {tg.expired_drafts}"
                )
            gate.release_all()
            final = await tg.wait_for_sent(ALICE)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    # the answer took the draft's place
    assert tg.expired_drafts == [] and tg.draft_showing(ALICE) is None
    again = tg.drafts[len(first) : len(first) + 4]
    # the same text, shown again every 20 s of silence
    assert [d.text for d in again] == [first[-1]] * 4
    assert len({d.draft_id for d in tg.drafts}) == 1
    assert (
        final.text.endswith("and that is all.") and tg.flood_violations == [] and tg.refused == []
    )


async def test_a_flood_wait_another_call_earned_holds_the_draft_back(
    home: Path, fake_llm: FakeLLM
) -> None:
    """Telegram's flood wait covers the chat: after "typing…" got a 429, no draft goes before the
    wait is over."""
    gate = StreamGate()
    tg = FakeTelegram()
    await tg.start()
    try:
        fake_llm.script(Paced(Reply(ANSWER), gate=gate))
        tg.fail("sendChatAction", retry_after(5))
        async with running(home, fake_llm, tg, time_=VirtualTime()) as run:
            tg.inject_message(ALICE, "what is the plan?")
            await tg.wait_for_call("sendchataction")
            gate.release_all()
            await tg.wait_for_sent(ALICE)
            await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    limited = next(c.at for c in tg.calls if c.name == "sendchataction")
    first_draft = next(c.at for c in tg.calls if c.name == "sendmessagedraft")
    assert first_draft - limited >= 5.0 and tg.flood_violations == []


async def test_a_long_group_answer_stays_under_twenty_messages_a_minute(home: Path) -> None:
    """A group takes about 20 sends and edits a minute from a bot (the fake refuses the 21st): a
    preview that grows for a long time is edited no more often than that, and its final edit fits
    too."""
    gate = StreamGate()
    tg = FakeTelegram()
    await tg.start()
    try:
        async with FakeLLM(stream_chunk_chars=8) as llm:
            llm.script(Paced(Reply("Step by step: " + "one more word " * 30 + "done."), gate=gate))
            async with running(home, llm, tg, EDIT_GROUPS, time_=VirtualTime()) as run:
                tg.inject_message(GROUP, MENTION, chat_type="supergroup")
                await answer_piece_by_piece(tg, gate, lambda: updates(tg, GROUP), 25)
                await tg.wait_until(lambda: tg.sent_messages(GROUP)[0].text.endswith("done."), 10)
                await run.gw.sessions.wait_idle()
    finally:
        await tg.stop()
    [message] = tg.sent_messages(GROUP)
    assert len(message.edits) >= 25 and tg.flood_violations == [] and tg.refused == []
    calls = [c.at for c in tg.calls if c.name in ("sendmessage", "editmessagetext")]
    assert all(sum(1 for t in calls if 0 <= t - start < 60.0) <= 20 for start in calls)
