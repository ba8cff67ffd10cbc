"""The SQLite store (state.db, WAL). `database.Store` is the whole of it: the connection with its
migrations and transactions (connection), one class of named queries per table group
(session_queries: also tool lists and choices made in chat, message_queries, delivery_queries: also
live previews' messages), row dataclasses (rows), append-only migrations (schema; agents_schema:
agents and bot accounts in the rows), the session_search index (search_index) and the
decoded-history cache (history_cache); transcript turns stored rows into model messages. Attachments
at rest live beside state.db in media/ (media_files: one folder per session, retention, deletion).
Imports the vocabulary, config and llm's types.
"""
