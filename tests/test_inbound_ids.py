"""Inbound row ids are never handed out twice: a turn's id (t<inbound id>) names its recorded answer
for good.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from tests.fakes.llm import FakeLLM
from tests.helpers import RecordingAdapter, gateway_for, inbound, write_config


async def test_after_a_quiet_spell_longer_than_the_retention_the_next_message_is_answered(
    home: Path, fake_llm: FakeLLM
) -> None:
    """The daemon prunes answered inbound rows after delivery.dedupe_retention_hours. When every row
    was that old (a personal bot over a long weekend), the next message got id 1 again: its turn id
    t1 was the first answer's, still recorded, so its own answer was never recorded nor sent."""
    write_config(
        home,
        base_url=fake_llm.base_url,
        extra="web:\n  enabled: false\ntelegram:\n  token: t\n  allowed_users: ['1']\n",
    )
    tg = RecordingAdapter("telegram")
    gw = gateway_for(home, [tg])
    try:
        await gw.sessions.submit(inbound("hi", platform="telegram", chat_id="1", user_id="1"))
        await tg.wait_for(1)
        await gw.sessions.wait_idle()
        # four days ago, say
        gw.store.execute("UPDATE inbound SET received_at = '2026-01-01T00:00:00+00:00'")
        gw.store.prune_inbound(
            gw.clock() - timedelta(hours=gw.config.delivery.dedupe_retention_hours)
        )
        await gw.sessions.submit(
            inbound("hello again", platform="telegram", chat_id="1", user_id="1")
        )
        await tg.wait_for(2)
        assert tg.texts("1")[1].startswith("echo: hello again")
    finally:
        await gw.outbox.wait_background()
        await gw.sessions.cancel_all()
        await gw.llm.close()
        gw.store.close()
