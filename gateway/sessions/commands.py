"""In-chat commands, answered before the agent and outside the session's queue.

`/new` (`/reset`), `/status`, `/usage`, `/stop`, `/retry`, `/undo`, `/help`; `/voice` and `/model`
(a chat's voice replies and a conversation's model, stored: ChoiceCommands); and those added from
above (`/jobs`). Any other `/word` is not ours: the handler returns None and the message goes to the
agent as text.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from gateway.approvals.menus import Menus
from gateway.config.settings import Config
from gateway.errors import LLMNotConfigured
from gateway.events import (
    AudioReplies,
    Inbound,
    Interactive,
    SubmitOutcome,
    SubmitResult,
    command_word,
)
from gateway.llm.factory import ModelOption, SessionModels
from gateway.sessions.lifecycle import Policies, human_age
from gateway.store.database import Store
from gateway.store.rows import MessageRow, SessionRow, parse_iso

if TYPE_CHECKING:
    from gateway.sessions.manager import SessionManager

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
Handler = Callable[["SessionManager", Inbound, str], Awaitable["str | None"]]
IsAdmin = Callable[[Inbound], bool]

NEW_TEXT = "Started a new conversation. I still remember what I saved to memory."
NOTHING_TO_STOP = "Nothing to stop: I'm not working on anything right now."
STOPPED_TEXT = "Stopped."
STOPPED_WAITING_TEXT = "Stopped. The request waiting for an answer is cancelled; nothing was run."
BUSY_TEXT = "I'm still answering your last message. Send /stop first if you want me to drop it."
NOTHING_TO_RETRY = "There is no message to answer again in this conversation yet."
NOTHING_TO_UNDO = "There is nothing to undo in this conversation yet."
UNDONE_TEXT = 'Forgot the last exchange (your message: "{snippet}").'
NO_SESSION_TEXT = "No conversation yet in this chat; your next message starts one."
START_TEXT = "Hi! I'm ready: just write to me to start a conversation. /help lists the commands."
HELP_TEXT = """\
Commands:
/new or /reset: start a new conversation (what I saved to memory stays)
/status: this conversation's age, messages, model, tokens, cache and next reset
/usage: tokens used by this conversation and by this chat
/stop: stop the answer I'm working on
/retry: answer your last message again
/undo: forget your last message and my answer
/jobs: your scheduled reminders and jobs (/jobs cancel ID stops one)
/voice on or off: answers here come as voice notes too, or never (/voice auto: the default)
/model: the models I can answer with; /model NAME switches this conversation to one
/link: make this account and yours on another platform one person (same memory); in a direct message
/approve CODE, /deny CODE: answer a request to run a tool (where there are no buttons)
/approve CODE session: allow it, and that tool for the rest of this conversation
/help: this list
Any other /word is passed to me as ordinary text."""


class Commands:
    """The `commands` seam of SessionManager: `await commands(manager, inbound, key)` → reply text
    or None."""

    def __init__(self, *, policies: Policies, clock: Clock) -> None:
        self.policies = policies
        self.clock = clock
        self.handlers: dict[str, Handler] = {
            "new": self.new,
            "reset": self.new,
            "status": self.status,
            "usage": self.usage,
            "stop": self.stop,
            "retry": self.retry,
            "undo": self.undo,
            "help": self.help,
            # Telegram sends /start when a user opens the bot; unknown users get pairing
            "start": self.start,
        }

    def add(self, word: str, handler: Handler) -> None:
        """A command whose work lives above sessions (`/jobs`: gateway/scheduling/command.py)."""
        self.handlers[word] = handler

    async def __call__(self, manager: SessionManager, inbound: Inbound, key: str) -> str | None:
        handler = self.handlers.get(command_word(inbound.text) or "")
        return None if handler is None else await handler(manager, inbound, key)

    # ---------------------------------------------------------------- commands
    async def new(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        """Answer at once; the old session's flush runs
        in the background (the session_ended hook)."""
        manager.stop_turn(key)
        session = manager.store.active_session(key)
        if session is not None:
            manager.end_session(session, "command")
        return NEW_TEXT

    async def status(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        policy = self.policies.policy(inbound.chat.platform, inbound.chat.chat_type, inbound.agent)
        session = manager.store.active_session(key)
        if session is None:
            return f"{NO_SESSION_TEXT}\nReset: {self.policies.describe(policy)}."
        now = self.clock()
        created = parse_iso(session.created_at) or now
        count = manager.store.count_messages(session.id)
        llm = manager.roster.of(inbound).llm
        model, provider = session.model or llm.model, session.provider or llm.provider
        lines = [
            f"Session {session.id}: started {human_age(now - created)} ago, {count} messages.",
            f"Model: {model} ({provider}).",
            f"Tokens: {session.input_tokens:,} in, {session.output_tokens:,} out.",
            (
                f"Cache: {session.cache_read_tokens:,} read, {session.cache_write_tokens:,} "
                f"written, {_hit_rate(session)} hit."
            ),
            f"Reset: {self.policies.describe(policy)}; {self._next_reset(session)}.",
        ]
        return "\n".join(lines)

    def _next_reset(self, session: SessionRow) -> str:
        found = self.policies.session_deadline(session)
        if found is None:
            return "no reset scheduled"
        return f"next reset {self.policies.local(found.at)} ({found.reason})"

    async def usage(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        store = manager.store
        session = store.active_session(key)
        lines = []
        if session is not None:
            lines.append(
                "This conversation: " + _usage_line(_usage(store, "s.id = ?", (session.id,)))
            )
        else:
            lines.append(NO_SESSION_TEXT)
        chat = _usage(store, "s.key = ?", (key,))
        if chat[0]:
            lines.append("All conversations in this chat: " + _usage_line(chat))
        return "\n".join(lines)

    async def stop(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        """Stop the running turn; one waiting for a person has its request cancelled
        (gateway/approvals)."""
        waiting = manager.waiting is not None and key in manager.waiting.waits.parked_keys()
        if not manager.stop_turn(key):
            return NOTHING_TO_STOP
        return STOPPED_WAITING_TEXT if waiting else STOPPED_TEXT

    async def retry(self, manager: SessionManager, inbound: Inbound, key: str) -> str | None:
        """Deactivate the last exchange and let this very
        message go on as a turn carrying the old text.

        The /retry inbound row is rewritten to the original message, so the answer replies to
        /retry, the turn is stored like any other, and a restart mid-retry replays the right text.
        """
        if _busy(manager, key):
            return BUSY_TEXT
        found = self._last_exchange(manager.store, key)
        if found is None:
            return NOTHING_TO_RETRY
        first, ids = found
        original = _original_inbound(manager.store, inbound, first)
        retried = dataclasses.replace(
            inbound,
            text=original.text if original else first.content,
            attachments=original.attachments if original else (),
            context=original.context if original else "",
        )
        manager.store.deactivate_messages(ids)
        _rewrite_inbound(manager.store, inbound, retried)
        return None

    async def undo(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        if _busy(manager, key):
            return BUSY_TEXT
        found = self._last_exchange(manager.store, key)
        if found is None:
            return NOTHING_TO_UNDO
        first, ids = found
        original = _original_inbound(manager.store, inbound, first)
        manager.store.deactivate_messages(ids)
        text = original.text if original else first.content
        snippet = " ".join(text.split())
        return UNDONE_TEXT.format(snippet=snippet if len(snippet) <= 60 else snippet[:57] + "...")

    async def help(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        return HELP_TEXT

    async def start(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        return START_TEXT

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _last_exchange(store: Store, key: str) -> tuple[MessageRow, list[int]] | None:
        """The active session's last user message and the ids of it and everything after it."""
        session = store.active_session(key)
        if session is None:
            return None
        rows = store.history(session.id, kinds=("chat",))
        users = [i for i, r in enumerate(rows) if r.role == "user"]
        if not users:
            return None
        first = rows[users[-1]]
        return first, [r.id for r in rows[users[-1] :]]


VOICE_MODES = {"on": "on", "off": "off", "auto": None, "default": None}
VOICE_SAID = {
    "on": (
        "Voice replies are on in this chat: every answer also comes as a voice note, after its "
        "text."
    ),
    "off": "Voice replies are off in this chat: answers come as text only.",
}
VOICE_DEFAULTS = {
    "auto": "a voice note gets a voice note back, besides the text",
    "always": "every answer also comes as a voice note",
    "never": "answers come as text only",
}
NO_TTS = (
    "Voice replies are not set up on this gateway (voice.tts in config.yaml; see docs/voice.md)."
)
NO_AUDIO = "This chat cannot play voice notes, so answers here stay text."
VOICE_USAGE = "Use /voice on, /voice off, or /voice auto to go back to the gateway's setting."
ADMINS_ONLY = "Only an admin can {what}."
ONE_MODEL = (
    "Only one model is set up here. More can be added under `models:` in config.yaml "
    "(docs/configuration.md)."
)
MODEL_USAGE = "Switch with /model NAME; /model default goes back to the main model."
MODEL_TAP = "Tap one to switch this conversation to it (or send /model NAME)."
STALE_MENU = "This list is out of date: send /model for the current one."
# A name that is repeated in a reply: anything else (a Markdown link, a wall of text) is not
SHOWN_NAME = re.compile(r"[\w.:+-]{1,40}")


def model_choices(options: Sequence[ModelOption]) -> list[tuple[str, str]]:
    """(label, command) for each model: the text list shows them, and a platform with buttons can
    show them as buttons that send the same commands."""
    return [(f"{o.name}: {o.model}", f"/model {o.name}") for o in options]


def model_list(options: Sequence[ModelOption], usage: str = MODEL_USAGE) -> str:
    lines = ["Models (▸ answers in this conversation):"]
    for option, (label, _) in zip(options, model_choices(options), strict=True):
        lines.append(f"{'▸' if option.current else '•'} {label} ({option.provider})")
    return "\n".join([*lines, usage])


class ChoiceCommands:
    """`/voice` and `/model` handlers (`await handler(manager, inbound, key)`). `is_admin` says
    whether the sender is an admin (gateway/access/roles.py): switching a model takes one unless
    `models_switch: everyone`, and so does switching voice replies for a whole group."""

    def __init__(
        self, config: Config, *, clock: Clock, is_admin: IsAdmin, menus: Menus | None = None
    ) -> None:
        self.config = config
        self.clock = clock
        self.is_admin = is_admin
        self.menus = menus  # /model's list as buttons where the platform has them

    async def voice(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        if self.config.voice.tts is None:
            return NO_TTS
        if not isinstance(manager.adapters.get(inbound.chat.adapter_key), AudioReplies):
            return NO_AUDIO
        word = _argument(inbound.text).lower()
        if not word:
            return self._voice_now(manager, inbound)
        if word not in VOICE_MODES:
            return VOICE_USAGE
        if inbound.chat.is_group and not self.is_admin(inbound):
            return ADMINS_ONLY.format(what="switch voice replies for everyone in this group")
        mode = VOICE_MODES[word]
        chat = inbound.chat
        manager.store.set_chat_voice(
            chat.platform, chat.chat_id, mode, now=self.clock(), account=chat.account
        )
        log.info(
            "voice replies %s platform=%s chat=%s by user=%s",
            mode or "as configured",
            chat.platform,
            chat.chat_id,
            inbound.user_id,
        )
        if mode is None:
            default = VOICE_DEFAULTS[self.config.voice.replies]
            return f"Voice replies follow the gateway's setting again: {default}."
        return VOICE_SAID[mode]

    def _voice_now(self, manager: SessionManager, inbound: Inbound) -> str:
        chat = inbound.chat
        chosen = manager.store.chat_voice(chat.platform, chat.chat_id, chat.account)
        default = VOICE_DEFAULTS[self.config.voice.replies]
        now = (
            VOICE_SAID[chosen]
            if chosen
            else f"Voice replies follow the gateway's setting: {default}."
        )
        return f"{now}\n{VOICE_USAGE}"

    async def model(self, manager: SessionManager, inbound: Inbound, key: str) -> str:
        models = manager.roster.of(inbound).llm  # the agent's own choice of models
        if not isinstance(models, SessionModels):
            return ONE_MODEL
        name = _argument(inbound.text)
        current = manager.store.model_choice(key)
        if not name:
            return self._menu(manager, models, inbound, current)
        if name != "default" and name not in models.named:
            listed = model_list(models.options(current))
            called = f"called {name!r}" if SHOWN_NAME.fullmatch(name) else "by that name"
            return f"There is no model {called} here.\n{listed}"
        return self._refusal(inbound, name, current) or self._switch(
            manager, models, inbound, key, name
        )

    def _menu(
        self, manager: SessionManager, models: SessionModels, inbound: Inbound, current: str | None
    ) -> str:
        """The models as a list; where the platform has buttons, as buttons too."""
        options = models.options(current)
        if self.menus is None or not isinstance(
            manager.adapters.get(inbound.chat.adapter_key), Interactive
        ):
            return model_list(options)
        labels = [
            (("▸ " if o.current else "") + label, o.name)
            for o, (label, _) in zip(options, model_choices(options), strict=True)
        ]
        self.menus.offer("model", inbound, labels)
        return model_list(options, MODEL_TAP)

    def _refusal(self, inbound: Inbound, name: str, current: str | None) -> str | None:
        if self.config.models_switch != "everyone" and not self.is_admin(inbound):
            return ADMINS_ONLY.format(what="switch models here")
        if (name == "default" and current is None) or name == current:
            return f"Already answering with {name}."
        return None

    async def tap(self, manager: SessionManager, inbound: Inbound) -> SubmitResult:
        """A tap on /model's list: what `/model NAME` does, its answer posted in the chat; a refusal
        (not an admin, a stale or carried-over list) goes to the tapper alone."""
        models = manager.roster.of(inbound).llm  # the agent's own choice of models
        if self.menus is None or not isinstance(models, SessionModels):
            return _refused(ONE_MODEL)
        name = self.menus.picked("model", inbound, [o.name for o in models.options(None)])
        if name is None:
            return _refused(STALE_MENU)
        key = manager.key_for(inbound)
        refusal = self._refusal(inbound, name, manager.store.model_choice(key))
        if refusal is not None:
            return _refused(refusal)
        text = self._switch(manager, models, inbound, key, name)
        manager.outbox.post_soon(
            f"pick:{inbound.chat.chat_id}:{inbound.message_id}", inbound.chat, text
        )
        return SubmitResult(SubmitOutcome.ACCEPTED, "choice")

    def _switch(
        self, manager: SessionManager, models: SessionModels, inbound: Inbound, key: str, name: str
    ) -> str:
        try:
            chosen = models.main if name == "default" else models.client(name)
        except LLMNotConfigured as exc:
            return f"I can't switch to {name}: {exc}"
        manager.store.set_model_choice(key, None if name == "default" else name, now=self.clock())
        log.info(
            "model switched session_key=%s to %s (%s) by %s:%s",
            key,
            name,
            chosen.model,
            inbound.chat.platform,
            inbound.user_id,
        )
        return f"Switched to {name} ({chosen.model}). Your next message is answered by it."


def _refused(text: str) -> SubmitResult:
    return SubmitResult(SubmitOutcome.REFUSED, "choice", notice=text)


def _argument(text: str) -> str:
    parts = text.strip().split(maxsplit=1)
    return parts[1].strip() if len(parts) > 1 else ""


def _busy(manager: SessionManager, key: str) -> bool:
    lane = manager.lane(key)
    return lane is not None and lane.current is not None and not lane.current.done()


def _original_inbound(store: Store, inbound: Inbound, message: MessageRow) -> Inbound | None:
    from gateway.store.transcript import decode_inbound

    if not message.platform_message_id:
        return None
    chat = inbound.chat
    row = store.one(
        "SELECT payload FROM inbound WHERE platform = ? AND account = ? AND chat_id = ?"
        " AND platform_message_id = ?",
        (chat.platform, chat.account, chat.chat_id, message.platform_message_id),
    )
    return decode_inbound(row[0]) if row else None


def _rewrite_inbound(store: Store, inbound: Inbound, retried: Inbound) -> None:
    from gateway.store.transcript import encode_inbound

    chat = inbound.chat
    store.execute(
        "UPDATE inbound SET text = ?, payload = ? WHERE platform = ? AND account = ?"
        " AND chat_id = ? AND platform_message_id = ?",
        (
            retried.text,
            encode_inbound(retried),
            chat.platform,
            chat.account,
            chat.chat_id,
            inbound.message_id,
        ),
    )


def _hit_rate(session: SessionRow) -> str:
    total = session.input_tokens + session.cache_read_tokens + session.cache_write_tokens
    return f"{round(100 * session.cache_read_tokens / total)}%" if total else "no"


def _usage(
    store: Store, where: str, args: tuple[object, ...]
) -> tuple[int, int, int, int, int, int]:
    row = store.one(
        "SELECT COUNT(*), COALESCE(SUM(c.input_tokens), 0), COALESCE(SUM(c.output_tokens), 0),"
        " COALESCE(SUM(c.cache_read_tokens), 0), COALESCE(SUM(c.cache_write_tokens), 0),"
        " COALESCE(SUM(c.purpose = 'flush'), 0) FROM llm_calls "
        f"c JOIN sessions s ON s.id = c.session_id WHERE {where}",
        args,
    )
    assert row is not None
    return tuple(int(v) for v in row)  # type: ignore[return-value]


def _usage_line(u: tuple[int, int, int, int, int, int]) -> str:
    calls, tokens_in, tokens_out, read, written, flushes = u
    what = f"{calls} model call{'s' if calls != 1 else ''}"
    if flushes:
        what += f" ({flushes} for memory flushes)"
    return (
        f"{what}; {tokens_in:,} tokens in, {tokens_out:,} "
        f"out; cache {read:,} read, {written:,} written."
    )
