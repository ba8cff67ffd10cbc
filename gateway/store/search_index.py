"""The search index schema (store migration 0003): only searchable messages, scoped by a `sid` token.

It indexes only what search can return, gives each row a `sid` token so FTS5 applies a user's scope
itself, and keeps the trigram index to text with CJK in it. search.py works without it, more slowly.
"""

from __future__ import annotations

# Scripts written without spaces between words: their terms are substrings, found by the trigram index.
CJK_RANGES = ((0x2E80, 0x2FDF), (0x3040, 0x30FF), (0x3100, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0xFF66, 0xFF9F))
_CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"

# Conditions on a messages row, `{r}` being m / new / old. The triggers must mirror the views exactly:
# an FTS5 'delete' for a row that was never indexed corrupts an external-content index.
_SEARCHABLE = "{r}.role IN ('user', 'assistant') AND {r}.kind = 'chat'"
_CJK_ROW = "{r}.content GLOB '" + _CJK_GLOB + "'"
SEARCH_INDEX_MIGRATION_SQL = f"""
DROP TRIGGER IF EXISTS messages_ai;
DROP TRIGGER IF EXISTS messages_ad;
DROP TRIGGER IF EXISTS messages_au;
DROP TABLE IF EXISTS messages_fts;
DROP TABLE IF EXISTS messages_fts_tri;
CREATE VIEW messages_search AS SELECT id, content, '<' || session_id || '>' AS sid FROM messages m
  WHERE {_SEARCHABLE.format(r="m")};
CREATE VIEW messages_search_cjk AS SELECT id, content, sid FROM messages_search s WHERE {_CJK_ROW.format(r="s")};
CREATE VIRTUAL TABLE messages_fts USING fts5(content, sid, content='messages_search', content_rowid='id',
  tokenize='porter unicode61');
CREATE VIRTUAL TABLE messages_fts_tri USING fts5(content, sid, content='messages_search_cjk', content_rowid='id',
  tokenize='trigram');
CREATE TRIGGER messages_search_ai AFTER INSERT ON messages WHEN {_SEARCHABLE.format(r="new")} BEGIN
  INSERT INTO messages_fts(rowid, content, sid) VALUES (new.id, new.content, '<' || new.session_id || '>');
  INSERT INTO messages_fts_tri(rowid, content, sid) SELECT new.id, new.content, '<' || new.session_id || '>'
    WHERE {_CJK_ROW.format(r="new")};
END;
CREATE TRIGGER messages_search_ad AFTER DELETE ON messages WHEN {_SEARCHABLE.format(r="old")} BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    VALUES ('delete', old.id, old.content, '<' || old.session_id || '>');
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>' WHERE {_CJK_ROW.format(r="old")};
END;
CREATE TRIGGER messages_search_au AFTER UPDATE OF content, role, kind, session_id ON messages BEGIN
  INSERT INTO messages_fts(messages_fts, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>' WHERE {_SEARCHABLE.format(r="old")};
  INSERT INTO messages_fts_tri(messages_fts_tri, rowid, content, sid)
    SELECT 'delete', old.id, old.content, '<' || old.session_id || '>'
    WHERE {_SEARCHABLE.format(r="old")} AND {_CJK_ROW.format(r="old")};
  INSERT INTO messages_fts(rowid, content, sid)
    SELECT new.id, new.content, '<' || new.session_id || '>' WHERE {_SEARCHABLE.format(r="new")};
  INSERT INTO messages_fts_tri(rowid, content, sid) SELECT new.id, new.content, '<' || new.session_id || '>'
    WHERE {_SEARCHABLE.format(r="new")} AND {_CJK_ROW.format(r="new")};
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
INSERT INTO messages_fts_tri(messages_fts_tri) VALUES ('rebuild');
"""
