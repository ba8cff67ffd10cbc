"""Queries on what people chose in chat: a chat's voice replies (`/voice on|off`) and a conversation's model
(`/model NAME`, kept by session key, so it outlives a reset and a restart until `/model default`)."""

from __future__ import annotations

from datetime import datetime

from gateway.store.connection import Database
from gateway.store.rows import iso


class ChoiceQueries(Database):
    def chat_voice(self, platform: str, chat_id: str) -> str | None:
        """"on", "off", or None when the chat left it to `voice.replies`."""
        row = self.one("SELECT mode FROM chat_voice WHERE platform = ? AND chat_id = ?", (platform, chat_id))
        return None if row is None else str(row[0])

    def set_chat_voice(self, platform: str, chat_id: str, mode: str | None, *, now: datetime) -> None:
        if mode is None:
            self.execute("DELETE FROM chat_voice WHERE platform = ? AND chat_id = ?", (platform, chat_id))
            return
        self.execute("INSERT INTO chat_voice (platform, chat_id, mode, set_at) VALUES (?, ?, ?, ?)"
                     " ON CONFLICT (platform, chat_id) DO UPDATE SET mode = excluded.mode, set_at = excluded.set_at",
                     (platform, chat_id, mode, iso(now)))

    def model_choice(self, key: str) -> str | None:
        """The `models:` name this conversation switched to; None: the main model."""
        row = self.one("SELECT name FROM session_models WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_model_choice(self, key: str, name: str | None, *, now: datetime) -> None:
        if name is None:
            self.execute("DELETE FROM session_models WHERE key = ?", (key,))
            return
        self.execute("INSERT INTO session_models (key, name, set_at) VALUES (?, ?, ?)"
                     " ON CONFLICT (key) DO UPDATE SET name = excluded.name, set_at = excluded.set_at",
                     (key, name, iso(now)))
