"""The people tables (store migration 0005_people): persons and their platform identities, link codes, the access
events the CLI records for the daemon, and one-off notes such as the USER.md migration (gateway/knowledge/people.py,
gateway/access/linking.py, gateway/ops/access_watch.py use them)."""

from __future__ import annotations

PEOPLE_MIGRATION_SQL = """
CREATE TABLE people (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT,
  created_at TEXT NOT NULL
);
CREATE TABLE identities (
  identity TEXT PRIMARY KEY,
  person_id INTEGER NOT NULL REFERENCES people(id),
  platform TEXT NOT NULL,
  user_id TEXT NOT NULL,
  user_name TEXT,
  username TEXT,
  created_at TEXT NOT NULL,
  linked_by TEXT NOT NULL
);
CREATE INDEX identities_person ON identities(person_id);
CREATE INDEX identities_username ON identities(platform, username) WHERE username IS NOT NULL;
CREATE TABLE link_codes (
  code_hash TEXT PRIMARY KEY,
  identity TEXT NOT NULL UNIQUE,
  person_id INTEGER NOT NULL,
  chat_platform TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL
);
CREATE TABLE access_events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  kind TEXT NOT NULL,
  platform TEXT NOT NULL,
  user_id TEXT NOT NULL,
  chat_id TEXT,
  detail TEXT,
  created_at TEXT NOT NULL,
  handled_at TEXT
);
CREATE INDEX access_events_open ON access_events(id) WHERE handled_at IS NULL;
CREATE TABLE people_notes (
  name TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  created_at TEXT NOT NULL
);
"""
