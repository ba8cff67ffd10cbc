"""The dashboard's time series: messages in (per platform)
and the prompt-cache hit ratio, per time bucket.

Read from the rows the gateway writes anyway (`inbound`, `llm_calls`; indexed on their time by
migration 0010_dashboard), not kept in memory: nothing is added to a turn's hot path, the chart
survives a restart, and it agrees with `gateway status` and /metrics. Messages reach back as far as
inbound rows are kept (`delivery.dedupe_retention_hours`, 72 h by default), which bounds the longest
window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gateway.store.database import Store
from gateway.store.rows import iso

# window name → (its length, its bucket)
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=2)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "72h": (timedelta(hours=72), timedelta(hours=3)),
}
DEFAULT_WINDOW = "24h"
# the bucket of a stored time, counted by SQLite itself: a day of rows is grouped without a Python
# loop over them
_BUCKET = "CAST((julianday({column}) - julianday(?)) * 86400 / ? AS INTEGER)"


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    messages: dict[str, int]  # platform → messages received
    calls: int  # model calls
    prompt_tokens: int  # input + cache read + cache write
    cache_read: int

    @property
    def hit_ratio(self) -> float | None:
        return self.cache_read / self.prompt_tokens if self.prompt_tokens else None


def series(store: Store, now: datetime, window: str = DEFAULT_WINDOW) -> list[Bucket]:
    """Equal buckets covering `window` up to `now`, oldest
    first; empty buckets are there (a gap is news)."""
    length, step = WINDOWS[window]
    first = _floor(now - length + step, step)
    count = int((now - first) / step) + 1
    since, seconds = iso(first), step.total_seconds()
    messages: list[dict[str, int]] = [{} for _ in range(count)]
    tokens = [[0, 0, 0] for _ in range(count)]  # calls, prompt tokens, cache read
    for b, platform, n in store.all(
        f"SELECT {_BUCKET.format(column='received_at')} AS b, platform, COUNT(*) FROM inbound"
        " WHERE received_at >= ? GROUP BY b, platform",
        (since, seconds, since),
    ):
        if 0 <= b < count:
            messages[b][platform] = n
    for b, calls, prompt, read in store.all(
        f"SELECT {_BUCKET.format(column='created_at')} AS "
        "b, COUNT(*), SUM(input_tokens + cache_read_tokens"
        " + cache_write_tokens), SUM(cache_read_tokens) "
        "FROM llm_calls WHERE created_at >= ? GROUP BY b",
        (since, seconds, since),
    ):
        if 0 <= b < count:
            tokens[b] = [int(calls), int(prompt or 0), int(read or 0)]
    return [Bucket(first + i * step, messages[i], *tokens[i]) for i in range(count)]


def series_json(buckets: list[Bucket], window: str) -> dict[str, Any]:
    return {
        "window": window,
        "step_s": int(WINDOWS[window][1].total_seconds()),
        "buckets": [
            {
                "start": iso(b.start),
                "messages": b.messages,
                "calls": b.calls,
                "prompt_tokens": b.prompt_tokens,
                "cache_read": b.cache_read,
                "hit_ratio": None if b.hit_ratio is None else round(b.hit_ratio, 4),
            }
            for b in buckets
        ],
    }


def _floor(when: datetime, step: timedelta) -> datetime:
    epoch = datetime(2000, 1, 1, tzinfo=when.tzinfo)
    return epoch + ((when - epoch) // step) * step
