"""Benchmark session_search: build a store with N messages (default 1,000,000 in 10,000 sessions),
time 200 queries.

Run:  PYTHONPATH=. python bench/search.py [--messages N] [--db PATH] [--keep] [--scoped-index]
                                          [--slowest K]
Prints build time, database size and p50 / p95 / max latency per query kind and overall (goal: p95 <
20 ms). The schema comes from gateway.store.database.Store, so the bench measures the tables the
daemon really writes; --scoped-index first applies the proposed migration in
gateway/store/search_index.py (migration 0003 in the store). Queries go through
SessionSearch.search_now, the code the tool runs (minus the hop to its thread). Askers: 20% a heavy
user with ~12% of all sessions, 60% ordinary users in DMs, 20% users asking in a group.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.agent.tools.registry import ToolContext
from gateway.knowledge.search import SessionSearch
from gateway.store.database import Store
from gateway.store.search_index import SEARCH_INDEX_MIGRATION_SQL, rebuild

PLATFORMS = ("telegram", "discord", "slack", "web")
REAL_WORDS = [
    "docker",
    "compose",
    "deploy",
    "server",
    "database",
    "backup",
    "restore",
    "migration",
    "python",
    "javascript",
    "typescript",
    "rust",
    "golang",
    "kubernetes",
    "cluster",
    "node",
    "pod",
    "container",
    "image",
    "registry",
    "nginx",
    "proxy",
    "certificate",
    "domain",
    "email",
    "calendar",
    "meeting",
    "invoice",
    "payment",
    "budget",
    "travel",
    "flight",
    "hotel",
    "train",
    "ticket",
    "passport",
    "visa",
    "weather",
    "rain",
    "sunny",
    "garden",
    "tomato",
    "recipe",
    "pasta",
    "pizza",
    "coffee",
    "tea",
    "breakfast",
    "dinner",
    "lunch",
    "birthday",
    "party",
    "gift",
    "anniversary",
    "wedding",
    "holiday",
    "vacation",
    "beach",
    "mountain",
    "hiking",
    "running",
    "cycling",
    "swimming",
    "yoga",
    "gym",
    "doctor",
    "dentist",
    "appointment",
    "medicine",
    "insurance",
    "mortgage",
    "rent",
    "apartment",
    "kitchen",
    "bathroom",
    "bedroom",
    "furniture",
    "sofa",
    "laptop",
    "phone",
    "keyboard",
    "monitor",
    "printer",
    "router",
    "wifi",
    "password",
    "update",
    "upgrade",
    "install",
    "configure",
    "error",
    "exception",
    "timeout",
    "crash",
    "bug",
    "fix",
    "release",
    "version",
    "branch",
    "commit",
    "merge",
    "review",
    "test",
    "coverage",
    "benchmark",
    "latency",
    "throughput",
    "memory",
    "cpu",
    "disk",
    "network",
    "firewall",
    "security",
    "login",
    "logout",
    "account",
    "profile",
    "settings",
    "notification",
    "reminder",
    "schedule",
    "task",
    "project",
    "deadline",
    "report",
    "presentation",
    "slides",
    "document",
    "spreadsheet",
    "chart",
    "graph",
    "analysis",
    "data",
    "model",
    "training",
    "dataset",
    "prompt",
    "token",
    "context",
    "window",
    "embedding",
    "vector",
    "search",
    "index",
    "query",
    "cache",
    "session",
    "user",
    "assistant",
    "telegram",
    "discord",
    "slack",
    "webhook",
    "bot",
    "channel",
    "group",
    "thread",
    "message",
    "reply",
    "mention",
    "reaction",
    "emoji",
    "sticker",
    "photo",
    "video",
    "music",
    "playlist",
    "podcast",
    "book",
    "novel",
    "chapter",
    "author",
    "library",
    "school",
    "homework",
    "exam",
    "lesson",
    "teacher",
    "student",
    "course",
    "language",
    "english",
    "german",
    "french",
    "spanish",
    "japanese",
    "chinese",
    "grammar",
    "vocabulary",
    "translation",
    "dictionary",
    "cat",
    "dog",
    "puppy",
    "kitten",
    "vet",
    "food",
    "walk",
    "park",
    "car",
    "bicycle",
    "bus",
    "subway",
    "airport",
    "station",
]
CJK_WORDS = [
    "東京",
    "旅行",
    "会議",
    "予定",
    "天気",
    "雨",
    "晴れ",
    "仕事",
    "会社",
    "電車",
    "新幹線",
    "ホテル",
    "予約",
    "料理",
    "寿司",
    "ラーメン",
    "友達",
    "家族",
    "誕生日",
    "映画",
    "音楽",
    "本",
    "図書館",
    "学校",
    "先生",
    "学生",
    "試験",
    "勉強",
    "日本語",
    "英語",
    "病院",
    "医者",
    "薬",
    "保険",
    "銀行",
    "お金",
    "買い物",
    "スーパー",
    "駅",
    "空港",
    "数据库",
    "服务器",
    "错误",
    "部署",
    "备份",
    "恢复",
    "迁移",
    "测试",
    "版本",
    "发布",
    "代码",
    "合并",
    "审查",
    "性能",
    "延迟",
    "内存",
    "网络",
    "安全",
    "密码",
    "登录",
    "北京",
    "上海",
    "广州",
    "深圳",
    "旅游",
    "机票",
    "酒店",
    "火车",
    "护照",
    "签证",
    "天气",
    "下雨",
    "晴天",
    "花园",
    "番茄",
    "菜谱",
    "咖啡",
    "早餐",
    "晚餐",
    "午餐",
    "生日",
    "聚会",
    "礼物",
    "周年",
    "婚礼",
    "假期",
    "海滩",
    "爬山",
    "跑步",
    "骑车",
    "游泳",
    "瑜伽",
    "健身",
    "医生",
    "牙医",
    "预约",
    "药品",
    "房租",
    "公寓",
    "厨房",
    "浴室",
    "卧室",
    "家具",
    "沙发",
    "电脑",
    "手机",
    "键盘",
    "显示器",
    "打印机",
    "路由器",
    "更新",
    "升级",
    "安装",
    "配置",
    "异常",
    "超时",
    "崩溃",
    "修复",
    "提醒",
    "日程",
    "任务",
    "项目",
    "截止日期",
    "报告",
    "演示",
    "文档",
    "表格",
    "图表",
    "分析",
    "数据",
    "模型",
    "训练",
    "数据集",
    "提示词",
    "上下文",
    "向量",
    "搜索",
    "索引",
]


@dataclass(frozen=True, slots=True)
class Vocabulary:
    words: list[str]
    cum_weights: list[float]


def make_vocabulary(rng: random.Random, size: int = 20_000) -> Vocabulary:
    """Real words first (most frequent), then made-up ones; Zipf-like frequencies."""
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["qu" + v for v in "aei"]
    made: set[str] = set()
    while len(made) < size - len(REAL_WORDS):
        made.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    words = REAL_WORDS + sorted(made)
    rng.shuffle(words)
    total, cum = 0.0, []
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank**1.05
        cum.append(total)
    return Vocabulary(words, cum)


def latin_text(rng: random.Random, vocab: Vocabulary) -> str:
    words = rng.choices(vocab.words, cum_weights=vocab.cum_weights, k=rng.randint(4, 40))
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", "?", "!", "", ""))


def cjk_text(rng: random.Random, vocab: Vocabulary) -> str:
    parts = rng.choices(CJK_WORDS, k=rng.randint(3, 14))
    if rng.random() < 0.3:
        parts.insert(rng.randrange(len(parts)), f" {rng.choice(vocab.words[:300])} ")
    return "".join(parts) + rng.choice(("。", "？", ""))


@dataclass(frozen=True, slots=True)
class SessionPlan:
    id: int
    platform: str
    chat_type: str
    chat_id: str
    user_id: str | None
    speakers: tuple[str, ...]
    n_messages: int


@dataclass(frozen=True, slots=True)
class World:
    sessions: list[SessionPlan]
    groups: list[tuple[str, str, tuple[str, ...]]]  # (platform, chat_id, members)
    users: list[tuple[str, str]]  # (platform, user_id)


def plan_world(rng: random.Random, n_sessions: int, n_messages: int) -> World:
    """Users, groups and sessions; user 0 is a heavy 'owner' with ~12% of all sessions."""
    n_users = max(10, n_sessions // 7)
    users = [(PLATFORMS[i % len(PLATFORMS)], f"u{i}") for i in range(n_users)]
    by_platform = {p: [u for u in users if u[0] == p] for p in PLATFORMS}
    groups = []
    for g in range(max(2, n_sessions // 50)):
        platform = PLATFORMS[g % len(PLATFORMS)]
        members = tuple(
            u
            for _, u in rng.sample(
                by_platform[platform], min(len(by_platform[platform]), rng.randint(3, 15))
            )
        )
        groups.append((platform, f"g{g}", members))
    avg = n_messages / n_sessions
    sessions = []
    for sid in range(1, n_sessions + 1):
        count = max(2, round(rng.uniform(0.2, 1.8) * avg))
        if rng.random() < 0.8:
            platform, user = users[0] if rng.random() < 0.15 else rng.choice(users)
            sessions.append(SessionPlan(sid, platform, "dm", user, user, (user,), count))
        else:
            platform, chat_id, members = rng.choice(groups)
            if rng.random() < 0.75:  # one session per user in a group (the default scope)
                user = rng.choice(members)
                sessions.append(SessionPlan(sid, platform, "group", chat_id, user, (user,), count))
            else:  # a shared thread: several people speak in one session
                speakers = tuple(rng.sample(members, min(len(members), rng.randint(2, 4))))
                sessions.append(SessionPlan(sid, platform, "group", chat_id, None, speakers, count))
    return World(sessions, groups, users)


def message_rows(
    rng: random.Random, world: World, vocab: Vocabulary, n_messages: int, start: datetime
) -> Iterator[tuple[object, ...]]:
    """Messages of ~64 concurrent sessions interleaved
    in time, as a busy daemon would write them."""
    pending = iter(world.sessions)
    active: list[SessionPlan] = []
    left: list[int] = []  # messages still to write, per active session
    emitted, clock = 0, start
    while emitted < n_messages:
        while len(active) < 64 and (plan := next(pending, None)) is not None:
            active.append(plan)
            left.append(plan.n_messages)
        if not active:
            break
        slot = rng.randrange(len(active))
        plan = active[slot]
        index = plan.n_messages - left[slot]
        role = "user" if index % 2 == 0 else "assistant"
        if rng.random() < 0.08:
            role = "tool"
        text = cjk_text(rng, vocab) if rng.random() < 0.06 else latin_text(rng, vocab)
        if role == "tool":
            text = '{"result": "' + text + '"}'
        user = rng.choice(plan.speakers) if role == "user" else None
        kind = "flush" if rng.random() < 0.01 else "chat"
        active_flag = 0 if rng.random() < 0.03 else 1
        clock += timedelta(seconds=rng.randint(1, 40))
        yield (
            plan.id,
            role,
            text,
            user,
            clock.isoformat(timespec="microseconds"),
            active_flag,
            kind,
        )
        emitted += 1
        left[slot] -= 1
        if left[slot] == 0:
            active.pop(slot)
            left.pop(slot)


def build(
    db: Path, n_messages: int, n_sessions: int, seed: int, scoped_index: bool
) -> tuple[World, Vocabulary, float]:
    rng = random.Random(seed)
    vocab = make_vocabulary(rng)
    world = plan_world(rng, n_sessions, n_messages)
    store = Store(db)  # the real schema, migrations and triggers
    if scoped_index:
        store.conn.executescript(SEARCH_INDEX_MIGRATION_SQL)
    store.close()
    started = time.perf_counter()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")  # a bench database: bulk load without a journal
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-400000")
    start = datetime(2025, 1, 1, tzinfo=UTC)
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO sessions (id, key, platform, chat_type, "
        "chat_id, user_id, created_at) VALUES (?,?,?,?,?,?,?)",
        [
            (
                s.id,
                f"{s.platform}:{s.chat_type}:{s.chat_id}:{s.user_id or ''}:{s.id}",
                s.platform,
                s.chat_type,
                s.chat_id,
                s.user_id,
                start.isoformat(),
            )
            for s in world.sessions
        ],
    )
    rows = message_rows(rng, world, vocab, n_messages, start)
    while batch := [row for _, row in zip(range(50_000), rows, strict=False)]:
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, user_id, created_at, active, kind)"
            " VALUES (?,?,?,?,?,?,?)",
            batch,
        )
    conn.execute("COMMIT")
    rebuild(conn)  # rows loaded past the store: indexed at once (the daemon indexes in batches)
    for table in ("messages_fts", "messages_fts_tri"):
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    conn.execute("ANALYZE")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.close()
    return world, vocab, time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class Query:
    kind: str
    text: str
    ctx: ToolContext


def make_queries(
    rng: random.Random, world: World, vocab: Vocabulary, db: Path, n: int
) -> list[Query]:
    real = [w for w in vocab.words[:2000] if w in set(REAL_WORDS)]
    kinds = (
        ["common"] * 6
        + ["mid"] * 4
        + ["rare"] * 3
        + ["and"] * 2
        + ["phrase", "prefix", "or"]
        + ["cjk2", "cjk3"]
    )
    phrases = _sample_phrases(db, rng)
    queries = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        text = {
            "common": lambda: rng.choice(vocab.words[:30]),
            "mid": lambda: rng.choice(vocab.words[100:2000]),
            "rare": lambda: rng.choice(vocab.words[5000:]),
            "and": lambda: f"{rng.choice(real[:200])} {rng.choice(real[:200])}",
            "phrase": lambda: f'"{rng.choice(phrases)}"',
            "prefix": lambda: rng.choice(vocab.words[:3000])[:4] + "*",
            "or": lambda: (
                f"{rng.choice(vocab.words[200:3000])} OR {rng.choice(vocab.words[200:3000])}"
            ),
            "cjk2": lambda: rng.choice([w for w in CJK_WORDS if len(w) == 2]),
            "cjk3": lambda: (
                rng.choice([w for w in CJK_WORDS if len(w) >= 3]) + rng.choice(("", ""))
            ),
        }[kind]()
        queries.append(Query(kind, text, _asker(rng, world, db, i)))
    return queries


def _sample_phrases(db: Path, rng: random.Random) -> list[str]:
    conn = sqlite3.connect(db)
    rows = conn.execute(
        "SELECT content FROM messages WHERE id % 997 = 0 AND role = 'user' LIMIT 300"
    ).fetchall()
    conn.close()
    phrases = []
    for (content,) in rows:
        words = [w.strip(".?!") for w in content.split()]
        if len(words) >= 3 and content.isascii():
            i = rng.randrange(len(words) - 1)
            phrases.append(f"{words[i]} {words[i + 1]}")
    return phrases or ["docker compose"]


def _asker(rng: random.Random, world: World, db: Path, i: int) -> ToolContext:
    """20% the heavy owner in a DM, 60% someone in a DM, 20% someone in a group."""
    roll = i % 10
    if roll < 2:
        platform, user = world.users[0]
        return ToolContext(0, platform, "dm", user, db.parent, db, chat_id=user)
    if roll < 8:
        platform, user = rng.choice(world.users)
        return ToolContext(0, platform, "dm", user, db.parent, db, chat_id=user)
    platform, chat_id, members = rng.choice(world.groups)
    return ToolContext(0, platform, "group", rng.choice(members), db.parent, db, chat_id=chat_id)


def run(searcher: SessionSearch, queries: list[Query], slowest: int = 0) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    samples = []
    for q in queries:
        started = time.perf_counter()
        found = searcher.search_now(q.ctx, q.text, limit=5)
        ms = (time.perf_counter() - started) * 1000
        times.setdefault(q.kind, []).append(ms)
        samples.append((ms, q, len(found)))
    for ms, q, n in sorted(samples, key=lambda s: s[0], reverse=True)[:slowest]:
        who = "owner" if q.ctx.user_id == "u0" else q.ctx.chat_type
        print(f"    slow: {ms:7.2f} ms  {q.kind:7} {who:6} {q.text!r} -> {n} sessions")
    return times


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=None, help="default: messages / 100")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--db", type=Path, default=None, help="reuse (or create) this database file"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary database")
    parser.add_argument(
        "--scoped-index",
        action="store_true",
        help="apply the proposed search index migration (sid column, CJK-only trigrams) first",
    )
    parser.add_argument("--slowest", type=int, default=0, help="list the N slowest queries")
    args = parser.parse_args(argv)
    n_sessions = args.sessions or max(10, args.messages // 100)
    tmp = None
    db = args.db
    if db is None:
        tmp = tempfile.mkdtemp(prefix="search-bench-")
        db = Path(tmp) / "state.db"
    rng = random.Random(args.seed + 1)
    if db.exists():
        print(f"reusing {db}")
        # same draws as build(), so users and words match the data
        rng_world = random.Random(args.seed)
        vocab = make_vocabulary(rng_world)
        world = plan_world(rng_world, n_sessions, args.messages)
    else:
        print(
            f"building {args.messages:,} messages in {n_sessions:,} sessions at {db} ...",
            flush=True,
        )
        world, vocab, seconds = build(db, args.messages, n_sessions, args.seed, args.scoped_index)
        print(f"built in {seconds:.1f} s")
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    print(f"database size: {size / 1e6:,.1f} MB")
    queries = make_queries(rng, world, vocab, db, args.queries)
    # what the tool uses: one connection kept open, as in the running daemon
    searcher = SessionSearch()
    run(searcher, queries[:20])  # warm the caches, as a running daemon would have them
    times = run(searcher, queries, args.slowest)
    searcher.close()
    every = [t for ts in times.values() for t in ts]
    for kind, ts in sorted(times.items()):
        print(
            f"  {kind:7} n={len(ts):3}  p50 {pct(ts, 50):6.2f} ms "
            f" p95 {pct(ts, 95):6.2f} ms  max {max(ts):6.2f} ms"
        )
    print(
        f"all {len(every)} queries: p50 {statistics.median(every):.2f} ms  p95 "
        f"{pct(every, 95):.2f} ms  max {max(every):.2f} ms  (goal p95 < 20 ms)"
    )
    if tmp and not args.keep:
        for p in Path(tmp).iterdir():
            p.unlink()
        os.rmdir(tmp)
    elif tmp:
        print(f"kept {db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
