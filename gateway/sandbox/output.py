"""A command's output, kept within bounds: the head and the tail of each stream, the middle only
counted, so a command that prints gigabytes costs the daemon a few kilobytes of memory.

`clip` then fits both streams into one character budget for the model, saying what was cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Capture:
    """The first and last `keep` bytes of a stream, and how many bytes it had in all."""

    keep: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk[-self.keep :]
            del self.tail[: -self.keep]

    def text(self) -> Captured:
        head = self.head.decode("utf-8", "replace")
        if not self.tail:
            return Captured(head, "", 0)
        missing = self.total - len(self.head) - len(self.tail)
        return Captured(head, self.tail.decode("utf-8", "replace"), missing)


@dataclass(frozen=True, slots=True)
class Captured:
    """A stream as text: `head` then `tail`, with `missing` bytes between them never kept."""

    head: str
    tail: str = ""
    missing: int = 0

    @property
    def size(self) -> int:
        return len(self.head) + len(self.tail)

    def cut(self, budget: int) -> str:
        """At most about `budget` characters: the whole stream, or its start and its end with a line
        saying how much of the middle is left out."""
        if not self.missing and self.size <= budget:
            return self.head + self.tail
        whole = self.head + self.tail
        first = budget * 2 // 3
        last = budget - first
        if self.missing:
            first, last = min(first, len(self.head)), min(last, len(self.tail))
            head, tail = self.head[:first], self.tail[len(self.tail) - last :]
            left_out = f"{len(whole) - first - last:,} characters and {self.missing:,} bytes"
        else:
            head, tail = whole[:first], whole[len(whole) - last :]
            left_out = f"{len(whole) - first - last:,} characters"
        return f"{head}\n[… output cut: {left_out} left out here …]\n{tail}"


def clip(stdout: Captured, stderr: Captured, budget: int) -> tuple[str, str]:
    """Both streams within `budget` characters together; stderr gets up to a quarter of it when
    stdout needs the rest."""
    if not stdout.missing and not stderr.missing and stdout.size + stderr.size <= budget:
        return stdout.head + stdout.tail, stderr.head + stderr.tail
    err_budget = min(stderr.size, max(budget // 4, budget - stdout.size))
    return stdout.cut(budget - err_budget), stderr.cut(err_budget)
