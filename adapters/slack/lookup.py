"""What the Slack adapter learns from the Web API about chats, people and threads: each asked once
per key (shared by the messages that need it), remembered in bounded maps, and waited for only
within a message's budget."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from typing import Any, TypeVar

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.ack import deadline
from adapters.slack.text import (
    API_ERRORS,
    CHANNEL_TYPES,
    NETWORK_ERRORS,
    USER_SUBTYPES,
    Me,
    Person,
    clip,
    describe,
    guess_type,
    mentioned_users,
    put,
    slack_to_text,
    ts_value,
)
from gateway.config.settings import SlackConfig
from gateway.errors import AdapterError
from gateway.events import ChatType

# one logger for the Slack adapter, whichever module speaks
log = logging.getLogger("adapters.slack.adapter")

REPLIES_PAGE = 200
REPLIES_MAX_PAGES = 5

T = TypeVar("T")


class Directory:
    """Chat types, people's names and threads' earlier messages; `client` and `me` are set once
    auth.test passed. Lookups still running when `stop` comes are in `in_flight`, for the adapter to
    cancel."""

    def __init__(self, config: SlackConfig, enrich_budget: float) -> None:
        self.config = config
        self.enrich_budget = enrich_budget
        self.client: AsyncWebClient | None = None
        self.me: Me | None = None
        # Web API lookups in flight, shared by events
        self.in_flight: dict[Hashable, asyncio.Task[Any]] = {}
        # lookups a message already gave up waiting for
        self._overdue: set[asyncio.Task[Any]] = set()
        self.chat_types: OrderedDict[str, ChatType] = OrderedDict()
        self.people: OrderedDict[str, Person] = OrderedDict()

    def cached_type(self, channel: str, channel_type: str | None) -> ChatType | None:
        """`message` events say the channel's type; `app_mention` and slash commands do not, so it
        is asked once."""
        if channel_type in CHANNEL_TYPES:
            put(self.chat_types, channel, CHANNEL_TYPES[channel_type])
        if channel.startswith("D"):
            return "dm"
        return self.chat_types.get(channel)

    async def enrich(
        self,
        channel: str,
        chat_type: ChatType | None,
        people: set[str],
        more: Collection[asyncio.Task[Any]] = (),
    ) -> tuple[ChatType, dict[str, str | None]]:
        """The chat's type and people's names, from memory or else the Web API within the enrichment
        budget. Lookups still out by then go on in the background and are remembered for the next
        message; this one goes with a type guessed from the id and without those names."""
        kind = (
            None
            if chat_type is not None
            else self.lookup(("type", channel), functools.partial(self._chat_type, channel))
        )
        lookups = [
            *([kind] if kind is not None else []),
            *(
                self.lookup(("person", uid), functools.partial(self._person, uid))
                for uid in sorted(people)
                if uid not in self.people
            ),
        ]
        # one message waits for a slow lookup
        waits = [*more, *(t for t in lookups if t not in self._overdue)]
        if waits:
            loop = asyncio.get_running_loop()
            _, late = await asyncio.wait(
                waits, timeout=max(0.0, deadline(self.enrich_budget) - loop.time())
            )
            if late:
                self._overdue.update(t for t in late if t in lookups)
                log.info(
                    "slack: %d Web API lookup(s) for a message "
                    "in %s took over %.1fs; going on without them",
                    len(late),
                    channel,
                    self.enrich_budget,
                )
        if chat_type is None:
            assert kind is not None
            chat_type = task_result(kind, None) or guess_type(channel)
        return chat_type, {
            uid: self.people[uid].name if uid in self.people else None for uid in people
        }

    def lookup(self, key: Hashable, call: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """One Web API lookup per key in flight, shared by the messages that need it. It runs on
        after a listener stopped waiting for it, so its answer is there for the next message."""
        task = self.in_flight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                _awaited(call), name=f"slack-lookup:{key}"
            )
            self.in_flight[key] = task
            task.add_done_callback(functools.partial(self._lookup_done, key))
        return task

    def _lookup_done(self, key: Hashable, task: asyncio.Task[Any]) -> None:
        self._overdue.discard(task)
        if self.in_flight.get(key) is task:
            del self.in_flight[key]
        if not task.cancelled() and task.exception() is not None:
            log.warning("slack: lookup %s failed (%s)", key, describe(task.exception()))  # type: ignore[arg-type]

    async def _chat_type(self, channel: str) -> ChatType:
        assert self.client is not None
        try:
            info = (await self.client.conversations_info(channel=channel)).get("channel") or {}
            found: ChatType = (
                "dm"
                if info.get("is_im")
                else "group"
                if info.get("is_private") or info.get("is_mpim")
                else "channel"
            )
        except API_ERRORS as exc:
            log.info(
                "slack: conversations.info for %s failed (%s); guessing from the id",
                channel,
                describe(exc),
            )
            found = guess_type(channel)
            if not isinstance(exc, SlackApiError):
                return found  # not remembered: the next message asks again
        put(self.chat_types, channel, found)
        return found

    async def _person(self, user_id: str) -> Person:
        found = self.people.get(user_id)
        if found is not None:
            return found
        assert self.client is not None
        try:
            user = (await self.client.users_info(user=user_id)).get("user") or {}
            profile = user.get("profile") or {}
            found = Person(
                name=profile.get("display_name")
                or profile.get("real_name")
                or user.get("real_name")
                or user.get("name"),
                handle=user.get("name"),
            )
        except SlackApiError as exc:  # no users:read scope, say: ids then
            log.debug("slack: users.info for %s failed (%s)", user_id, describe(exc))
            found = Person()
        except NETWORK_ERRORS as exc:  # not remembered: the next message asks again
            log.debug("slack: users.info for %s failed (%s)", user_id, describe(exc))
            return Person()
        put(self.people, user_id, found)
        return found

    async def _names(self, user_ids: set[str]) -> dict[str, str | None]:
        waits = [
            self.lookup(("person", uid), functools.partial(self._person, uid))
            for uid in sorted(user_ids)
            if uid not in self.people
        ]
        if waits:  # shared lookups: waited for, never cancelled from here
            await asyncio.wait(waits)
        return {uid: self.people.get(uid, Person()).name for uid in user_ids}

    async def still_member(self, user_id: str) -> bool:
        """Whether the user's account is still active (asked now, not cached): a deactivated account
        (`deleted`) or one Slack no longer knows is not. Their home team is not compared: a Slack
        Connect or Enterprise Grid member's is another workspace's. Raises AdapterError when Slack
        cannot say."""
        assert self.client is not None
        try:
            user = (await self.client.users_info(user=user_id)).get("user") or {}
        except SlackApiError as exc:
            if exc.response.get("error") in ("user_not_found", "user_not_visible"):
                return False
            raise AdapterError("slack", f"users.info failed ({describe(exc)})") from None
        except NETWORK_ERRORS as exc:
            raise AdapterError("slack", f"users.info failed ({describe(exc)})") from None
        # not the team: a Slack Connect or Grid member's home team is another
        return not user.get("deleted")

    # ------------------------------------------------------------------ a thread's earlier messages
    async def thread_context(self, channel: str, thread_ts: str, current_ts: str) -> str:
        """The thread so far as a compact transcript, for the first message we see in a thread we
        were not in."""
        limit = self.config.thread_history_limit
        if limit <= 0:
            return ""
        try:
            messages = await self._replies(channel, thread_ts)
        except API_ERRORS as exc:
            log.warning(
                "slack: reading thread %s in %s failed (%s); answering without it",
                thread_ts,
                channel,
                describe(exc),
            )
            return ""
        earlier = [
            m
            for m in messages
            if ts_value(m.get("ts")) < ts_value(current_ts)
            and str(m.get("subtype") or "") in USER_SUBTYPES | {"bot_message"}
            and m.get("text")
        ]
        if len(earlier) > limit:
            # the root says what the thread is about; the rest are the latest words
            earlier = (
                earlier[:1] + earlier[len(earlier) - limit + 1 :] if limit > 1 else earlier[:1]
            )
        if not earlier:
            return ""
        people = {str(m["user"]) for m in earlier if m.get("user")} | {
            u for m in earlier for u in mentioned_users(str(m["text"]))
        }
        # "<@bot> thoughts?" → "@you …"
        names = {**await self._names(people - {self._me_id}), self._me_id: "you"}
        lines = [
            f"{self._speaker(m, names)}: {clip(slack_to_text(str(m['text']), '', names))}"
            for m in earlier
        ]
        return '[Earlier in this thread, oldest first ("you" is you):\n' + "\n".join(lines) + "]"

    async def _replies(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        assert self.client is not None
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(REPLIES_MAX_PAGES):
            page = await self.client.conversations_replies(
                channel=channel, ts=thread_ts, limit=REPLIES_PAGE, cursor=cursor
            )
            found.extend(m for m in page.get("messages") or () if isinstance(m, dict))
            cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
            if not cursor:
                break
        return found

    @property
    def _me_id(self) -> str:
        return self.me.user_id if self.me else ""

    def _is_me(self, message: Mapping[str, Any]) -> bool:
        assert self.me is not None
        return message.get("user") == self.me.user_id or bool(
            message.get("bot_id") and message.get("bot_id") == self.me.bot_id
        )

    def _speaker(self, message: Mapping[str, Any], names: Mapping[str, str | None]) -> str:
        if self._is_me(message):
            return "you"
        if message.get("bot_id") and not message.get("user"):
            return str(
                message.get("username") or (message.get("bot_profile") or {}).get("name") or "a bot"
            )
        user = str(message.get("user") or "")
        return names.get(user) or user or "someone"


def task_result(task: asyncio.Task[Any], default: Any) -> Any:
    """A finished task's result, or `default` when it is still running, failed or was cancelled."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return default
    return task.result()


async def _awaited(call: Callable[[], Awaitable[T]]) -> T:
    return await call()
