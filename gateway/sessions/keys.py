"""The session key: one pure function of where a message was said and by whom (STYLE: one function, a stable
string form for SQLite), and the per-platform override of per-user group sessions."""

from __future__ import annotations

from gateway.config.settings import Config
from gateway.errors import GatewayError
from gateway.events import ChatRef


def session_key(chat: ChatRef, user_id: str, *, group_per_user: bool) -> str:
    """`<platform>:<chat_type>:<chat_id>[:<thread_id>][:<user_id>]`; threads are shared by their members.

    A DM without a chat id falls back to the user id, never to a shared sink.
    """
    chat_id = chat.chat_id or (user_id if chat.chat_type == "dm" else "")
    if not chat_id:
        raise GatewayError(f"{chat.platform}: message without a chat id in a {chat.chat_type}")
    parts = [chat.platform, chat.chat_type, chat_id]
    if chat.thread_id:
        parts.append(chat.thread_id)
    elif chat.chat_type != "dm" and group_per_user:
        parts.append(user_id)
    return ":".join(parts)


def platform_per_user(config: Config, platform: str) -> bool | None:
    section = getattr(config, platform, None)
    return getattr(section, "group_sessions_per_user", None) if section is not None else None
