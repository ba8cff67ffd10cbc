"""The `ask` tool: the model asks the person a question with 2-8 answers shown as buttons (and
"Something else").

Its call never runs here in a chat: the registry's hold check (gateway/approvals/policy.py) stops
the turn, the person answers, and the answer becomes the tool's result. This body answers only where
nobody can be asked (a scheduled run, a memory flush) or when the options are wrong.
"""

from __future__ import annotations

from typing import Annotated

from gateway.agent.tools.registry import ToolFunction
from gateway.errors import ToolError

MIN_OPTIONS, MAX_OPTIONS = 2, 8
MAX_OPTION_CHARS = 60
MAX_QUESTION_CHARS = 500
NOBODY_TEXT = (
    "Nobody can answer a question here (no person is in this conversation); decide "
    "yourself and say what you assumed."
)


def option_problems(question: str, options: list[str]) -> str | None:
    """Why these cannot be asked (a sentence for the model), or None."""
    if not question.strip():
        return "Ask a question: `question` is empty."
    if len(question) > MAX_QUESTION_CHARS:
        return f"Keep the question under {MAX_QUESTION_CHARS} characters."
    if not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
        return f"Give {MIN_OPTIONS} to {MAX_OPTIONS} options; you gave {len(options)}."
    distinct = {o.strip().casefold() for o in options}
    if any(not o.strip() for o in options) or len(distinct) < len(options):
        return "Each option must be a different, non-empty answer."
    if any(len(o) > MAX_OPTION_CHARS for o in options):
        return f"Keep each option under {MAX_OPTION_CHARS} characters (they are buttons)."
    return None


def ask_tool() -> ToolFunction:
    async def ask(
        question: Annotated[str, "the question, in the person's language"],
        options: Annotated[list[str], f"{MIN_OPTIONS}-{MAX_OPTIONS} short answers, each a button"],
    ) -> str:
        """Ask the person you are talking with a question and wait for their answer. The options are
        shown as buttons, with "Something else" for an answer of their own; the result is what they
        chose or wrote. Use it when you cannot go on well without their choice, not for small talk.
        """
        problem = option_problems(question, options)
        raise ToolError(problem or NOBODY_TEXT)

    return ask
