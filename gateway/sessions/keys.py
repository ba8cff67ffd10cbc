"""The session key: one pure function of where a message was said, by whom and to which agent (STYLE: one
function, a stable string form for SQLite), and the per-platform override of per-user group sessions."""

from __future__ import annotations

from gateway.config.settings import Config
from gateway.errors import GatewayError
from gateway.events import DEFAULT_ACCOUNT, MAIN_AGENT, ChatRef


def session_key(chat: ChatRef, user_id: str, *, group_per_user: bool, agent: str = MAIN_AGENT) -> str:
    """`[<agent>/]<platform>[@<account>]:<chat_type>:<chat_id>[:<thread_id>][:<user_id>]`; threads are shared by
    their members. The agent `main` and the account `default` are left out, so a key from before agents and
    accounts existed is the key of the same conversation still.

    A DM without a chat id falls back to the user id, never to a shared sink.
    """
    chat_id = chat.chat_id or (user_id if chat.chat_type == "dm" else "")
    if not chat_id:
        raise GatewayError(f"{chat.platform}: message without a chat id in a {chat.chat_type}")
    where = chat.adapter_key if agent == MAIN_AGENT else f"{agent}/{chat.adapter_key}"
    parts = [where, chat.chat_type, chat_id]
    if chat.thread_id:
        parts.append(chat.thread_id)
    elif chat.chat_type != "dm" and group_per_user:
        parts.append(user_id)
    return ":".join(parts)


def platform_per_user(config: Config, platform: str, account: str = DEFAULT_ACCOUNT) -> bool | None:
    """The account's `group_sessions_per_user` (its platform's, unless the account sets its own)."""
    section = getattr(config, platform, None)
    if section is None:
        return None
    found = section if account == DEFAULT_ACCOUNT else section.accounts.get(account, section)
    return getattr(found, "group_sessions_per_user", None)
