"""Images in the history: stored as file names (never base64 in SQLite), read back as the same bytes
on every turn, sent as image blocks on both wires (or as a fixed note to a model without vision, or
once the file is gone), kept through compression, and removed with their session or by the retention
sweep."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config.settings import ModelEndpoint
from gateway.llm.anthropic_wire import AnthropicClient, anthropic_messages
from gateway.llm.factory import sees_images
from gateway.llm.openai_wire import OpenAIClient, openai_messages
from gateway.llm.transport import WireSettings
from gateway.llm.types import IMAGE_BLIND_NOTE, IMAGE_GONE_NOTE, IMAGE_LEFT_OUT_NOTE, ChatMessage
from gateway.ops.daemon import Daemon
from gateway.store.database import Store
from gateway.store.media_files import delete_session_media, media_root, session_dir, sweep
from gateway.store.transcript import history_messages, session_history
from tests.fakes.llm import FakeLLM
from tests.helpers import gateway_for, write_config
from tests.mediafiles import picture

NOW = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def new_session(store: Store) -> int:
    return store.create_session(
        key="telegram:dm:42",
        platform="telegram",
        chat_type="dm",
        chat_id="42",
        thread_id=None,
        user_id="42",
        parent_id=None,
        model="m",
        provider="p",
        now=NOW,
    ).id


def stored_image(
    home: Path, session_id: int, name: str = "7-0.jpg"
) -> tuple[dict[str, str], bytes]:
    data = picture(64, 48)
    path = session_dir(home, session_id) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"media_type": "image/jpeg", "file": f"{session_id}/{name}"}, data


def photo_turn(store: Store, sid: int, ref: dict[str, str], data: bytes) -> None:
    user = {
        "role": "user",
        "content": "what is this?\n[image: photo]",
        "images": [{**ref, "data": base64.b64encode(data).decode()}],
    }
    store.complete_turn(
        sid,
        [user, {"role": "assistant", "content": "a red square"}],
        [],
        None,
        now=NOW,
        turn_id="t1",
    )


def test_the_row_keeps_the_file_name_and_the_history_gives_the_bytes_back(
    store: Store, tmp_path: Path
) -> None:
    sid = new_session(store)
    ref, data = stored_image(tmp_path, sid)
    photo_turn(store, sid, ref, data)
    row = store.one("SELECT content, media FROM messages WHERE role = 'user'")
    assert row is not None and json.loads(row["media"]) == [ref]  # no base64 in SQLite
    for _ in range(2):  # cached, then from the rows after the cache is dropped
        history = session_history(store, sid)
        assert history[0]["images"] == [{**ref, "data": base64.b64encode(data).decode()}]
        store.history_cache.clear()
    assert "data" not in store.chat_history(sid)[0]["images"][0]  # the cache never holds the bytes


def test_requests_on_later_turns_carry_the_same_image_bytes(store: Store, tmp_path: Path) -> None:
    sid = new_session(store)
    ref, data = stored_image(tmp_path, sid)
    photo_turn(store, sid, ref, data)
    first = anthropic_messages(session_history(store, sid))
    store.add_messages(
        sid,
        [{"role": "user", "content": "and now?"}, {"role": "assistant", "content": "still"}],
        now=NOW,
    )
    store.history_cache.clear()
    later = anthropic_messages(session_history(store, sid))
    assert json.dumps(later[:2]) == json.dumps(first)
    assert base64.b64decode(later[0]["content"][0]["source"]["data"]) == data


def test_anthropic_wire_sends_base64_image_blocks_before_the_text() -> None:
    msg: ChatMessage = {
        "role": "user",
        "content": "look",
        "images": [
            {"media_type": "image/png", "file": "1/a.png", "data": "iVBORw0KGgo="},
            {"media_type": "image/jpeg", "file": "1/b.jpg", "data": "/9j/4AAQ"},
        ],
    }
    assert anthropic_messages([msg]) == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
                },
                {"type": "text", "text": "look"},
            ],
        }
    ]


def test_openai_wire_sends_data_urls_after_the_text() -> None:
    msg: ChatMessage = {
        "role": "user",
        "content": "look",
        "images": [{"media_type": "image/png", "file": "1/a.png", "data": "iVBORw0KGgo="}],
    }
    assert openai_messages("sys", [msg])[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
    }


def test_a_model_without_vision_gets_a_note_instead_on_both_wires() -> None:
    msg: ChatMessage = {
        "role": "user",
        "content": "look",
        "images": [{"media_type": "image/png", "file": "1/a.png", "data": "iVBORw0KGgo="}],
    }
    assert anthropic_messages([msg], vision=False) == [
        {"role": "user", "content": [{"type": "text", "text": f"look\n{IMAGE_BLIND_NOTE}"}]}
    ]
    assert openai_messages("sys", [msg], vision=False)[1] == {
        "role": "user",
        "content": f"look\n{IMAGE_BLIND_NOTE}",
    }


def test_an_image_whose_file_is_gone_becomes_a_fixed_note(store: Store, tmp_path: Path) -> None:
    sid = new_session(store)
    ref, data = stored_image(tmp_path, sid)
    photo_turn(store, sid, ref, data)
    assert delete_session_media(tmp_path, [sid]) == 1
    history = session_history(store, sid)
    assert anthropic_messages(history)[0]["content"] == [
        {"type": "text", "text": f"what is this?\n[image: photo]\n{IMAGE_GONE_NOTE}"}
    ]
    assert (
        openai_messages("s", history)[1]["content"]
        == f"what is this?\n[image: photo]\n{IMAGE_GONE_NOTE}"
    )


def test_a_name_that_climbs_out_of_the_media_folder_is_never_read(
    store: Store, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("do not send")
    sid = new_session(store)
    store.complete_turn(
        sid,
        [
            {
                "role": "user",
                "content": "x",
                "images": [{"media_type": "image/png", "file": "../secret.txt"}],
            }
        ],
        [],
        None,
        now=NOW,
        turn_id="t1",
    )
    assert "data" not in session_history(store, sid)[0]["images"][0]


def test_compression_keeps_the_images_of_the_messages_it_keeps(
    store: Store, tmp_path: Path
) -> None:
    sid = new_session(store)
    ref, data = stored_image(tmp_path, sid)
    store.add_messages(
        sid,
        [{"role": "user", "content": "old"}, {"role": "assistant", "content": "old answer"}],
        now=NOW,
    )
    photo_turn(store, sid, ref, data)
    rows = store.history(sid)
    store.compress_history(
        sid, dropped=[rows[0].id, rows[1].id], tail=rows[2:], summary="the gist", now=NOW
    )
    history = session_history(store, sid)
    assert [m["content"] for m in history][:2] == ["the gist", "what is this?\n[image: photo]"]
    assert base64.b64decode(history[1]["images"][0]["data"]) == data


def test_summaries_and_flushes_read_history_without_pixels(store: Store, tmp_path: Path) -> None:
    sid = new_session(store)
    ref, data = stored_image(tmp_path, sid)
    photo_turn(store, sid, ref, data)
    plain = history_messages(store.history(sid))
    assert plain[0]["images"] == [ref]
    assert anthropic_messages(plain)[0]["content"][-1]["text"].endswith(IMAGE_GONE_NOTE)
    assert history_messages(store.history(sid), home=tmp_path)[0]["images"][0]["data"]


def test_retention_removes_old_files_and_empty_folders(tmp_path: Path) -> None:
    old, _ = stored_image(tmp_path, 1, "1-0.jpg")
    stored_image(tmp_path, 2, "2-0.jpg")
    month_ago = time.time() - 31 * 86_400
    os.utime(media_root(tmp_path) / old["file"], (month_ago, month_ago))
    assert sweep(tmp_path, older_than_days=30) == 1
    assert (
        list(session_dir(tmp_path, 1).iterdir()) == []
        and (session_dir(tmp_path, 2) / "2-0.jpg").exists()
    )
    # the emptied folder, a while later
    assert sweep(tmp_path, older_than_days=30, now=time.time() + 7200) == 0
    assert not session_dir(tmp_path, 1).exists() and session_dir(tmp_path, 2).exists()
    assert delete_session_media(tmp_path, [2, 3]) == 1 and not session_dir(tmp_path, 2).exists()
    assert delete_session_media(tmp_path, [2]) == 0


@pytest.mark.parametrize(
    ("provider", "name", "setting", "sees"),
    [
        ("anthropic", "claude-sonnet-4-5", "auto", True),
        ("anthropic", "claude-2.1", "auto", False),
        ("openai", "gpt-4.1-mini", "auto", True),
        ("openai", "gpt-4o", "auto", True),
        ("openai", "o3-mini", "auto", False),
        ("openai", "llama3.1:8b", "auto", False),
        ("openai", "qwen2.5-vl-7b", "auto", True),
        ("openai", "anthropic/claude-sonnet-4.5", "auto", True),
        ("openai", "llama3.1:8b", True, True),
        ("anthropic", "claude-sonnet-4-5", False, False),
    ],
)
def test_vision_auto_follows_the_model_name(
    provider: str, name: str, setting: Any, sees: bool
) -> None:
    assert sees_images(ModelEndpoint(provider=provider, name=name, vision=setting)) is sees  # type: ignore[arg-type]


async def test_the_fake_api_accepts_what_both_clients_send(fake_llm: FakeLLM) -> None:
    data = base64.b64encode(picture(32, 32)).decode()
    msgs: list[ChatMessage] = [
        {
            "role": "user",
            "content": "see?",
            "images": [{"media_type": "image/jpeg", "file": "1/x.jpg", "data": data}],
        }
    ]
    for client in (
        AnthropicClient(
            WireSettings(
                model="claude-test",
                api_key="k",
                base_url=fake_llm.base_url,
                max_tokens=64,
                timeout_s=5,
                max_retries=0,
                context_window=100_000,
            )
        ),
        OpenAIClient(
            WireSettings(
                model="gpt-test",
                api_key="k",
                base_url=fake_llm.openai_base_url,
                max_tokens=64,
                timeout_s=5,
                max_retries=0,
                context_window=100_000,
            )
        ),
    ):
        try:
            reply = await client.complete(system="s", messages=msgs, tools=[])
        finally:
            await client.close()
        assert reply.text == "echo: see? [users=1]"
    wrong: list[ChatMessage] = [
        {
            "role": "user",
            "content": "see?",
            "images": [
                # JPEG bytes named PNG: the API refuses
                {"media_type": "image/png", "file": "1/x.jpg", "data": data}
            ],
        }
    ]
    client = AnthropicClient(
        WireSettings(
            model="claude-test",
            api_key="k",
            base_url=fake_llm.base_url,
            max_tokens=64,
            timeout_s=5,
            max_retries=0,
            context_window=100_000,
        )
    )
    try:
        with pytest.raises(Exception, match="media type"):
            await client.complete(system="s", messages=wrong, tools=[])
    finally:
        await client.close()


async def test_the_daemon_sweeps_media_by_its_own_clock(home: Path, fake_llm: FakeLLM) -> None:
    """The retention runs at start and hourly with the daemon's clock (here 31 days on): a file the
    file system wrote a moment ago is a month old to it, and goes."""
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra="media:\n  retention_days: 30\n",
    )
    photo, _ = stored_image(home, 7, "3-0.jpg")
    later = datetime.now(UTC) + timedelta(days=31)
    daemon = Daemon(gateway_for(home, [], clock=lambda: later), install_signals=False)
    await daemon.start()
    try:
        async with asyncio.timeout(60):  # the sweep at start, however busy the machine
            while (media_root(home) / photo["file"]).exists():
                await asyncio.sleep(0.01)
    finally:
        await daemon.stop()
    assert not (media_root(home) / photo["file"]).exists()


def photo_chat(count: int, data: str) -> list[ChatMessage]:
    """`count` turns, each a photo and an answer, then a question."""
    turns: list[ChatMessage] = []
    for n in range(count):
        turns += [
            {
                "role": "user",
                "content": f"photo {n}",
                "images": [{"media_type": "image/jpeg", "file": f"1/{n}.jpg", "data": data}],
            },
            {"role": "assistant", "content": f"seen {n}"},
        ]
    return [*turns, {"role": "user", "content": "which was the best?"}]


def image_blocks(wire: list[dict[str, Any]]) -> int:
    return sum(
        1 for m in wire for b in m["content"] if isinstance(b, dict) and b.get("type") == "image"
    )


def test_a_history_with_more_pictures_than_a_request_takes_leaves_the_oldest_out_in_steps() -> None:
    """Anthropic takes 100 pictures a request: past that the oldest are left out ten at a time (a
    note in their place), so the request's start stays the same while the next ten pictures come
    (the prompt cache holds)."""
    data = base64.b64encode(picture(16, 16)).decode()
    assert image_blocks(anthropic_messages(photo_chat(100, data))) == 100
    wire = anthropic_messages(photo_chat(101, data))
    assert image_blocks(wire) == 91
    assert wire[0]["content"] == [{"type": "text", "text": f"photo 0\n{IMAGE_LEFT_OUT_NOTE}"}]
    assert wire[20]["content"][0]["type"] == "image"  # photo 10: the first one still sent
    # the same start up to 110 pictures
    assert anthropic_messages(photo_chat(110, data))[:200] == wire[:200]
    assert image_blocks(anthropic_messages(photo_chat(111, data))) == 91
    big = base64.b64encode(b"\xff\xd8\xff" + bytes(900_000)).decode()  # 1.2 MB of base64 each
    # within 24 M characters of pictures
    assert image_blocks(anthropic_messages(photo_chat(25, big))) == 15


async def test_the_fake_apis_refuse_too_many_pictures_and_the_clients_never_send_them(
    fake_llm: FakeLLM,
) -> None:
    data = base64.b64encode(picture(16, 16)).decode()
    big = base64.b64encode(b"\xff\xd8\xff" + bytes(900_000)).decode()
    client = AnthropicClient(
        WireSettings(
            model="claude-test",
            api_key="k",
            base_url=fake_llm.base_url,
            max_tokens=64,
            timeout_s=30,
            max_retries=0,
            context_window=1_000_000,
        )
    )
    try:
        for history in (photo_chat(130, data), photo_chat(30, big)):  # 130 pictures; 36 MB of them
            reply = await client.complete(system="s", messages=history, tools=[])
            assert reply.text.startswith("echo: which was the best?")
        raw = fake_llm.anthropic_raw()[-1]
        assert len(raw) < 32 * 1024 * 1024
    finally:
        await client.close()
    fake_llm.validate = True
    too_many = {
        "model": "claude-test",
        "max_tokens": 8,
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/jpeg", "data": data},
                    }
                ]
                * 101,
            }
        ],
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{fake_llm.base_url}/v1/messages",
            json=too_many,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        ) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"][
                "message"
            ] == "Too much media: 0 document pages + 101 images > 100"
