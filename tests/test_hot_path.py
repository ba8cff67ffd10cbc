"""Shortcuts taken on the per-message path give what the longer way gave."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.delivery.rows import render_rows
from gateway.errors import StoreError
from gateway.events import Attachment, ChatRef, Inbound, OutboundKind
from gateway.ops.wiring import Gateway
from gateway.prompt.hints import PlatformFacts
from gateway.store.transcript import decode_inbound, encode_inbound
from gateway.telemetry.logs import MASK, SHAPED_PATTERNS, TOKEN_PATTERNS, Redactor
from tests.fakes.llm import FakeLLM, ToolCall
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config


def test_the_inbound_payload_is_what_asdict_gives() -> None:
    full = Inbound(
        chat=ChatRef("discord", "channel", "C1", "T9"),
        user_id="u1",
        text="héllo 👋",
        message_id="m1",
        received_at=datetime(2026, 5, 4, 10, 0, 1, 5, tzinfo=UTC),
        user_name="Ann",
        reply_to_id="m0",
        attachments=(Attachment("photo", "a.png", "image/png", 12), Attachment("file")),
        is_addressed=False,
        is_bot=True,
        chat_title="general",
        username="ann",
        space_id="G1",
        roles=("r1", "r2"),
    )
    bare = Inbound(
        chat=ChatRef("web", "dm", "c1"),
        user_id="c1",
        text="hi",
        message_id="m2",
        received_at=datetime(2026, 5, 4, tzinfo=UTC),
    )
    for message in (full, bare):
        expected = asdict(message)
        expected["received_at"] = message.received_at.isoformat()
        assert encode_inbound(message) == json.dumps(expected, ensure_ascii=False)
        assert decode_inbound(encode_inbound(message)) == message


def test_a_markdown_platform_gets_the_reply_as_it_is() -> None:
    facts = PlatformFacts(
        name="web", hint="", max_length=100_000, length_unit="chars", flavor="markdown"
    )
    reply = "**Done.** See [the docs](https://example.com):\n\n- one\n- two\n"
    rows = render_rows(
        "t1", ChatRef("web", "dm", "c1"), reply, facts, kind=OutboundKind.REPLY, reply_to_id="m1"
    )
    assert [(r["text"], r["plain"], r["chunk_count"]) for r in rows] == [(reply, reply, 1)]


async def test_every_model_call_of_a_turn_is_on_record_once(
    home: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer's usage is stored in the turn's transaction, earlier calls as they happen; when
    the answer cannot be stored, its call is still recorded."""
    write_config(home, base_url=fake_llm.base_url)
    fake_llm.script(ToolCall("session_search", {"query": "lisbon"}))  # then the fake's echo
    gw = gateway_for(home, [RecordingAdapter("cli")])
    try:
        await gw.sessions.submit(inbound("where did we talk about lisbon?"))
        await gw.sessions.wait_idle()
        assert calls(gw) == 2 == len(fake_llm.anthropic_requests())

        def disk_full(*args: Any, **kwargs: Any) -> None:
            raise StoreError("database or disk is full")

        monkeypatch.setattr(gw.store, "complete_turn", disk_full)
        await gw.sessions.submit(inbound("and now?"))
        await gw.sessions.wait_idle()
        assert calls(gw) == 3 == len(fake_llm.anthropic_requests())
        session = gw.store.active_session("cli:dm:c1")
        assert session is not None
        total = gw.store.one("SELECT SUM(input_tokens), SUM(output_tokens) FROM llm_calls")
        assert total is not None and (session.input_tokens, session.output_tokens) == (
            total[0],
            total[1],
        )
        assert session.input_tokens > 0
    finally:
        await gw.llm.close()
        gw.store.close()


def calls(gw: Gateway) -> int:
    row = gw.store.one("SELECT COUNT(*) FROM llm_calls WHERE purpose = 'turn'")
    return int(row[0]) if row else 0


def _redact_every_pattern(text: str) -> str:
    for pattern in TOKEN_PATTERNS:
        text = pattern.sub(MASK, text)
    for pattern, replacement in SHAPED_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


REDACTION_SAMPLES = [
    "turn done platform=web session=12 turn=t34 iterations=1 tools=0",
    "GET /bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/getMe",
    "xoxb-1234-5678-abcdefgh and xapp-1-A0B1C2D3E4-99 in one line",
    "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz and sk-proj-ABCDEFGHIJKLMNOPQRST",
    "MTIzNDU2Nzg5MDEyMzQ1Njc4.GhIjKl.abcdefghijklmnopqrstuvwxyz0123 discord",
    (
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789 "
        "AKIAABCDEFGHIJKLMNOP AIzaSyA1234567890abcdefghijklmnopqrstu"
    ),
    "Authorization: BEARER abc.def.ghi-jkl and Bot MTIzNDU2Nzg5MDEyMzQ1Njc4OTAx",
    "https://x/?Token=abcdefgh&API_KEY=123456789&secret=zzzzzzzz&access_token=qwertyuiop&key=12345678",
    # characters (?i) folds: long s, dotted I
    "https://x/?ſecret=abcdefgh&apİ_key=zzzzzzzz&KEY=abcdefgh",
]


@given(
    st.lists(
        st.sampled_from(
            [
                "sk-",
                "xox",
                "b-",
                "xapp-1-",
                "bearer ",
                "Bot ",
                "?token=",
                "&key=",
                "_key=",
                "ſecret=",
                "İ",
                "K",
                ":",
                ".",
                "gh",
                "p_",
                "AKIA",
                "AIza",
                "1234567",
                "abcdefgh",
                "ABCDEFGHIJKLMNOP",
                " ",
                "=",
                "&",
                "é",
                "ß",
            ]
        ),
        max_size=30,
    ).map("".join)
    | st.text(max_size=80)
)
@settings(max_examples=400, deadline=None)
def test_redaction_skips_only_patterns_that_cannot_match(text: str) -> None:
    assert Redactor()(text) == _redact_every_pattern(text)


def test_redaction_samples_are_the_same_with_the_guards() -> None:
    for text in REDACTION_SAMPLES:
        assert Redactor()(text) == _redact_every_pattern(text)
    assert Redactor()(REDACTION_SAMPLES[0]) == REDACTION_SAMPLES[0]
    assert "abcdefgh" not in Redactor()(REDACTION_SAMPLES[-1])
