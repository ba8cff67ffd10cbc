"""The database schema as append-only named migrations (gateway/store/database.py runs them;
search_schema.py adds one).

A migration is never edited once released: a change is a new named step, so every existing state.db
can follow.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from gateway.store.agents_schema import PENDING_BY_CHAT_SQL, add_agents
from gateway.store.search_index import BATCHED_INDEX_MIGRATION_SQL, SEARCH_INDEX_MIGRATION_SQL

# A migration is an SQL script or a function that runs
# plain `execute` calls; either runs in one transaction.
Migration = tuple[str, "str | Callable[[sqlite3.Connection], None]"]


_INITIAL = """
CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  key TEXT NOT NULL,
  platform TEXT NOT NULL,
  chat_type TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  thread_id TEXT,
  user_id TEXT,
  parent_id INTEGER REFERENCES sessions(id),
  created_at TEXT NOT NULL,
  last_user_at TEXT,
  ended_at TEXT,
  end_reason TEXT,
  model TEXT,
  provider TEXT,
  system_prompt TEXT,
  prompt_built_at TEXT,
  prompt_rebuild_reason TEXT,
  prompt_rebuilds INTEGER NOT NULL DEFAULT 0,
  flush_state TEXT,
  flush_attempts INTEGER NOT NULL DEFAULT 0,
  flush_error TEXT,
  flush_finished_at TEXT,
  input_tokens INTEGER NOT NULL DEFAULT 0,
  output_tokens INTEGER NOT NULL DEFAULT 0,
  cache_read_tokens INTEGER NOT NULL DEFAULT 0,
  cache_write_tokens INTEGER NOT NULL DEFAULT 0,
  compressions INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX sessions_active_key ON sessions(key) WHERE ended_at IS NULL;
CREATE INDEX sessions_key ON sessions(key);
CREATE INDEX sessions_user ON sessions(platform, user_id);
CREATE INDEX sessions_flush ON sessions(flush_state) WHERE flush_state IN ('pending', 'running');

CREATE TABLE messages (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions(id),
  role TEXT NOT NULL,
  content TEXT NOT NULL DEFAULT '',
  tool_calls TEXT,
  tool_call_id TEXT,
  user_id TEXT,
  user_name TEXT,
  platform_message_id TEXT,
  created_at TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 1,
  kind TEXT NOT NULL DEFAULT 'chat',
  turn_id TEXT
);
CREATE INDEX messages_session ON messages(session_id, id);
CREATE INDEX messages_user ON messages(user_id, session_id);

CREATE VIRTUAL TABLE messages_fts USING fts5(
  content, content='messages', content_rowid='id', tokenize='porter unicode61');
CREATE VIRTUAL TABLE messages_fts_tri USING fts5(
  content, content='messages', content_rowid='id', tokenize='trigram');
CREATE TRIGGER messages_ai AFTER INSERT ON messages BEGIN
  INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
  INSERT INTO messages_fts_tri(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_ad AFTER DELETE ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content)
    VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_au AFTER UPDATE OF content ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content)
    VALUES ('delete', old.id, old.content);
  INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
  INSERT INTO messages_fts_tri(rowid, content) VALUES (new.id, new.content);
END;

CREATE TABLE inbound (
  id INTEGER PRIMARY KEY,
  platform TEXT NOT NULL,
  chat_type TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  thread_id TEXT,
  platform_message_id TEXT NOT NULL,
  user_id TEXT NOT NULL,
  user_name TEXT,
  text TEXT NOT NULL,
  payload TEXT NOT NULL,
  received_at TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'pending',
  session_id INTEGER,
  finished_at TEXT,
  UNIQUE (platform, chat_id, platform_message_id)
);
CREATE INDEX inbound_status ON inbound(status) WHERE status IN ('pending', 'running');

CREATE TABLE outbound (
  id INTEGER PRIMARY KEY,
  turn_id TEXT NOT NULL,
  chunk_index INTEGER NOT NULL,
  chunk_count INTEGER NOT NULL,
  platform TEXT NOT NULL,
  chat_type TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  thread_id TEXT,
  kind TEXT NOT NULL,
  text TEXT NOT NULL,
  plain TEXT NOT NULL,
  entities TEXT,
  reply_to_id TEXT,
  status TEXT NOT NULL DEFAULT 'pending',
  attempts INTEGER NOT NULL DEFAULT 0,
  platform_message_id TEXT,
  last_error TEXT,
  created_at TEXT NOT NULL,
  sent_at TEXT,
  UNIQUE (turn_id, chunk_index)
);
CREATE INDEX outbound_pending ON outbound(status) WHERE status = 'pending';

CREATE TABLE llm_calls (
  id INTEGER PRIMARY KEY,
  session_id INTEGER,
  purpose TEXT NOT NULL,
  provider TEXT NOT NULL,
  model TEXT NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cache_read_tokens INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL,
  created_at TEXT NOT NULL
);
"""

# Access control (gateway/access/gate.py): pending pairing codes (only their HMAC is stored), users
# approved by code, and per-platform failed-approval counters with their lockout.
_ACCESS = """
CREATE TABLE pairing (
  id INTEGER PRIMARY KEY,
  platform TEXT NOT NULL,
  user_id TEXT NOT NULL,
  user_name TEXT,
  chat_id TEXT NOT NULL,
  code_hash TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  UNIQUE (platform, user_id)
);
CREATE TABLE approved_users (
  platform TEXT NOT NULL,
  user_id TEXT NOT NULL,
  user_name TEXT,
  approved_at TEXT NOT NULL,
  approved_by TEXT NOT NULL,
  PRIMARY KEY (platform, user_id)
);
CREATE TABLE pairing_lockouts (
  platform TEXT PRIMARY KEY,
  failures INTEGER NOT NULL DEFAULT 0,
  locked_until TEXT
);
"""

# Attachments (gateway/media/): the images of a user message (`messages.media`, JSON: what the
# history sends the model again, byte for byte, on every later turn); the album part a first part
# took over (`inbound.merged_into`: the whole album is one turn, also after a restart); the notices
# a chat was given once (no vision, no transcription service).
_MEDIA = """
ALTER TABLE messages ADD COLUMN media TEXT;
ALTER TABLE inbound ADD COLUMN merged_into INTEGER;
CREATE INDEX inbound_merged ON inbound(merged_into) WHERE merged_into IS NOT NULL;
CREATE TABLE media_notices (
  platform TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  notice TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (platform, chat_id, notice)
);
"""

# A session's tool list (gateway/prompt/session_tools.py): fixed when the session starts, sent byte
# for byte on every turn. Sessions with the same list share one row.
_SESSION_TOOLS = """
CREATE TABLE tool_lists (
  id INTEGER PRIMARY KEY,
  digest TEXT NOT NULL UNIQUE,
  specs TEXT NOT NULL,
  created_at TEXT NOT NULL
);
ALTER TABLE sessions ADD COLUMN tool_list_id INTEGER REFERENCES tool_lists(id);
"""

# Scheduled jobs (gateway/scheduling/): each job belongs to the chat (thread included) and the
# person that made it; the creator's handle, server and roles are kept so the gate can be asked
# again at run time. A run is claimed as a `job_runs` row before its turn starts; UNIQUE (job_id,
# scheduled_for) is what makes "never twice" hold.
_JOBS = """
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  name TEXT,
  prompt TEXT NOT NULL,
  kind TEXT NOT NULL,
  spec TEXT NOT NULL,
  timezone TEXT NOT NULL,
  platform TEXT NOT NULL,
  chat_type TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  thread_id TEXT,
  user_id TEXT NOT NULL,
  user_name TEXT,
  username TEXT,
  space_id TEXT,
  roles TEXT,
  created_at TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'active',
  state_reason TEXT,
  next_run_at TEXT,
  last_run_at TEXT,
  runs INTEGER NOT NULL DEFAULT 0,
  run_requested_at TEXT
);
CREATE INDEX jobs_due ON jobs(next_run_at) WHERE state = 'active';
CREATE INDEX jobs_owner ON jobs(platform, user_id, state);
CREATE INDEX jobs_requested ON jobs(run_requested_at) WHERE run_requested_at IS NOT NULL;
CREATE TABLE job_runs (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  scheduled_for TEXT NOT NULL,
  trigger TEXT NOT NULL,
  status TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  session_id INTEGER,
  turn_id TEXT,
  error TEXT,
  UNIQUE (job_id, scheduled_for)
);
CREATE INDEX job_runs_running ON job_runs(status) WHERE status = 'running';
CREATE INDEX job_runs_job ON job_runs(job_id, id);
"""

# People (gateway/knowledge/people.py): persons and their platform identities, the /link codes (HMAC
# only, gateway/access/linking.py), access changes the CLI records for the daemon
# (gateway/ops/access_watch.py), and one-off notes such as the move of the old global USER.md (shown
# by `gateway doctor`).
_PEOPLE = """
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

# Live previews (gateway/store/delivery_queries.py): the message showing each part of an answer
# being written.
_STREAMING = """
CREATE TABLE previews (
  turn_id TEXT NOT NULL,
  part_index INTEGER NOT NULL,
  platform TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  platform_message_id TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (turn_id, part_index)
);
"""

# The dashboard's time series (gateway/webui/series.py) reads messages and model calls by time; the
# prune of old inbound rows (ops/daemon.py) uses the same index.
_DASHBOARD = """
CREATE INDEX inbound_received ON inbound(received_at);
CREATE INDEX llm_calls_created ON llm_calls(created_at);
"""

# A table the daemon writes one blob into and deletes again while the database takes no writes: the
# probe that notices when space (or the lock) is back although no turn is waiting
# (gateway/store/connection.py probe).
_ROBUSTNESS = """
CREATE TABLE store_probe (filler BLOB);
"""

# A tool result's failure flag is part of what the model saw: Anthropic's tool_result carries
# `is_error`, and a later turn that dropped it would change a block inside the cached prefix.
_TOOL_ERRORS = """
ALTER TABLE messages ADD COLUMN is_error INTEGER NOT NULL DEFAULT 0;
"""

# A person's own time zone (gateway/knowledge/people.py): "remind me at 9" means 9 where they live.
# Set by the model through the `schedule` tool or by `gateway users timezone`; NULL = the gateway's
# zone.
_PERSON_ZONE = """
ALTER TABLE people ADD COLUMN timezone TEXT;
"""

# What people chose in chat (ChoiceQueries in gateway/store/session_queries.py): a chat's voice
# replies (/voice on|off) and a conversation's model (/model NAME, by session key: a new session of
# the same conversation keeps it).
_CHOICES = """
CREATE TABLE chat_voice (
  platform TEXT NOT NULL,
  chat_id TEXT NOT NULL,
  mode TEXT NOT NULL,
  set_at TEXT NOT NULL,
  PRIMARY KEY (platform, chat_id)
);
CREATE TABLE session_models (
  key TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  set_at TEXT NOT NULL
);
"""

# A turn that waits for a person (gateway/approvals/): one row per request (an approval of a tool
# call, or an `ask` question), with the turn as it stood when it stopped (`checkpoint`: the model's
# messages so far, the calls left), who may answer, until when, the token its buttons carry and the
# code the text fallback uses. `state` moves pending → executing → done (the call's result stored
# before the model is asked again) | denied | expired | cancelled | answered (an ask) | unknown (the
# daemon died while the call ran: never run again).
_APPROVALS = """
CREATE TABLE approvals (
  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, token TEXT NOT NULL UNIQUE, code TEXT NOT NULL,
  session_id INTEGER NOT NULL, inbound_id INTEGER NOT NULL, turn_id TEXT NOT NULL,
  platform TEXT NOT NULL, chat_type TEXT NOT NULL, chat_id TEXT NOT NULL, thread_id TEXT,
  requester TEXT NOT NULL, requester_name TEXT,
  tool TEXT NOT NULL, call_id TEXT NOT NULL, arguments TEXT NOT NULL,
  request TEXT NOT NULL, options TEXT, checkpoint TEXT NOT NULL,
  state TEXT NOT NULL DEFAULT 'pending', decision TEXT, decided_by TEXT, decided_at TEXT,
  result TEXT, created_at TEXT NOT NULL, expires_at TEXT NOT NULL, closed_at TEXT
);
CREATE INDEX approvals_open ON approvals(state) WHERE state IN ('pending', 'executing');
CREATE INDEX approvals_inbound ON approvals(inbound_id);
CREATE INDEX approvals_grants ON approvals(session_id, tool) WHERE decision = 'session';
"""

MIGRATIONS: list[Migration] = [
    ("0001_initial", _INITIAL),
    ("0002_access", _ACCESS),
    ("0003_search_index", SEARCH_INDEX_MIGRATION_SQL),
    ("0006_media", _MEDIA),
    ("0009_session_tools", _SESSION_TOOLS),
    ("0008_jobs", _JOBS),
    ("0005_people", _PEOPLE),
    ("0007_streaming", _STREAMING),
    ("0010_dashboard", _DASHBOARD),
    ("0011_robustness", _ROBUSTNESS),
    ("0014_tool_errors", _TOOL_ERRORS),
    ("0016_review2122", _PERSON_ZONE),
    ("0017_search_batched", BATCHED_INDEX_MIGRATION_SQL),
    ("0033_voice_and_models", _CHOICES),
    ("0034_agents", add_agents),  # agents and bot accounts (gateway/store/agents_schema.py)
    ("0035_approvals", _APPROVALS),
    ("0036_pending_by_chat", PENDING_BY_CHAT_SQL),  # gateway/store/agents_schema.py
]
