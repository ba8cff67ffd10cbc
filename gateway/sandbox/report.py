"""What the model and the person asked to allow a command read: the result of a command (exit
code, duration, the output within its budget, why it was stopped) and the approval request showing
the exact command. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.sandbox.output import clip
from gateway.sandbox.process import Finished


def result_text(done: Finished, budget: int, timeout_s: float) -> str:
    stdout, stderr = clip(done.stdout, done.stderr, budget)
    if done.stopped == "time":
        head = (
            f"Stopped: the command ran past its limit of {timeout_s:g} seconds and was killed"
            " with all its processes."
        )
    elif done.stopped == "output":
        head = "Stopped: the command printed far too much output and was killed."
    else:
        head = f"Exit code: {done.exit_code}"
    lines = [head, f"Duration: {done.duration_s:.2f} s"]
    lines += ["", "stdout:", stdout] if stdout else ["", "stdout: (empty)"]
    if stderr:
        lines += ["", "stderr:", stderr]
    return "\n".join(lines)


def describe(arguments: Mapping[str, Any]) -> str:
    """What the person asked to allow a call reads: the exact command, whole, and the files it
    would send to the chat."""
    command = str(arguments.get("command", ""))
    fence = "```"
    while fence in command:
        fence += "`"
    shown = f"Run this command in the shell?\n{fence}sh\n{command}\n{fence}"
    attach = arguments.get("attach")
    if isinstance(attach, list) and attach:
        names = ", ".join(f"`{str(p).replace('`', 'ʼ')}`" for p in attach)
        shown += f"\nThen send these files from the workspace to the chat: {names}"
    return shown
