"""Live previews in the core (gateway/delivery/stream.py, previews.py, pacing.py, partial.py): the
real gateway graph on a virtual clock, a contract-fake adapter with the LivePreview ability and a
model that writes its answer piece by piece. What is asserted is what the chat shows, when, and what
the final answer replaces.
"""

from __future__ import annotations

import asyncio
import itertools
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from gateway.config.settings import StreamingByChat, StreamingConfig, load_config
from gateway.delivery.pacing import ChatPacer
from gateway.delivery.partial import PartialRenderer, preview_parts, progress_line, split_raw
from gateway.errors import (
    ConfigError,
    MarkupRejected,
    PlatformUnavailable,
    PreviewGone,
    RateLimited,
)
from gateway.events import PreviewStyle
from gateway.llm.types import ChatMessage, LLMReply, TextSink, ToolCall, ToolDef, Usage
from gateway.prompt.hints import load_platform_facts
from tests.delivery import (
    TELEGRAM_CONFIG,
    PreviewAdapter,
    ReplyLLM,
    StreamingLLM,
    gateway_on,
    write_home,
)
from tests.fakeclock import FakeClock
from tests.helpers import inbound
from tests.test_replay import store_unanswered

EDIT = TELEGRAM_CONFIG + "streaming:\n  mode: edit\n"
PIECES = ["The answer ", "grows ", "piece ", "by ", "piece."]
FACTS = load_platform_facts()


async def one_turn(
    clock: FakeClock,
    home: Path,
    adapter: PreviewAdapter,
    llm: object,
    text: str = "hi",
    *,
    chat_type: str = "dm",
) -> None:
    gw = gateway_on(clock, home, [adapter], llm)
    try:
        await clock.run(
            gw.sessions.submit(
                inbound(text, platform="telegram", chat_id="100", user_id="u1", chat_type=chat_type)
            )
        )
        await clock.run(gw.sessions.wait_idle())
    finally:
        gw.store.close()


class Revised(StreamingLLM):
    """Streams its pieces, then answers with a slightly different text (the preview cannot have
    shown it)."""

    async def complete(self, **kw: object) -> LLMReply:
        reply = await super().complete(**kw)  # type: ignore[arg-type]
        return LLMReply(reply.text + " (revised)", (), reply.usage, reply.model, reply.provider)


# ---- edit mode -----------------------------------------------------------------------------------


async def test_the_answer_grows_in_place_then_the_final_replaces_it(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    await one_turn(clock, home, tg, StreamingLLM(clock, PIECES, every=0.5))
    assert len(tg.shows) >= 2  # visible updates before the final
    times = [t for t, _ in tg.shows]
    # paced: one update a second at most
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))
    assert tg.shown()[0] == "The answer" and all(
        b.startswith(a) for a, b in itertools.pairwise(tg.shown())
    )
    # it already shows the answer:
    assert tg.shown()[-1] == "The answer grows piece by piece." and tg.sent == []
    assert tg.finished == []  # no second message, and no edit that would change nothing


async def test_a_final_that_differs_from_the_last_preview_is_edited_into_it(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)

    await one_turn(clock, home, tg, Revised(clock, PIECES, every=0.5))
    assert [(mid, m.text) for mid, m in tg.finished] == [
        ("p1", "The answer grows piece by piece. (revised)")
    ]
    assert tg.sent == [m for _, m in tg.finished]  # the preview became it: no second message
    assert tg.attempts[0][0] - tg.shows[-1][0] >= 1.0  # the final edit is paced like the preview's


async def test_the_final_text_is_the_non_streamed_answer_byte_for_byte(
    home: Path, tmp_path: Path
) -> None:
    answer = [
        "Intro with **bold** and a list:\n\n",
        "- one\n- two\n\n```py\nprint('x')\n",
        "```\nDone ✓",
    ]
    finals = []
    for mode in ("off", "edit"):
        place = tmp_path / mode
        place.mkdir()
        write_home(place, TELEGRAM_CONFIG + f"streaming:\n  mode: {mode}\n")
        clock = FakeClock()
        tg = PreviewAdapter("telegram", clock)
        await one_turn(clock, place, tg, StreamingLLM(clock, answer))
        finals.append(tg.view())
        assert bool(tg.shows) is (mode == "edit")
    assert finals[0] == finals[1] and len(finals[0]) == 1


async def test_a_partial_inside_a_code_fence_is_shown_closed(home: Path) -> None:
    write_home(
        home,
        TELEGRAM_CONFIG.replace(
            "telegram:", "discord:\n  token: x\n  allowed_users: [u1]\ntelegram:"
        )
        + "streaming:\n  mode: edit\n",
    )
    clock = FakeClock()
    dc = PreviewAdapter("discord", clock)
    gw = gateway_on(
        clock, home, [dc], StreamingLLM(clock, ["Code:\n```python\nx = 1\n", "y = 2\n", "```\nok"])
    )
    try:
        await clock.run(
            gw.sessions.submit(inbound("code", platform="discord", chat_id="9", user_id="u1"))
        )
        await clock.run(gw.sessions.wait_idle())
    finally:
        gw.store.close()
    # the open fence is closed for the partial
    assert dc.shown()[0] == "Code:\n\n```python\nx = 1\n```"
    assert all(text.count("```") % 2 == 0 for text in dc.shown())


async def test_a_long_partial_rolls_over_into_a_second_message(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    para = " ".join(["alpha"] * 500)  # 2999 characters: two of them do not fit one Telegram message
    await one_turn(
        clock, home, tg, StreamingLLM(clock, [para, "\n\n", para[:1500], para[1500:]], every=2.0)
    )
    parts = [(part.index, part.platform_message_id) for _, part in tg.shows]
    assert (0, None) in parts and (1, None) in parts  # a second message was opened past 4096
    assert all(len(part.text.encode("utf-16-le")) // 2 <= 4096 for _, part in tg.shows)
    # both became the final's two chunks, and no third message
    assert list(tg.messages) == ["p1", "p2"]
    assert [t.rstrip() for t in tg.texts()] == [para, para]


async def test_parts_the_final_does_not_need_are_taken_down(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)

    class Shrinking(StreamingLLM):
        """Streams two long paragraphs, then answers with
        a short text (a retry's different answer)."""

        async def complete(self, **kw: object) -> LLMReply:
            reply = await super().complete(**kw)  # type: ignore[arg-type]
            return LLMReply("short in the end", (), reply.usage, reply.model, reply.provider)

    para = " ".join(["alpha"] * 500)
    await one_turn(clock, home, tg, Shrinking(clock, [para, "\n\n", para], every=2.0))
    assert [m.text for _, m in tg.finished] == ["short in the end"] and tg.dropped == ["p2"]


async def test_a_draft_platform_shows_only_the_newest_part_and_the_final_is_sent(
    home: Path,
) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock, style=PreviewStyle(1.0, ephemeral=True))
    await one_turn(clock, home, tg, StreamingLLM(clock, PIECES))
    assert len(tg.shows) >= 2 and all(part.platform_message_id is None for _, part in tg.shows)
    assert tg.finished == [] and [m.text for m in tg.sent] == ["The answer grows piece by piece."]


async def test_a_draft_that_would_vanish_is_shown_again_until_the_answer_comes(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock, style=PreviewStyle(1.0, ephemeral=True, lasts_s=30.0))
    # long silences
    await one_turn(clock, home, tg, StreamingLLM(clock, ["Thinking ", "hard."], every=100.0))
    times = [t for t, _ in tg.shows]
    # never 30 s without
    assert all(b - a <= 20.0 for a, b in itertools.pairwise([*times, tg.attempts[0][0]]))
    assert tg.shown().count("Thinking") >= 5 and tg.shown().count("Thinking hard.") >= 5
    assert [m.text for m in tg.sent] == ["Thinking hard."] and times[-1] <= tg.attempts[0][0]
    shows = len(tg.shows)
    await clock.advance(100.0)
    assert len(tg.shows) == shows  # the answer is out: the keep-alive ended with the turn


async def test_a_turn_cut_mid_stream_and_too_old_to_answer_gets_the_offline_note_in_its_preview(
    home: Path,
) -> None:
    """After a long outage the cut turn is not answered (delivery.replay_max_age_minutes): its
    half-written preview becomes the offline note instead of staying above it."""
    write_home(home, EDIT)
    clock = FakeClock()
    gw = gateway_on(clock, home, [PreviewAdapter("telegram", clock)], ReplyLLM())
    asked = inbound(
        "what is the weather",
        platform="telegram",
        chat_id="100",
        user_id="u1",
        message_id="old",
        received_at=clock.now() - timedelta(hours=3),
    )
    store_unanswered(gw, asked)
    [(turn,)] = [(f"t{r[0]}",) for r in gw.store.all("SELECT id FROM inbound")]
    gw.store.put_preview(turn, 0, "telegram", "100", "p1", now=clock.now() - timedelta(hours=3))
    gw.store.close()
    tg = PreviewAdapter("telegram", clock)
    tg.messages["p1"] = ("The weather today is", ())  # what the chat still shows of the cut answer
    gw = gateway_on(clock, home, [tg], ReplyLLM())
    try:
        assert await clock.run(gw.sessions.replay()) == (0, 1)
        await clock.run(gw.sessions.wait_idle())
        assert gw.store.all("SELECT * FROM previews") == []
    finally:
        gw.store.close()
    assert tg.texts() == [gw.config.delivery.offline_notice] and [
        mid for mid, _ in tg.finished
    ] == ["p1"]


async def test_preview_records_of_turns_never_finished_are_forgotten_at_start_after_two_days(
    home: Path,
) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    gw = gateway_on(clock, home, [PreviewAdapter("telegram", clock)], ReplyLLM())
    gw.store.put_preview(
        "t1", 0, "telegram", "100", "p1", now=clock.now() - timedelta(days=2, minutes=1)
    )
    gw.store.put_preview(
        "t2", 0, "telegram", "100", "p2", now=clock.now() - timedelta(days=1, hours=23)
    )
    gw.store.close()
    gw = gateway_on(clock, home, [PreviewAdapter("telegram", clock)], ReplyLLM())
    try:
        assert [r[0] for r in gw.store.all("SELECT turn_id FROM previews")] == ["t2"]
    finally:
        gw.store.close()


# ---- weather -------------------------------------------------------------------------------------


async def test_a_429_pauses_the_stream_and_the_final_waits_only_that_long(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(None, RateLimited("telegram", 7.0))
    await one_turn(clock, home, tg, StreamingLLM(clock, PIECES * 4, every=0.5))
    limited_at = tg.shows[1][0]
    assert tg.shows[2][0] - limited_at >= 7.0  # nothing went into the flood wait
    assert tg.texts() == ["".join(PIECES * 4)]


async def test_an_update_refused_with_a_429_goes_after_the_pause_without_new_text(
    home: Path,
) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(None, RateLimited("telegram", 3.0))
    # then silence for 20 s
    await one_turn(clock, home, tg, Revised(clock, ["one ", "two"], every=20.0))
    refused_at = tg.shows[1][0]
    assert [(t - refused_at, part.text) for t, part in tg.shows[1:]] == [
        (0.0, "one two"),
        (3.0, "one two"),
    ]
    assert tg.attempts[0][0] > refused_at + 3.0  # the preview showed it before the answer came


async def test_a_deleted_preview_is_opened_again_though_no_more_text_comes(home: Path) -> None:
    """Pieces 20 s apart: the update that found its preview deleted opens a new one on the next tick
    (a pacing interval later), not with the model's next words (it waited for them, like a 429 did
    before 6c5811f)."""
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(None, PreviewGone("telegram", "message to edit not found"))
    await one_turn(clock, home, tg, StreamingLLM(clock, PIECES, every=20.0))
    gone_at = tg.shows[1][0]
    assert tg.shows[2][1].platform_message_id is None and tg.shows[2][0] - gone_at < 5.0
    assert tg.shows[2][1].text == tg.shows[1][1].text


async def test_rejected_markup_falls_back_to_plain_text(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(MarkupRejected("telegram", "can't parse entities"))
    await one_turn(clock, home, tg, StreamingLLM(clock, ["a **bold** ", "claim"], every=1.5))
    assert tg.shows[0][1].entities and all(not part.entities for _, part in tg.shows[1:])
    assert len(tg.finished) == 1


async def test_a_preview_someone_deleted_is_opened_again_and_the_final_posted_anew(
    home: Path,
) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(None, PreviewGone("telegram", "message to edit not found"))
    # and the final finds its message gone too
    tg.fail(PreviewGone("telegram", "message to edit not found"))
    await one_turn(clock, home, tg, Revised(clock, PIECES * 3, every=0.5))
    opened = [part.platform_message_id for _, part in tg.shows]
    assert opened[:3] == [None, "p1", None]
    # sent as a new message
    assert tg.events[-2:] == ["finish 0 p2", "send 0"] and tg.finished == []
    assert tg.sent[-1].text == "".join(PIECES * 3) + " (revised)"


async def test_a_failing_preview_stops_and_the_answer_still_comes(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.fail_preview(PlatformUnavailable("telegram", "502"))
    await one_turn(clock, home, tg, StreamingLLM(clock, PIECES * 3, every=0.5))
    assert len(tg.shows) == 1 and [m.text for m in tg.sent] == ["".join(PIECES * 3)]


async def test_a_failed_turn_takes_its_preview_down(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)

    class Broken(StreamingLLM):
        async def complete(self, **kw: object) -> LLMReply:
            await super().complete(**kw)  # type: ignore[arg-type]
            raise RuntimeError("model exploded")

    await one_turn(clock, home, tg, Broken(clock, PIECES))
    assert tg.dropped == ["p1"] and tg.finished == []
    assert [m.kind.value for m in tg.sent] == ["error"]


async def test_closing_waits_for_the_call_on_the_wire_and_keeps_its_message(home: Path) -> None:
    """The turn ends while the first preview call is still on the wire: the id it returns is stored
    before the final answer goes, and the final edits that message instead of posting a second
    one."""
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    tg.hold = asyncio.Event()
    gw = gateway_on(clock, home, [tg], StreamingLLM(clock, ["only piece"], every=0.0))
    try:
        await gw.sessions.submit(inbound("hi", platform="telegram", chat_id="100", user_id="u1"))
        await asyncio.wait_for(tg.in_call.wait(), 5)
        await clock.settle()
        assert tg.sent == []  # the answer is ready but waits for the call on the wire
        tg.hold.set()
        await clock.run(gw.sessions.wait_idle())
        assert [
            r["platform_message_id"]
            for r in gw.store.all("SELECT platform_message_id FROM outbound")
        ] == ["p1"]
    finally:
        gw.store.close()
    # the one message shows the answer
    assert tg.texts() == ["only piece"] and list(tg.messages) == ["p1"]


# ---- progress mode -------------------------------------------------------------------------------


class ToolThenAnswer(ReplyLLM):
    """Calls `memory` twice, then `session_search`, then
    answers; each call takes 1.5 s of virtual time."""

    def __init__(self, clock: FakeClock, every: float = 1.5) -> None:
        super().__init__()
        self.clock = clock
        self.every = every
        self.steps = [["memory", "memory"], ["session_search"]]

    async def complete(
        self,
        *,
        system: str,
        messages: list[ChatMessage],  # type: ignore[override]
        tools: list[ToolDef],  # type: ignore[override]
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        await self.clock.sleep(self.every)
        if self.steps:
            names = self.steps.pop(0)
            calls = tuple(ToolCall(f"c{i}{n}", n, "{}") for i, n in enumerate(names))
            return LLMReply("", calls, Usage(1, 1), self.model, self.provider)
        if stream is not None:
            stream.text("Found it.")
            await self.clock.sleep(1.5)
        return LLMReply("Found it.", (), Usage(1, 1), self.model, self.provider)


async def test_progress_lists_the_tools_and_the_answer_comes_as_a_new_message(home: Path) -> None:
    write_home(home, TELEGRAM_CONFIG + "streaming:\n  mode: progress\n")
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    await one_turn(clock, home, tg, ToolThenAnswer(clock))
    assert {part.index for _, part in tg.shows} == {-1}
    assert tg.shown()[-1] == "🔧 memory ×2 · session_search"
    assert tg.finished == [] and [m.text for m in tg.sent] == ["Found it."] and tg.dropped == []


class SaysThenLooks(ReplyLLM):
    """Writes a sentence and calls `memory`, then writes the answer; each call takes 1.5 s of
    virtual time."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.calls = 0

    async def complete(
        self,
        *,
        system: str,
        messages: list[ChatMessage],  # type: ignore[override]
        tools: list[ToolDef],  # type: ignore[override]
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        self.calls += 1
        text = "Let me look that up." if self.calls == 1 else "Found it."
        if stream is not None:
            stream.text(text)
        await self.clock.sleep(1.5)
        calls = (ToolCall("c1", "memory", "{}"),) if self.calls == 1 else ()
        return LLMReply(text, calls, Usage(1, 1), self.model, self.provider)


async def test_each_model_call_of_a_turn_starts_the_preview_over(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    await one_turn(clock, home, tg, SaysThenLooks(clock))
    # never the two calls' text run together
    assert tg.shown() == ["Let me look that up.", "Found it."]
    assert tg.texts() == ["Found it."] and tg.sent == [m for _, m in tg.finished]


async def test_the_progress_line_catches_up_before_the_answer_comes_below_it(home: Path) -> None:
    write_home(home, TELEGRAM_CONFIG + "streaming:\n  mode: progress\n")
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    # the answer right after the last tool
    await one_turn(clock, home, tg, ToolThenAnswer(clock, every=0.0))
    assert tg.texts() == ["🔧 memory ×2 · session_search", "Found it."]
    # the answer still paced after the status line's edit
    assert tg.attempts[0][0] - tg.shows[-1][0] >= 1.0


async def test_edit_mode_shows_no_tool_progress(home: Path) -> None:
    write_home(home, EDIT)
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    await one_turn(clock, home, tg, ToolThenAnswer(clock))
    assert tg.shown() == ["Found it."] and tg.shows[0][1].index == 0


# ---- modes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "platform, chat_type, mode",
    [
        ("telegram", "dm", "edit"),
        ("telegram", "group", "off"),
        ("web", "dm", "edit"),
        ("discord", "dm", "off"),
        ("slack", "channel", "off"),
        ("cli", "dm", "off"),
    ],
)
def test_auto_streams_telegram_private_chats_and_the_web_chat(
    platform: str, chat_type: str, mode: str
) -> None:
    assert StreamingConfig().mode_for(platform, chat_type) == mode


def test_by_platform_overrides_the_mode(home: Path) -> None:
    (home / "config.yaml").write_text(
        textwrap.dedent("""\
        streaming:
          mode: progress
          by_platform:
            telegram: off
            discord: {group: edit}
        """)
    )
    config = load_config(home, env={}).streaming
    assert config.by_platform["discord"] == StreamingByChat(group="edit")
    assert [
        config.mode_for(p, c)
        for p, c in [("telegram", "dm"), ("discord", "group"), ("discord", "dm"), ("slack", "dm")]
    ] == ["off", "edit", "progress", "progress"]


def test_an_unknown_mode_is_a_located_error(home: Path) -> None:
    (home / "config.yaml").write_text("streaming:\n  by_platform:\n    slack: sometimes\n")
    with pytest.raises(ConfigError, match=r"config.yaml:3: streaming.by_platform.slack: expected"):
        load_config(home, env={})


async def test_off_makes_no_preview_calls_and_no_streamed_request(home: Path) -> None:
    write_home(home, TELEGRAM_CONFIG + "streaming:\n  mode: off\n")
    clock = FakeClock()
    tg = PreviewAdapter("telegram", clock)
    llm = StreamingLLM(clock, PIECES)
    await one_turn(clock, home, tg, llm)
    assert tg.shows == [] and llm.streamed == 0


# ---- the pieces on their own ---------------------------------------------------------------------


def test_the_pacer_spaces_calls_per_chat_and_per_account() -> None:
    now = [0.0]
    pacer = ChatPacer(lambda: now[0])
    pacer.track(("slack", "C1"), 1.2, ("slack", "*"))
    pacer.track(("slack", "C2"), 1.2, ("slack", "*"))
    assert pacer.delay(("slack", "C1")) == 0.0 and pacer.delay(("telegram", "1")) == 0.0
    pacer.note(("slack", "C1"))
    now[0] = 0.5
    assert pacer.delay(("slack", "C1")) == pytest.approx(0.7)
    # the workspace's tier counts every channel
    assert pacer.delay(("slack", "C2")) == pytest.approx(0.7)
    pacer.track(("telegram", "1"), 1.1)
    pacer.note(("telegram", "1"), draft=True)
    assert (
        pacer.delay(("telegram", "1")) == pytest.approx(1.1)
        and pacer.delay(("telegram", "1"), send=True) == 0
    )
    pacer.note(("telegram", "1"))  # an edit: the next send keeps its distance as well
    assert pacer.delay(("telegram", "1"), send=True) == pytest.approx(1.1)


def test_partials_are_rendered_like_the_final_and_split_safely() -> None:
    telegram = FACTS["telegram"]
    parts = preview_parts("**bold** and `code", telegram)
    assert [(p.text, [e.type for e in p.entities]) for p in parts] == [("bold and `code", ["bold"])]
    assert preview_parts("   \n", telegram) == []
    assert split_raw("aaaa\nbbbb\ncc", 6) == ["aaaa\n", "bbbb\n", "cc"]
    assert [p.text for p in preview_parts("x" * 10, FACTS["web"], raw=True)] == ["x" * 10]


def test_a_long_answer_is_rendered_a_stretch_at_a_time_never_cut_inside_a_fence() -> None:
    renderer = PartialRenderer(FACTS["discord"])
    text = "".join(
        f"Paragraph {i}: "
        + "word " * 60
        + "\n\n"
        + ("```py\n" + "x = 1\n\n" * 30 + "```\n\n" if i % 3 == 0 else "")
        for i in range(40)
    )
    for end in range(50, len(text) + 97, 97):
        parts = renderer.parts(text[:end])
        assert all(len(p.text) <= 2000 and p.text.count("```") % 2 == 0 for p in parts)
        done = text[: renderer._start]
        assert done.count("```") % 2 == 0  # what is closed never ends inside a fence
    # only the last stretch is still rendered at every update
    assert renderer._start > len(text) - 3000
    assert "".join(p.plain for p in parts).replace("\n", "").startswith("Paragraph 0:")
    renderer.reset()
    assert renderer.parts("fresh start") == preview_parts("fresh start", FACTS["discord"])


def test_the_progress_line_folds_repeats_and_keeps_the_newest() -> None:
    assert progress_line([]) == ""
    assert progress_line(["a", "a", "b", "a"]) == "🔧 a ×2 · b · a"
    assert progress_line([f"t{i}" for i in range(12)]).startswith("🔧 … · t4 · ")
