"""The one SQLite database (WAL): sessions with their stored prompt, messages (FTS5), inbound,
outbound, usage.

`Store` is the whole of it: the connection (connection.py) and one class of named queries per table
group (session_queries: also tool lists and choices made in chat, message_queries,
delivery_queries). A feature with tables of its own adds its queries as a module of this package and
a base here. Schema changes are append-only named migrations (schema.py). A row that cannot be read
raises StoreError; it never turns into "no session".
"""

from __future__ import annotations

from gateway.store.delivery_queries import DeliveryQueries
from gateway.store.message_queries import MessageQueries
from gateway.store.session_queries import ChoiceQueries, SessionQueries, ToolListQueries


class Store(SessionQueries, MessageQueries, DeliveryQueries, ToolListQueries, ChoiceQueries):
    """The gateway's database. Open once in the composition root; close on shutdown."""
