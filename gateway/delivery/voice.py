"""Voice replies in the outbox: which answers are also spoken, their stored row, and sending it.

The spoken copy of an answer is an outbound row of its own (kind `voice`, turn `<turn>:voice`, the
words to say as its text), recorded in the answer's transaction after its text chunks. The outbox
sends it once the text is out, a restart sends it if it was not, and it is marked like a chunk: a
kill -9 neither loses nor doubles it. The speech is made from the stored words when the row is sent;
when that fails the row fails and the chat gets one short notice after it: the text went out first,
so nothing is lost.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gateway.config.voice import VoiceConfig
from gateway.delivery.outbox import Outbox
from gateway.delivery.rows import render_rows, row_chat
from gateway.errors import SpeechError
from gateway.events import (
    Adapter,
    AudioReplies,
    Inbound,
    OutboundAudio,
    OutboundKind,
    OutboundMessage,
)
from gateway.prompt.hints import PlatformFacts
from gateway.store.database import Store
from gateway.store.rows import OutboundRow
from gateway.voice.encode import Speech
from gateway.voice.speaker import Speaker, tools_problem

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
VOICE_TURN = "{turn}:voice"
# Turn ids stay `<letter><inbound id>:<letters>`, so forgetting a person finds these rows too.
NOTICE_TURN = "{turn}:voicefail"
FAILED_TEXT = "I couldn't read this answer aloud ({reason}); the text above is all of it."
KEPT_NOTES = 8  # notes made and not sent yet (a platform retry sends the same bytes): the newest


class VoiceReplies:
    """The outbox's `voice` (gateway/delivery/outbox.py) and the turn's: `rows_for` when an answer
    is recorded, `send` when its voice row's turn comes."""

    def __init__(
        self,
        config: VoiceConfig,
        speaker: Speaker,
        *,
        store: Store,
        adapters: Mapping[str, Adapter],
        facts: Mapping[str, PlatformFacts],
        clock: Clock,
    ) -> None:
        self.config = config
        self.speaker = speaker
        self.store = store
        self.adapters = adapters
        self.facts = facts
        self.clock = clock
        self._notes: OrderedDict[int, Speech] = OrderedDict()
        self._can: dict[str, tuple[Adapter, bool]] = {}  # platform → (adapter, has send_audio)

    def wanted(self, inbound: Inbound) -> bool:
        """A chat's /voice on|off, else `voice.replies` (auto: the message was a voice note); never
        on a platform that cannot take a voice note."""
        chat = inbound.chat
        if not self._can_send(chat.adapter_key):
            return False
        chosen = self.store.chat_voice(chat.platform, chat.chat_id, chat.account)
        if chosen is not None:
            return chosen == "on"
        replies = self.config.replies
        spoke = any(a.kind == "voice" for a in inbound.attachments)
        return replies == "always" or (replies == "auto" and spoke)

    def rows_for(self, turn_id: str, inbound: Inbound, text: str) -> list[dict[str, Any]]:
        """The voice row of an answer: none when it is not wanted or nothing in it can be said."""
        if not self.wanted(inbound):
            return []
        words = self.speaker.words(text)
        if not words:
            return []
        chat = inbound.chat
        return [
            {
                "turn_id": VOICE_TURN.format(turn=turn_id),
                "chunk_index": 0,
                "chunk_count": 1,
                "platform": chat.platform,
                "chat_type": chat.chat_type,
                "chat_id": chat.chat_id,
                "thread_id": chat.thread_id,
                "kind": OutboundKind.VOICE.value,
                "text": words,
                "plain": words,
                "reply_to_id": inbound.message_id,
                "entities": None,
                "account": chat.account,
            }
        ]

    async def send(self, adapter: Adapter, row: OutboundRow, message: OutboundMessage) -> str:
        """Speak the row's words and send the note. SpeechError (after recording the notice) when
        it cannot be made; the platform's own errors go to the outbox as for any chunk, and its
        retry sends the same note."""
        if not isinstance(adapter, AudioReplies):
            raise SpeechError(f"{row.platform} cannot take voice notes")
        speech = self._notes.get(row.id) or await self._speak(row)
        audio = OutboundAudio(
            chat=message.chat,
            data=speech.data,
            duration_s=speech.duration_s,
            waveform=speech.waveform,
            transcript=row.text,
            reply_to_id=row.reply_to_id,
            key=message.key,
        )
        sent = await adapter.send_audio(audio)
        self._notes.pop(row.id, None)
        return sent

    async def _speak(self, row: OutboundRow) -> Speech:
        try:
            speech = await self.speaker.speak(row.text)
        except SpeechError as exc:
            log.warning(
                "%s: the voice note of %s could not be made: %s", row.platform, row.turn_id, exc
            )
            self._tell(row, str(exc))
            raise
        self._notes[row.id] = speech
        while len(self._notes) > KEPT_NOTES:
            self._notes.popitem(last=False)
        return speech

    def _tell(self, row: OutboundRow, reason: str) -> None:
        """One notice for the note that could not be made, recorded after it in its chat: the
        outbox, which is sending this chat's rows in order, sends it next."""
        facts = self.facts.get(row.platform) or self.facts["cli"]
        turn = NOTICE_TURN.format(turn=row.turn_id.removesuffix(":voice"))
        text = FAILED_TEXT.format(reason=reason)
        rows = render_rows(
            turn, row_chat(row), text, facts, kind=OutboundKind.NOTICE, reply_to_id=row.reply_to_id
        )
        self.store.insert_outbound(rows, now=self.clock())

    def _can_send(self, via: str) -> bool:
        """`via`: the adapter key (its platform, and its bot account unless `default`)."""
        adapter = self.adapters.get(via)
        if adapter is None:
            return False
        known = self._can.get(via)
        if known is None or known[0] is not adapter:  # a runtime Protocol's isinstance costs ~10 µs
            known = self._can[via] = (adapter, isinstance(adapter, AudioReplies))
        return known[1]

    async def close(self) -> None:
        await self.speaker.close()


def voice_replies(
    voice: VoiceConfig, env: Mapping[str, str], outbox: Outbox
) -> VoiceReplies | None:
    """With `voice.tts`, the answers that are also spoken (docs/voice.md), by `outbox`'s
    adapters."""
    tts = voice.tts
    if tts is None:
        return None
    key = env.get(tts.api_key_env) if tts.api_key_env else None
    if tts.api_key_env and not key:
        log.warning(
            "voice.tts.api_key_env names %s, which is not set; speech requests go without a key",
            tts.api_key_env,
        )
    missing = tools_problem(tts)
    if missing is not None:
        log.warning("voice.tts: %s; voice replies fail until then (`gateway doctor`)", missing)
    return VoiceReplies(
        voice,
        Speaker(voice, tts, key),
        store=outbox.store,
        adapters=outbox.adapters,
        facts=outbox.facts,
        clock=outbox.clock,
    )
