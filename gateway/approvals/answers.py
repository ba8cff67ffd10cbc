"""Answers to requests, as they come in through the gate: a tap (an `Inbound` with `picked`),
`/approve CODE` (`session` to allow the tool for the rest of the session), `/deny CODE`, and a
written answer to an `ask`.

Only the person whose message started the turn, or an admin (`access.admins`), may answer, in the
chat the request was asked in (its token or code is bound to that chat); anyone else gets a short
refusal and nothing changes. The first answer wins; a second one hears what was decided.
"""

from __future__ import annotations

import logging

from gateway.approvals import request as texts
from gateway.approvals.book import CODE_LENGTH, ApprovalRow
from gateway.approvals.waits import Decision, Waits
from gateway.events import Inbound, SubmitOutcome, SubmitResult

log = logging.getLogger(__name__)

GONE_TEXT = "This request is no longer waiting for an answer."
OTHER_TEXT = "Write your answer and send it: your next message here is the answer."
ASK_BY_TEXT = "That is a question, not an approval: tap an answer, or write yours."
NOT_OFFERED = (
    "This tool is asked about before every call: it cannot be allowed for the session."
    " `/approve {code}` allows this call once."
)
LOCAL_PLATFORMS = frozenset({"web", "cli"})


class Answers:
    def __init__(self, waits: Waits) -> None:
        self.waits = waits

    # ------------------------------------------------------------------ taps
    def tap(self, inbound: Inbound) -> SubmitResult:
        picked = inbound.picked
        assert picked is not None
        row = self.waits.book.by_token(picked.token)
        if row is None or not _same_chat(row, inbound):
            log.info(
                "approvals: a tap on an unknown request (or from another chat) platform=%s user=%s",
                inbound.chat.platform,
                inbound.user_id,
            )
            return _refused(GONE_TEXT)
        refusal = self._refusal(row, inbound)
        if refusal is not None:
            return _refused(refusal)
        if row.kind == "ask" and picked.value == texts.OTHER:
            return SubmitResult(SubmitOutcome.ACCEPTED, "choice", notice=OTHER_TEXT)
        decision = _decision(row, picked.value, who(inbound))
        if decision is None:
            return _refused(GONE_TEXT)
        return self._decide(row, decision)

    def _refusal(self, row: ApprovalRow, inbound: Inbound) -> str | None:
        if not self.may_answer(row, inbound):
            log.info(
                "approvals: refused an answer to request %s from someone else platform=%s user=%s",
                row.id,
                inbound.chat.platform,
                inbound.user_id,
            )
            asker = row.requester_name or "the person who asked"
            return f"Only {asker} (who asked) or an admin can answer this."
        if row.state != "pending" or all(o.row.id != row.id for o in self.waits.pending()):
            return already(row, self.waits.minutes)
        return None

    def may_answer(self, row: ApprovalRow, inbound: Inbound) -> bool:
        # on a local surface everyone is the owner: there the request's own tab or console answers
        admin = inbound.chat.platform not in LOCAL_PLATFORMS and self.waits.is_admin(inbound)
        return inbound.user_id == row.requester or admin

    def _decide(self, row: ApprovalRow, decision: Decision) -> SubmitResult:
        if not self.waits.decide(row, decision):
            fresh = self.waits.book.get(row.id)
            return _refused(already(fresh or row, self.waits.minutes))
        # the message itself shows the outcome now
        return SubmitResult(SubmitOutcome.ACCEPTED, "choice")

    # ------------------------------------------------------------------ /approve, /deny
    def command(self, inbound: Inbound, word: str) -> str | None:
        """The answer to `/approve CODE [session]` or `/deny CODE` when CODE names a request asked
        in this chat; None when it names none (an /approve may carry a pairing code: those are
        longer)."""
        args = inbound.text.split()[1:]
        if not args or len(args[0]) != CODE_LENGTH:
            return None
        row = self.waits.book.by_code(inbound.chat.platform, inbound.chat.chat_id, args[0])
        if row is None:
            return None
        refusal = self._refusal(row, inbound)
        if refusal is not None:
            return refusal
        if row.kind == "ask":
            return ASK_BY_TEXT
        session = len(args) > 1 and args[1].lower() in ("session", "for-session", "always")
        choice = texts.DENY if word == "deny" else texts.SESSION if session else texts.ONCE
        decision = _decision(row, choice, who(inbound))
        if decision is None:
            return NOT_OFFERED.format(code=row.code)
        decided = self._decide(row, decision)
        return decided.notice or texts.outcome_line(
            decision.state, decision.decision, None, minutes=self.waits.minutes
        )

    # ------------------------------------------------------------------ a written answer to `ask`
    def asked(self, inbound: Inbound) -> ApprovalRow | None:
        """The open question this message answers: one asked in its chat (and thread) of its
        sender."""
        if not self.waits.open or not inbound.text.strip():
            return None
        chat = inbound.chat
        for opened in self.waits.pending():
            row = opened.row
            if (
                row.kind == "ask"
                and row.requester == inbound.user_id
                and _same_chat(row, inbound)
                and row.thread_id == chat.thread_id
            ):
                return row
        return None

    def answer(self, row: ApprovalRow, inbound: Inbound) -> bool:
        """Take the message as the answer: "2" picks the second option, anything else is their own
        words."""
        text = " ".join(inbound.text.split())
        answers = row.answers
        if text.isdigit() and 1 <= int(text) <= len(answers):
            text = answers[int(text) - 1]
        return self.waits.decide(row, Decision("answered", text, who(inbound)))


def _decision(row: ApprovalRow, value: str, by: str) -> Decision | None:
    if row.kind == "ask":
        answers = row.answers
        if value.isdigit() and 1 <= int(value) <= len(answers):
            return Decision("answered", answers[int(value) - 1], by)
        return None
    if value not in texts.offered(row.answers):
        return None  # a decision this request does not offer ("session" for the shell)
    if value in (texts.ONCE, texts.SESSION):
        return Decision("executing", value, by)
    return Decision("denied", texts.DENY, by) if value == texts.DENY else None


def already(row: ApprovalRow, minutes: float) -> str:
    if row.state == "pending":
        return GONE_TEXT
    line = texts.outcome_line(row.state, row.decision, row.decided_by, minutes=minutes)
    return f"Already answered. {line}"


def who(inbound: Inbound) -> str:
    """Who answered, as the others in the chat read it (the owner on a local surface is "you")."""
    if inbound.chat.platform in LOCAL_PLATFORMS:
        return "you"
    return inbound.user_name or (f"@{inbound.username}" if inbound.username else inbound.user_id)


def _same_chat(row: ApprovalRow, inbound: Inbound) -> bool:
    return (row.platform, row.chat_id) == (inbound.chat.platform, inbound.chat.chat_id)


def _refused(text: str) -> SubmitResult:
    return SubmitResult(SubmitOutcome.REFUSED, "choice", notice=text)
