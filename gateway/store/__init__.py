"""The SQLite store (state.db, WAL): the Store and its queries (database), row dataclasses (rows), append-only
migrations (schema), the session_search index (search_index), the decoded-history cache (history_cache),
and how stored rows become model messages (transcript). Imports the vocabulary, config and llm's types.
"""
