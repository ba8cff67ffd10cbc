"""The `session_search` tool: past conversations of
the person asking, as snippets the model can read.
"""

from __future__ import annotations

from typing import Annotated

from gateway.agent.tools.registry import ToolContext, ToolFunction
from gateway.knowledge.search import DEFAULT_LIMIT, MAX_LIMIT, SessionHits, SessionSearch


def format_results(query: str, results: list[SessionHits]) -> str:
    if not results:
        return f"No past conversations match {query!r}."
    lines = [f"Past conversations matching {query!r}, newest first:"]
    for r in results:
        where = "DM" if r.chat_type == "dm" else r.chat_type
        lines.append(f"\n{r.started_at[:10]} ({where}, session {r.session_id}):")
        lines.extend(
            f"  [{h.created_at[:16].replace('T', ' ')} {h.role}] {h.snippet}" for h in r.hits
        )
    return "\n".join(lines)


def session_search_tool(searcher: SessionSearch) -> ToolFunction:
    async def session_search(
        ctx: ToolContext,
        query: Annotated[
            str, 'words to find (all must match); "exact phrase", a OR b, NOT word, prefix*'
        ],
        limit: Annotated[int, f"how many conversations to return (1-{MAX_LIMIT})"] = DEFAULT_LIMIT,
    ) -> str:
        """Search the user's past conversations with you (earlier sessions, not this one) by
        keywords. Returns matching snippets grouped by conversation with dates, newest first. Use it
        when the user refers to something discussed before that is not in your memory.
        """
        results = await searcher.search(ctx, query, limit=limit)
        return format_results(query, results)

    return session_search
