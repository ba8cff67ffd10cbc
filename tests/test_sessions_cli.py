"""`gateway sessions list [--active|--ended]` and `gateway sessions show KEY_OR_ID`: policy,
deadline, end reason and flush state / error as the operator reads them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config.settings import load_config
from gateway.sessions.flush import FlushLedger
from gateway.store.database import Store
from tests.helpers import write_config
from tests.lifecycle_support import START, seed_session

CONFIG = (
    "session_reset: {mode: both, idle_minutes: 30, "
    "at_hour: 4}\nsessions: {timezone: Europe/Berlin}\n"
)


@pytest.fixture
def seeded(home: Path) -> tuple[int, int]:
    write_config(home, extra=CONFIG)
    store = Store(load_config(home).db_path)
    old = seed_session(
        store, key="telegram:dm:42", platform="telegram", last_user_at=START - timedelta(hours=5)
    )
    store.end_session(old, reason="idle", now=START - timedelta(hours=4), flush_state="pending")
    ledger = FlushLedger(store)
    ledger.claim(old)
    ledger.next_attempt(old)
    ledger.next_attempt(old)
    ledger.finish(
        old, "failed", START - timedelta(hours=3), "LLMUnavailable: model overloaded (503)"
    )
    new = seed_session(store, key="telegram:dm:42", platform="telegram", last_user_at=START)
    store.execute("UPDATE sessions SET parent_id = ? WHERE id = ?", (old, new))
    store.close()
    return old, new


def test_list(home: Path, seeded: tuple[int, int], capsys: pytest.CaptureFixture[str]) -> None:
    old, new = seeded
    assert main(["--home", str(home), "sessions", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "KEY", "LAST", "USER", "MESSAGE", "STATE", "FLUSH"]
    assert lines[1].split("  ")[0] == str(new)
    assert (
        "2031-01-06 10:00 CET" in lines[1]
        and "active, resets 2031-01-06 10:30 CET (idle)" in lines[1]
    )
    assert lines[1].endswith("-")
    assert "ended 2031-01-06 06:00 CET (idle)" in lines[2]
    assert lines[2].endswith("failed (3 attempts): LLMUnavailable: model overloaded (503)")
    assert main(["--home", str(home), "sessions", "list", "--active"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert main(["--home", str(home), "sessions", "list", "--ended"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[1].startswith(str(old))


def test_show_by_key_and_by_id(
    home: Path, seeded: tuple[int, int], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = seeded
    assert main(["--home", str(home), "sessions", "show", "telegram:dm:42"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"Session {new}",
        "  key:        telegram:dm:42",
        "  chat:       telegram dm 42, user u1",
        f"  parent:     {old}",
        "  started:    2031-01-06 10:00 CET",
        "  last user:  2031-01-06 10:00 CET",
        "  messages:   4",
        "  model:      gated-test (anthropic)",
        "  tokens:     0 in, 0 out; cache 0 read, 0 written",
        "  policy:     idle 30 min or daily at 04:00 (Europe/Berlin)",
        "  deadline:   2031-01-06 10:30 CET (idle)",
        "  flush:      -",
    ]
    assert main(["--home", str(home), "sessions", "show", str(old)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-6:] == [
        "  policy:     idle 30 min or daily at 04:00 (Europe/Berlin)",
        "  ended:      2031-01-06 06:00 CET (idle)",
        "  flush:      failed",
        "  attempts:   3",
        "  finished:   2031-01-06 07:00 CET",
        "  last error: LLMUnavailable: model overloaded (503)",
    ]


def test_show_unknown(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(home, extra=CONFIG)
    assert main(["--home", str(home), "sessions", "show", "nope:dm:1"]) == 1
    assert capsys.readouterr().err == "no session 'nope:dm:1'\n"
    assert main(["--home", str(home), "sessions", "list"]) == 0
    assert capsys.readouterr().out == "no sessions\n"
