"""`/voice` and `/model`: a chat's voice replies and a conversation's model, chosen in chat and stored (they
outlive a restart). Registered on Commands from the composition root, like `/jobs`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from gateway.config.settings import Config
from gateway.errors import LLMNotConfigured
from gateway.events import AudioReplies, Inbound
from gateway.llm.factory import ModelOption

if TYPE_CHECKING:
    from gateway.sessions.manager import SessionManager

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
IsAdmin = Callable[[Inbound], bool]

VOICE_MODES = {"on": "on", "off": "off", "auto": None, "default": None}
VOICE_SAID = {
    "on": "Voice replies are on in this chat: every answer also comes as a voice note, after its text.",
    "off": "Voice replies are off in this chat: answers come as text only.",
}
VOICE_DEFAULTS = {
    "auto": "a voice note gets a voice note back, besides the text",
    "always": "every answer also comes as a voice note",
    "never": "answers come as text only",
}
NO_TTS = "Voice replies are not set up on this gateway (voice.tts in config.yaml; see docs/voice.md)."
NO_AUDIO = "This chat cannot play voice notes, so answers here stay text."
VOICE_USAGE = "Use /voice on, /voice off, or /voice auto to go back to the gateway's setting."
ADMINS_ONLY = "Only an admin can {what} here."
ONE_MODEL = "Only one model is set up here. More can be added under `models:` in config.yaml (docs/configuration.md)."
MODEL_USAGE = "Switch with /model NAME; /model default goes back to the main model."


def model_choices(options: Sequence[ModelOption]) -> list[tuple[str, str]]:
    """(label, command) for each model: the text below lists them, and a platform with buttons can show them as
    buttons sending the same commands."""
    return [(f"{o.name}: {o.model}", f"/model {o.name}") for o in options]


def model_list(options: Sequence[ModelOption]) -> str:
    lines = ["Models (▸ answers in this conversation):"]
    for option, (label, _) in zip(options, model_choices(options), strict=True):
        lines.append(f"{'▸' if option.current else '  '} {label} ({option.provider})")
    return "\n".join([*lines, MODEL_USAGE])


class ChoiceCommands:
    """`/voice` and `/model` handlers (`await handler(manager, inbound, key)`). `is_admin` says whether the sender
    is an admin (gateway/access/roles.py); switching a model takes one unless `models_switch: everyone`, and so
    does switching voice replies for a whole group."""

    def __init__(self, config: Config, *, clock: Clock, is_admin: IsAdmin) -> None:
        self.config = config
        self.clock = clock
        self.is_admin = is_admin

    async def voice(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        if self.config.voice.tts is None:
            return NO_TTS
        if not isinstance(manager.adapters.get(inbound.chat.platform), AudioReplies):
            return NO_AUDIO
        word = _argument(inbound.text).lower()
        if not word:
            return self._voice_now(manager, inbound)
        if word not in VOICE_MODES:
            return VOICE_USAGE
        if inbound.chat.is_group and not self.is_admin(inbound):
            return ADMINS_ONLY.format(what="switch voice replies for everyone in a group")
        mode = VOICE_MODES[word]
        chat = inbound.chat
        manager.store.set_chat_voice(chat.platform, chat.chat_id, mode, now=self.clock())
        log.info("voice replies %s platform=%s chat=%s by user=%s", mode or "as configured", chat.platform,
                 chat.chat_id, inbound.user_id)
        if mode is None:
            return f"Voice replies follow the gateway's setting again: {VOICE_DEFAULTS[self.config.voice.replies]}."
        return VOICE_SAID[mode]

    def _voice_now(self, manager: SessionManager, inbound: Inbound) -> str:
        chosen = manager.store.chat_voice(inbound.chat.platform, inbound.chat.chat_id)
        now = VOICE_SAID[chosen] if chosen else \
            f"Voice replies follow the gateway's setting: {VOICE_DEFAULTS[self.config.voice.replies]}."
        return f"{now}\n{VOICE_USAGE}"

    async def model(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        models = manager.models
        if models is None:
            return ONE_MODEL
        name = _argument(inbound.text)
        current = manager.store.model_choice(key)
        if not name:
            return model_list(models.options(current))
        if name != "default" and name not in models.named:
            return f"There is no model called {name!r} here.\n{model_list(models.options(current))}"
        if self.config.models_switch != "everyone" and not self.is_admin(inbound):
            return ADMINS_ONLY.format(what="switch models")
        if (name == "default" and current is None) or name == current:
            return f"Already answering with {name}."
        return self._switch(manager, inbound, key, name)

    def _switch(self, manager: SessionManager, inbound: Inbound, key: str, name: str) -> str:
        assert manager.models is not None
        chosen = manager.models.main if name == "default" else None
        if chosen is None:
            try:
                chosen = manager.models.client(name)
            except LLMNotConfigured as exc:
                return f"I can't switch to {name}: {exc}"
        manager.store.set_model_choice(key, None if name == "default" else name, now=self.clock())
        log.info("model switched session_key=%s to %s (%s) by %s:%s", key, name, chosen.model,
                 inbound.chat.platform, inbound.user_id)
        return f"Switched to {name} ({chosen.model}). Your next message is answered by it."


def _argument(text: str) -> str:
    parts = text.strip().split(maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else ""
