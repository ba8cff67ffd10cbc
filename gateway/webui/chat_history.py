"""What a web chat tab is told when it connects: which model answers (or the command that configures
one), and the current session's words, with each message that failed kept in its place (the error it
got, and its id so the page can offer to send it again) until it is retried or the session ends, and
a request still waiting for the person's answer with its buttons. The web adapter gets these as
plain callables; it never reads the store itself.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.approvals.book import ApprovalBook
from gateway.approvals.request import choices
from gateway.events import ChatRef
from gateway.sessions.keys import session_key
from gateway.store.database import Store
from gateway.store.transcript import decode_inbound

TURN = re.compile(r"t(\d+)$")
SHOWN = 100
NO_MODEL_NOTICE = (
    "No model is configured, so I can't answer yet. On the machine that runs the gateway, run "
    "`gateway init` (or export ANTHROPIC_API_KEY, OPENAI_API_KEY or OPENROUTER_API_KEY), then "
    "restart the gateway."
)


def hello(model: str | None, problem: str | None = None) -> dict[str, Any]:
    """The first frame on a web chat socket: the model's name, or the notice the page shows as a
    banner: how to set one up, or (`problem`) why the configured one cannot answer, which `gateway
    init` would not fix."""
    if model:
        return {"model": model, "notice": None}
    return {
        "model": None,
        "notice": f"The configured model can't answer yet: {problem}. Set it where the gateway "
        "runs (a service reads its env file), then restart the gateway."
        if problem
        else NO_MODEL_NOTICE,
    }


class WebChatHistory:
    def __init__(self, store: Store) -> None:
        self.store = store

    def lines(self, client: str) -> list[dict[str, Any]]:
        """The last SHOWN lines of the client's current session, in the order they were sent."""
        session = self.store.active_session(
            session_key(ChatRef("web", "dm", client), client, group_per_user=True)
        )
        if session is None:
            return []
        found: list[tuple[tuple[int, int], dict[str, Any]]] = []
        sent = self._sent(client, session.id)
        place = 0
        for n, row in enumerate(self.store.history(session.id, kinds=("chat",))):
            turn = TURN.match(row.turn_id or "")
            place = int(turn.group(1)) if turn else place
            # A person's lines carry their user id; a user-role line without one is the gateway's
            # own note (what a scheduled job posted is recorded after such a note), not something
            # they said.
            if row.role == "user" and row.user_id and turn and place in sent:
                # what they sent, not what the model read
                found.append(((place, n), {"role": "user", **sent[place]}))
            elif (
                row.role == "assistant" or (row.role == "user" and row.user_id)
            ) and row.content.strip():
                found.append(((place, n), {"role": row.role, "text": row.content}))
        for failed in self.store.all(
            "SELECT i.id, i.platform_message_id, (SELECT group_concat(o.plain, '') FROM outbound o"
            " WHERE o.turn_id = 'e' || i.id) AS error FROM "
            "inbound i WHERE i.platform = 'web' AND i.chat_id = ?"
            " AND i.status = 'failed' AND i.session_id = ? ORDER BY i.id",
            (client, session.id),
        ):
            found.append(
                (
                    (failed["id"], -1),
                    {
                        "role": "user",
                        **sent.get(failed["id"], {"text": ""}),
                        "id": failed["platform_message_id"],
                        "error": failed["error"] or "This message failed.",
                    },
                )
            )
        found.sort(key=lambda item: item[0])
        return [*(line for _, line in found[-SHOWN:]), *self._waiting(client)]

    def _waiting(self, client: str) -> list[dict[str, Any]]:
        """The tab's requests still waiting for an answer, as their message showed them, with their
        buttons."""
        lines = []
        for row in ApprovalBook(self.store).pending():
            if row.platform != "web" or row.chat_id != client:
                continue
            sent = [o for o in self.store.outbound_for_turn(row.message_turn) if o.status == "sent"]
            if sent:
                offered = choices(row.kind, row.token, row.answers)
                lines.append(
                    {
                        "role": "assistant",
                        "text": sent[-1].text,
                        "id": sent[-1].platform_message_id,
                        "choices": {
                            "token": offered.token,
                            "options": [
                                {"label": c.label, "value": c.value, "style": c.style}
                                for c in offered.options
                            ],
                        },
                    }
                )
        return lines

    def _sent(self, client: str, session_id: int) -> dict[int, dict[str, Any]]:
        """Each stored message of the tab's session as the person sent it: the words they typed, and
        the files they attached as the upload named them (so a failed one can be sent again with its
        files)."""
        out: dict[int, dict[str, Any]] = {}
        for row in self.store.all(
            "SELECT id, text, payload FROM inbound WHERE platform = 'web' AND chat_id = ?"
            " AND session_id = ?",
            (client, session_id),
        ):
            files = [
                {"id": a.ref, "name": a.name, "type": a.mime_type, "size": a.size}
                for a in decode_inbound(row["payload"]).attachments
            ]
            out[int(row["id"])] = {"text": row["text"], **({"files": files} if files else {})}
        return out

    def retried(self, client: str, message_id: str) -> bool:
        """The person sent a failed message again: it leaves
        the history (the new one takes its place)."""
        with self.store.tx() as conn:
            changed = conn.execute(
                "UPDATE inbound SET status = 'retried' WHERE platform = 'web' AND chat_id = ?"
                " AND platform_message_id = ? AND status = 'failed'",
                (client, message_id),
            )
            return changed.rowcount > 0
