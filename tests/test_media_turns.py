"""A turn's attachments in the core: an album taken over by its first part stays one turn across a
restart, and a message whose every file failed is answered with what went wrong, without a model
call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from gateway.events import Attachment, ChatRef, Inbound
from gateway.ops.wiring import Gateway
from gateway.store.transcript import encode_inbound
from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, write_config
from tests.mediafiles import picture


class PhotoAdapter(RecordingAdapter):
    """A platform whose users send photos: a MediaSource serving them from memory."""

    def __init__(self) -> None:
        super().__init__("cli")
        self.files = {"a": picture(40, 30), "b": picture(30, 40), "bad": b"\xff\xd8\xff garbage"}
        self.fetched: list[str] = []

    async def media(self, attachment: Attachment) -> AsyncIterator[bytes]:
        self.fetched.append(attachment.ref or "")
        yield self.files[attachment.ref or ""]


def part(ref: str, message_id: str, text: str = "", group: str | None = "g1") -> Inbound:
    return Inbound(
        chat=ChatRef("cli", "dm", "42"),
        user_id="42",
        text=text,
        message_id=message_id,
        received_at=datetime.now(UTC),
        attachments=(Attachment("photo", ref=ref),),
        group_id=group,
    )


def stored(gw: Gateway, inbound: Inbound) -> int:
    found = gw.store.insert_inbound(
        platform="cli",
        chat_type="dm",
        chat_id="42",
        thread_id=None,
        platform_message_id=inbound.message_id,
        user_id="42",
        user_name=None,
        text=inbound.text,
        payload=encode_inbound(inbound),
        received_at=inbound.received_at,
    )
    assert found is not None
    return found


async def close(gw: Gateway) -> None:
    await gw.llm.close()
    if gw.media is not None:
        await gw.media.close()
    gw.store.close()


def build(home: Path, adapter: PhotoAdapter) -> Gateway:
    gw = gateway_for(home, [adapter])
    adapter.submit = gw.sessions.submit
    return gw


async def test_an_album_taken_over_before_a_crash_is_one_turn_after_the_restart(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    adapter = PhotoAdapter()
    gw = build(home, adapter)
    first, second = part("a", "7", "two photos"), part("b", "8")
    # stored as submit stores them; the turn never ran
    ids = [stored(gw, first), stored(gw, second)]
    assert gw.media is not None
    gw.media.group_wait_s = 0.01
    # the first part's turn took the second over, then: kill -9
    merged = await gw.media.gather(ids[0], first)
    assert [a.ref for a in merged.attachments] == ["a", "b"] and merged.text == "two photos"
    await close(gw)
    again = build(home, adapter)
    assert again.media is not None
    again.media.group_wait_s = 0.01
    # the first part only: the second is merged into it
    assert await again.sessions.replay() == (1, 0)
    await again.sessions.wait_idle()
    await close(again)
    assert [m.text for m in adapter.sent] == [
        "echo: two photos\n[image: photo]\n[image: photo] [users=1]"
    ]
    blocks = fake_llm.anthropic_requests()[-1]["messages"][-1]["content"]
    assert [b["type"] for b in blocks] == ["image", "image", "text"]


async def test_a_message_of_only_unusable_files_is_answered_without_the_model(
    home: Path, fake_llm: FakeLLM
) -> None:
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    adapter = PhotoAdapter()
    gw = build(home, adapter)
    await gw.sessions.submit(part("bad", "9", group=None))
    await gw.sessions.wait_idle()
    await close(gw)
    assert [m.text for m in adapter.sent] == [
        (
            "I couldn't use photo: it is not a picture that can be "
            "opened (damaged, or a picture format not read here)."
        )
    ]
    assert fake_llm.anthropic_requests() == []


async def test_a_told_once_notice_is_never_marked_given_without_being_recorded_for_sending(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The once-per-chat notice and its 'given' mark are one transaction: a turn that dies while
    recording the notice (here: the outbound insert fails, as a kill or a full disk would stop it)
    leaves neither, so the replay after the restart still tells the user, once."""
    write_config(home, provider="anthropic", base_url=fake_llm.base_url)
    adapter = PhotoAdapter()
    gw = build(home, adapter)
    gw.store.execute(
        "CREATE TRIGGER die BEFORE INSERT ON outbound WHEN NEW.turn_id LIKE 'm%'"
        " BEGIN SELECT RAISE(ABORT, 'killed'); END"
    )
    voice = Inbound(
        chat=ChatRef("cli", "dm", "42"),
        user_id="42",
        text="",
        message_id="11",
        received_at=datetime.now(UTC),
        attachments=(Attachment("voice", ref="v"),),
    )
    await gw.sessions.submit(voice)
    await gw.sessions.wait_idle()
    assert adapter.sent == [] and gw.store.all("SELECT * FROM media_notices") == []
    gw.store.execute("DROP TRIGGER die")
    # as a kill -9 at that moment leaves it
    gw.store.execute("UPDATE inbound SET status = 'running'")
    await close(gw)
    again = build(home, adapter)
    assert await again.sessions.replay() == (1, 0)
    await again.sessions.wait_idle()
    await close(again)
    said = [m.text for m in adapter.sent]
    assert said[0].startswith(
        "I can't listen to voice notes yet: no transcription service is set up"
    )
    assert said[1].startswith("echo: [The user sent a voice note") and len(said) == 2
