"""Discord's `thread_replies: auto`: the thread an answer goes into, planned when a message arrives
and opened only once the core answers it (a stranger's mention opens nothing).

A thread started from a message has the message's id, so the session key is known at once; Discord
is asked to open it before the first typing indicator or message of the answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import replace

import discord

from adapters.discord.text import Place, thread_name
from gateway.events import ChatRef

# one logger for the Discord adapter, whichever module speaks
log = logging.getLogger("adapters.discord.adapter")

REMEMBERED_THREAD_STARTS = 1000  # planned auto threads whose turn has not started yet
# Discord's code: the message already has a thread (ours, from a replay)
THREAD_ALREADY_CREATED = 160004


class AutoThreads:
    """Planned threads not opened yet (the message and the thread's name), and those Discord
    refused, whose replies go to the channel instead."""

    def __init__(self) -> None:
        self._starts: OrderedDict[str, tuple[discord.Message, str]] = OrderedDict()
        self._lock = asyncio.Lock()
        self._refused: set[str] = set()

    def plan(self, message: discord.Message, place: Place, text: str) -> Place:
        """The message's place as the thread it will start: the session key is known now."""
        if message.thread is None:  # a replayed mention already has its thread
            self._starts[str(message.id)] = (
                message,
                thread_name(text, message.author.display_name),
            )
            while len(self._starts) > REMEMBERED_THREAD_STARTS:
                self._starts.popitem(last=False)
        return replace(place, thread_id=str(message.id), bot_thread=True)

    async def open(self, chat: ChatRef) -> int:
        """Open the planned thread before the first typing
        indicator or message; returns where to post."""
        thread_id = chat.thread_id or ""
        async with self._lock:
            planned = self._starts.pop(thread_id, None)
            if planned is not None:
                message, name = planned
                try:
                    await message.create_thread(name=name)
                except discord.HTTPException as exc:
                    if exc.code != THREAD_ALREADY_CREATED:
                        log.warning(
                            "discord: cannot open a thread in channel "
                            "%s (%s); answering in the channel",
                            chat.chat_id,
                            exc,
                        )
                        self._refused.add(thread_id)
                except BaseException:
                    self._starts[thread_id] = planned  # a network failure: the retry tries again
                    raise
        return int(chat.chat_id) if thread_id in self._refused else int(thread_id or chat.chat_id)
