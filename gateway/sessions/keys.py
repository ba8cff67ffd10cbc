"""The session key: one pure function of where a message was said, by whom and to which agent
(STYLE: one function, a stable string form for SQLite), and the per-platform override of per-user
group sessions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from gateway.config.settings import Config
from gateway.errors import GatewayError
from gateway.events import DEFAULT_ACCOUNT, MAIN_AGENT, ChatRef, Inbound


def session_key(
    chat: ChatRef, user_id: str, *, group_per_user: bool, agent: str = MAIN_AGENT
) -> str:
    """`[<agent>/]<platform>[@<account>]:<chat_type>:<chat_id>[:<thread_id>][:<user_id>]`; threads
    are shared by their members. The agent `main` and the account `default` are left out, so a key
    from before agents and accounts existed is the key of the same conversation still.

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


def inbound_key(config: Config, inbound: Inbound) -> str:
    """The key of the session a message goes to: its agent's, its chat's as its bot account reaches
    it, per member in a group unless the platform (or the account) says otherwise."""
    override = platform_per_user(config, inbound.chat.platform, inbound.chat.account)
    per_user = config.sessions.group_per_user if override is None else override
    return session_key(inbound.chat, inbound.user_id, group_per_user=per_user, agent=inbound.agent)


def busy_policy(config: Config, platform: str) -> str:
    """`queue` or `interrupt`: what a new message does to a turn running in its session."""
    by_platform = cast("Mapping[str, str]", config.sessions.busy_by_platform)
    return by_platform.get(platform) or config.sessions.busy


def platform_per_user(config: Config, platform: str, account: str = DEFAULT_ACCOUNT) -> bool | None:
    """The account's `group_sessions_per_user` (its platform's, unless the account sets its own)."""
    section = getattr(config, platform, None)
    if section is None:
        return None
    found = section if account == DEFAULT_ACCOUNT else section.accounts.get(account, section)
    return getattr(found, "group_sessions_per_user", None)
