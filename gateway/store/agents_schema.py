"""The migration that makes agents and bot accounts part of the rows (docs/agents.md).

A session, a scheduled job and a reply belong to an agent and go through a bot account; every row
already stored belongs to the agent `main` and the account `default`, so its key, its stored prompt
and everything else about it stay exactly as they were. An inbound message is told apart from the
same message seen by another bot in the same chat (Telegram numbers a group's messages once for all
bots), and a pairing approval lets a person talk to the bot that approved them, not to the others;
a chat's /voice choice is that of the bot it was made with.
"""

from __future__ import annotations

import sqlite3

_COLUMNS = """
ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT 'main';
ALTER TABLE sessions ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
CREATE INDEX sessions_agent ON sessions(agent, created_at);
ALTER TABLE outbound ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE previews ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE jobs ADD COLUMN agent TEXT NOT NULL DEFAULT 'main';
ALTER TABLE jobs ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE inbound ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE pairing ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE approved_users ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE access_events ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
ALTER TABLE chat_voice ADD COLUMN account TEXT NOT NULL DEFAULT 'default';
"""

# (table, the key clause as created, the same key with the account)
_KEYS = (
    (
        "inbound",
        "UNIQUE (platform, chat_id, platform_message_id)",
        "UNIQUE (platform, account, chat_id, platform_message_id)",
    ),
    ("pairing", "UNIQUE (platform, user_id)", "UNIQUE (platform, account, user_id)"),
    (
        "approved_users",
        "PRIMARY KEY (platform, user_id)",
        "PRIMARY KEY (platform, account, user_id)",
    ),
    ("chat_voice", "PRIMARY KEY (platform, chat_id)", "PRIMARY KEY (platform, account, chat_id)"),
)


# The outbox asks for a chat's oldest unsent chunk twice per message, as one bot account reaches
# the chat: the index seeks it there (one on the status alone walked every chat's unsent chunks, so
# a message cost more the more conversations were in flight).
PENDING_BY_CHAT_SQL = """
DROP INDEX outbound_pending;
CREATE INDEX outbound_pending_chat ON outbound(platform, account, chat_id, id)
  WHERE status = 'pending';
"""


def add_agents(conn: sqlite3.Connection) -> None:
    """Runs inside the migration's transaction; plain `execute` calls only."""
    for statement in _COLUMNS.strip().split(";\n"):
        conn.execute(statement.rstrip(";"))
    for table, old, new in _KEYS:
        rekey(conn, table, old, new)


def rekey(conn: sqlite3.Connection, table: str, old: str, new: str) -> None:
    """Give `table` another key, as SQLite's ALTER TABLE cannot: a copy made from the table's own
    CREATE statement (with every column added since), its rows, then its indexes again."""
    found = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if found is None or old not in found[0]:
        raise sqlite3.OperationalError(f"{table}: expected {old} in its schema")
    indexes = [
        r[0]
        for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index'"
            " AND tbl_name = ? AND sql IS NOT NULL",
            (table,),
        )
    ]
    created = (
        found[0].replace(old, new).replace(f"CREATE TABLE {table}", f"CREATE TABLE {table}_new", 1)
    )
    columns = ", ".join(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
    conn.execute(created)
    conn.execute(f"INSERT INTO {table}_new ({columns}) SELECT {columns} FROM {table}")
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE {table}_new RENAME TO {table}")
    for index in indexes:
        conn.execute(index)
