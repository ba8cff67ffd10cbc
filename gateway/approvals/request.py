"""What a person is shown and what the model is told: a request's text (secrets masked, long values
shortened), its buttons, the line that replaces them once it is answered, and the tool results for
each outcome. Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from gateway.events import Choice, Choices

Redact = Callable[[str], str]
MAX_VALUE_CHARS = 200  # a longer value shows its start and how much was left out
MAX_ARGUMENTS = 12  # arguments shown at most (the rest are counted)
MASK = "••••••"
# An argument whose name says it holds a credential is never shown, whatever its value looks like.
SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?$|secret|token|api[_-]?key|^key$|auth|credential"
    r"|cookie|private",
    re.IGNORECASE,
)
ONCE, SESSION, DENY, OTHER = "once", "session", "deny", "other"
APPROVAL_CHOICES = (
    Choice("Allow once", ONCE, "primary"),
    Choice("Allow for this session", SESSION),
    Choice("Deny", DENY, "danger"),
)
# An approval's options, stored with the request: the decisions it offers when not all three. A
# tool every call of which must be asked about (the shell) is never allowed "for this session".
EACH_CALL = (ONCE, DENY)
OTHER_LABEL = "Something else"
MAX_LABEL_CHARS = 60  # under Slack's 75 and Discord's 80 characters per button


def describe_call(tool: str, arguments: Mapping[str, Any], redact: Redact = str) -> str:
    """The tool and its arguments as Markdown, one argument a line."""
    lines = [f"Run **{tool}**" + (" with:" if arguments else " (no arguments)?")]
    for i, (name, value) in enumerate(arguments.items()):
        if i == MAX_ARGUMENTS:
            lines.append(f"- … and {len(arguments) - MAX_ARGUMENTS} more")
            break
        lines.append(f"- {name}: `{_value(name, value, redact)}`")
    return "\n".join(lines)


def _value(name: str, value: Any, redact: Redact) -> str:
    if SECRET_NAME.search(name) and value not in (None, "", False):
        return MASK
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = redact(text).replace("`", "ʼ").replace("\n", "⏎ ")
    if len(text) > MAX_VALUE_CHARS:
        text = f"{text[:MAX_VALUE_CHARS]}… ({len(text) - MAX_VALUE_CHARS:,} more characters)"
    return text


def approval_text(request: str, *, who: str | None, minutes: float | None) -> str:
    """The request; while it waits (`minutes`) it says when it expires."""
    asker = f" (asked by {who})" if who else ""
    expiry = f"\n\nThis request expires in {_minutes(minutes)}." if minutes is not None else ""
    return f"🔐 **Approval needed**{asker}\n{request}{expiry}"


def ask_text(question: str, options: tuple[str, ...]) -> str:
    numbered = "\n".join(f"{i}. {o}" for i, o in enumerate(options, 1))
    return f"❓ **{question.strip()}**\n{numbered}"


def fallback_text(kind: str, code: str, options: tuple[str, ...] = ()) -> str:
    """What a surface without buttons adds: how to answer in words (these commands work on every
    surface)."""
    if kind == "ask":
        return "Reply with the number of an answer, or write your own."
    if SESSION not in offered(options):
        return f"Reply `/approve {code}` to allow it once, or `/deny {code}`."
    return (
        f"Reply `/approve {code}` to allow it once, `/approve {code} session` to allow this"
        f" tool for the rest of the conversation, or `/deny {code}`."
    )


def offered(options: tuple[str, ...]) -> tuple[str, ...]:
    """The decisions an approval offers: all three unless its request names fewer."""
    return options or (ONCE, SESSION, DENY)


def choices(kind: str, token: str, options: tuple[str, ...]) -> Choices:
    if kind == "approval":
        values = offered(options)
        return Choices(token, tuple(c for c in APPROVAL_CHOICES if c.value in values))
    found = tuple(Choice(_label(o), str(i)) for i, o in enumerate(options, 1))
    return Choices(token, (*found, Choice(OTHER_LABEL, OTHER)))


def _label(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def outcome_line(state: str, decision: str | None, who: str | None, *, minutes: float) -> str:
    """The line that replaces a request's buttons: what was decided and by whom."""
    by = f" by {who}" if who else ""
    if state in ("executing", "done", "unknown"):
        return f"✅ Allowed {'for this session' if decision == SESSION else 'once'}{by}."
    if state == "denied":
        return f"🚫 Denied{by}. Nothing was run."
    if state == "expired":
        return f"⌛ Expired: nobody answered within {_minutes(minutes)}. Nothing was run."
    if state == "cancelled":
        return "⏹ Cancelled (/stop). Nothing was run."
    answer = _short(decision or "", MAX_VALUE_CHARS)
    return f"💬 {who} answered: {answer}" if who else f"💬 Answered: {answer}"


def result_text(state: str, decision: str | None, *, minutes: float) -> str:
    """The tool result the model reads for a call that did not run, or for an `ask`."""
    if state == "denied":
        return (
            "The user denied this call, so it was not run. Tell them it was not done; do not"
            " try it again unless they ask."
        )
    if state == "expired":
        return (
            f"Nobody answered within {_minutes(minutes)}, so nothing was done (the call was not"
            " run). Tell the user."
        )
    if state == "unknown":
        return (
            "The user approved this call and it started, but the gateway stopped before it"
            " finished, so whether it took effect is unknown. It will not be run again by"
            " itself: check its effect if you can before trying again, and tell the user."
        )
    return f"The user answered: {decision}"


def _minutes(minutes: float) -> str:
    whole = round(minutes)
    if abs(minutes - whole) > 1e-9:
        return f"{minutes:g} minutes"
    return f"{whole} minute{'s' if whole != 1 else ''}"


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
