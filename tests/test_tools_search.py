"""session_search over the real store schema: scope per
asking user, FTS syntax errors, CJK, output text.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.agent.tools.catalog import build_registry
from gateway.agent.tools.registry import ToolContext, ToolResult
from gateway.errors import ToolError
from gateway.knowledge import search
from gateway.knowledge.search import SessionHits, SessionSearch
from gateway.store.database import Store

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class World:
    """Alice and Bob on Telegram: a DM each, a group where each has a session, and a thread both
    spoke in."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.store = Store(home / "state.db")
        self.searcher = SessionSearch()
        self.clock = T0
        self.alice_dm = self.session("dm", "a", "a")
        self.say(self.alice_dm, "a", "My cat is called Miso and she hates the vacuum.")
        self.say(self.alice_dm, None, "Miso sounds like a lovely cat.")
        self.bob_dm = self.session("dm", "b", "b")
        self.say(self.bob_dm, "b", "My cat Pixel has a secret vet appointment.")
        self.alice_group = self.session("group", "g1", "a")
        self.say(self.alice_group, "a", "Which cat food brand do you recommend?")
        self.bob_group = self.session("group", "g1", "b")
        self.say(self.bob_group, "b", "I have a cat allergy, sadly.")
        self.thread = self.session("group", "g1", None)
        self.say(self.thread, "b", "The cats in the office need a sitter.")
        self.say(self.thread, "a", "I can feed them on Friday.")
        self.other_group = self.session("group", "g2", "a")
        self.say(self.other_group, "a", "Our team cat photo is ready.")
        self.alice_discord = self.session("dm", "a", "a", platform="discord")
        self.say(self.alice_discord, "a", "Discord cat chat.")
        self.current = self.session("dm", "a", "a")
        self.say(self.current, "a", "Search my cat conversations please.")

    def session(
        self, chat_type: str, chat_id: str, user: str | None, platform: str = "telegram"
    ) -> int:
        key = f"{platform}:{chat_type}:{chat_id}:{user or ''}:{self.clock.isoformat()}"
        return self.store.create_session(
            key=key,
            platform=platform,
            chat_type=chat_type,
            chat_id=chat_id,
            thread_id=None,
            user_id=user,
            parent_id=None,
            model=None,
            provider=None,
            now=self.clock,
        ).id

    def say(self, session_id: int, user: str | None, text: str) -> int:
        self.clock += timedelta(hours=1)
        role = "user" if user else "assistant"
        return self.store.add_message(session_id, role, text, now=self.clock, user_id=user)

    def ctx(
        self,
        user: str | None,
        chat_type: str = "dm",
        chat_id: str | None = None,
        platform: str = "telegram",
    ) -> ToolContext:
        return ToolContext(
            session_id=self.current,
            platform=platform,
            chat_type=chat_type,
            user_id=user,
            home=self.home,
            db_path=self.home / "state.db",
            chat_id=chat_id or user,
        )

    def search(self, ctx: ToolContext, query: str, limit: int = 10) -> list[SessionHits]:
        return self.searcher.search_now(ctx, query, limit=limit)

    def found(self, ctx: ToolContext, query: str, limit: int = 10) -> set[int]:
        return {r.session_id for r in self.search(ctx, query, limit=limit)}


@pytest.fixture(
    autouse=True, params=["listed-scope", "probe", "walk-many-messages", "walk-many-sessions"]
)
def plan(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run every test through each query plan, by moving the thresholds that choose between them:
    the scope's sessions handed to the query; each scoped message checked against the index (store
    schema, many matches); and walking the newest matches when the scope is too big to list."""
    if request.param in ("probe", "walk-many-messages"):
        monkeypatch.setattr(search, "_FEW_MATCHES", 0)
    if request.param == "walk-many-messages":
        monkeypatch.setattr(search, "_PROBE_MAX_MESSAGES", 0)
    if request.param == "walk-many-sessions":
        monkeypatch.setattr(search, "_SMALL_SCOPE_SESSIONS", 0)
        monkeypatch.setattr(search, "_MAX_SPOKE_SESSIONS", 0)
    return str(request.param)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """The store's schema, which carries the scoped search index (migration 0003_search_index)."""
    w = World(tmp_path)
    yield w
    w.searcher.close()
    w.store.close()


def test_dm_asker_finds_own_dms_and_groups_they_spoke_in(world: World) -> None:
    assert world.found(world.ctx("a"), "cat") == {
        world.alice_dm,
        world.alice_group,
        world.thread,
        world.other_group,
    }
    assert world.found(world.ctx("b"), "cat") == {world.bob_dm, world.bob_group, world.thread}


def test_never_another_users_dm(world: World) -> None:
    assert world.found(world.ctx("a"), "Pixel") == set()
    assert world.found(world.ctx("b"), "Miso") == set()
    assert world.found(world.ctx("c"), "cat") == set()  # a stranger finds nothing at all


def test_group_asker_searches_only_that_group_and_never_dms(world: World) -> None:
    # The answer is read by the whole group, so Alice's DMs and her other groups stay out of it.
    assert world.found(world.ctx("a", "group", "g1"), "cat") == {world.alice_group, world.thread}
    assert world.found(world.ctx("b", "group", "g1"), "cat") == {world.bob_group, world.thread}
    assert world.found(world.ctx("a", "group", "g1"), "Miso") == set()


def test_platform_and_current_session_are_excluded(world: World) -> None:
    assert world.found(world.ctx("a", platform="discord"), "cat") == {world.alice_discord}
    assert world.current not in world.found(world.ctx("a"), "conversations")


def test_only_active_chat_messages_from_people_and_the_agent_match(world: World) -> None:
    sid = world.session("dm", "a", "a")
    world.say(sid, None, "tool output zebra")
    world.store.add_message(sid, "tool", "zebra from a tool", now=world.clock)
    world.store.add_message(sid, "user", "zebra flush instruction", now=world.clock, kind="flush")
    old = world.say(sid, "a", "zebra before compression")
    world.store.deactivate_messages([old])
    hits = world.search(world.ctx("a"), "zebra")
    assert [[h.snippet for h in r.hits] for r in hits] == [["tool output «zebra»"]]


def test_messages_compressed_out_of_the_context_are_still_found_once(world: World) -> None:
    sid = world.session("dm", "a", "a")
    early = world.say(sid, "a", "my locker code is quokka 4417")
    world.say(sid, None, "noted, the quokka code")
    world.say(sid, "a", "and the quokka emoji too")
    rows = world.store.history(sid)
    dropped, tail = [r.id for r in rows[:2]], rows[2:]
    world.store.compress_history(
        sid, dropped=dropped, tail=tail, summary="User shared a quokka code.", now=world.clock
    )
    # out of the model's context ...
    assert all(r.id not in (early,) for r in world.store.history(sid))
    hits = world.search(world.ctx("a"), "quokka")
    # ... but searchable, and the tail only once
    assert [sorted(h.snippet for h in r.hits) for r in hits] == [
        [
            "and the «quokka» emoji too",
            "my locker code is «quokka» 4417",
            "noted, the «quokka» code",
        ]
    ]


def test_stemming_phrases_and_operators(world: World) -> None:
    assert world.found(world.ctx("b"), "cats") == {world.bob_dm, world.bob_group, world.thread}
    assert world.found(world.ctx("a"), '"cat food"') == {world.alice_group}
    assert world.found(world.ctx("a"), "Miso OR photo") == {world.alice_dm, world.other_group}
    assert world.found(world.ctx("a"), "cat NOT Miso") == {
        world.alice_group,
        world.thread,
        world.other_group,
    }
    assert world.found(world.ctx("a"), "vacu*") == {world.alice_dm}


def test_limit_keeps_the_newest_sessions(world: World) -> None:
    assert [r.session_id for r in world.search(world.ctx("a"), "cat", limit=2)] == [
        world.other_group,
        world.thread,
    ]


@pytest.mark.parametrize(
    "query",
    [
        "cat AND (",
        '"unclosed',
        "e-mail",
        "NOT",
        "user's",
        "cat) OR (dog",
        "*cat",
        "cat)) OR ((Pixel",
    ],
)
async def test_bad_fts_syntax_is_a_clear_tool_error(world: World, query: str) -> None:
    result = await build_registry(world.home).call(
        "session_search", {"query": query}, world.ctx("a")
    )
    assert result.is_error
    assert result.text.startswith(f"Search query {query!r} is not valid full-text syntax (")
    assert "put words with punctuation such as e-mail in double quotes" in result.text


async def test_quoted_punctuation_works(world: World) -> None:
    world.say(world.alice_dm, "a", "My e-mail is on the fridge.")
    result = await build_registry(world.home).call(
        "session_search", {"query": '"e-mail"'}, world.ctx("a")
    )
    assert not result.is_error and "«e-mail»" in result.text


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("東京", "下个月去«東京»旅行。"),  # two characters: shorter than a trigram
        ("東京旅行", "下个月去«東京旅行»。"),
        ("旅行 下个月", "«下个月»去東京«旅行»。"),  # every term must match, in any order
        ("ラーメン", "昨日の«ラーメン»は美味しかった"),
        ("ramen 美味", "昨日の«ramen»は«美味»しかった"),
    ],
)
def test_cjk_terms_match_inside_unspaced_text(world: World, query: str, expected: str) -> None:
    sid = world.session("dm", "a", "a")
    world.say(sid, "a", "下个月去東京旅行。")
    world.say(sid, "a", "昨日のラーメンは美味しかった")
    world.say(sid, "a", "昨日のramenは美味しかった")
    hits = world.search(world.ctx("a"), query)
    assert [h.snippet for r in hits for h in r.hits] == [expected]
    assert world.search(world.ctx("b"), query) == []


async def test_tool_output_groups_snippets_by_session_with_dates(world: World) -> None:
    result = await build_registry(world.home).call(
        "session_search", {"query": "cat", "limit": 2}, world.ctx("a")
    )
    assert result == ToolResult(
        "Past conversations matching 'cat', newest first:\n"
        "\n"
        "2025-03-01 (group, session 6):\n"
        "  [2025-03-01 17:00 user] Our team «cat» photo is ready.\n"
        "\n"
        "2025-03-01 (group, session 5):\n"
        "  [2025-03-01 15:00 user] The «cats» in the office need a sitter."
    )


async def test_no_match_no_history_and_unknown_asker(world: World, tmp_path: Path) -> None:
    registry = build_registry(world.home)
    assert await registry.call(
        "session_search", {"query": "giraffe"}, world.ctx("a")
    ) == ToolResult("No past conversations match 'giraffe'.")
    assert (await registry.call("session_search", {"query": "cat"}, world.ctx(None))) == ToolResult(
        "Search is unavailable here: the person asking is unknown.", is_error=True
    )
    assert (await registry.call("session_search", {"query": "  "}, world.ctx("a"))) == ToolResult(
        "The search query is empty.", is_error=True
    )
    empty_home = tmp_path / "empty"
    empty = ToolContext(1, "telegram", "dm", "a", empty_home, empty_home / "state.db", chat_id="a")
    assert await registry.call("session_search", {"query": "cat"}, empty) == ToolResult(
        "There is no conversation history yet.", is_error=True
    )


@pytest.mark.parametrize(
    "query", ["sid:{bob}", "{{sid content}}:{bob}", "cat OR sid:{bob}", "sid:({bob}) OR cat"]
)
def test_column_filters_cannot_reach_other_sessions(world: World, query: str) -> None:
    query = query.format(bob=world.bob_dm)
    try:
        found = world.found(world.ctx("a"), query)
    except ToolError as e:  # the store schema has no sid column
        assert "not valid full-text syntax (no such column" in str(e)
    else:
        assert world.bob_dm not in found and world.bob_group not in found


def test_numbers_match_text_not_session_tokens(world: World) -> None:
    assert world.found(world.ctx("a"), str(world.alice_dm)) == set()
    world.say(world.alice_dm, "a", f"Room {world.alice_dm} is booked.")
    assert world.found(world.ctx("a"), str(world.alice_dm)) == {world.alice_dm}


def test_index_triggers_follow_inserts_updates_and_deletes(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    sid = store.create_session(
        key="k",
        platform="web",
        chat_type="dm",
        chat_id="a",
        thread_id=None,
        user_id="a",
        parent_id=None,
        model=None,
        provider=None,
        now=T0,
    ).id
    ids = [
        store.add_message(sid, role, text, now=T0, kind=kind)
        for role, text, kind in [
            ("user", "plain words", "chat"),
            ("assistant", "東京の天気", "chat"),
            ("tool", "東京 tool output", "chat"),
            ("user", "flush prompt 東京", "flush"),
            ("assistant", "mixed ramen 美味しい", "chat"),
        ]
    ]
    conn = store.conn

    def indexed(table: str) -> list[int]:
        return [r[0] for r in conn.execute(f"SELECT id FROM {table}_docsize ORDER BY id")]

    store.index_pending()  # indexed after their transaction (tests/test_search_index.py)
    assert indexed("messages_fts") == [ids[0], ids[1], ids[4]]  # no tool output, no flush turn
    assert indexed("messages_fts_tri") == [ids[1], ids[4]]  # only text with CJK in it
    with store.tx():
        conn.execute("UPDATE messages SET content = 'now latin only' WHERE id = ?", (ids[1],))
        conn.execute("UPDATE messages SET content = '今は日本語' WHERE id = ?", (ids[0],))
        conn.execute("UPDATE messages SET role = 'assistant' WHERE id = ?", (ids[2],))
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[4],))
    assert indexed("messages_fts") == [ids[0], ids[1], ids[2]]
    assert indexed("messages_fts_tri") == [ids[0], ids[2]]
    for table in ("messages_fts", "messages_fts_tri"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    store.close()
