"""sd_notify over the `NOTIFY_SOCKET` datagram socket:
READY, WATCHDOG, STATUS and STOPPING for systemd.

Without `NOTIFY_SOCKET` every call is a no-op. Sends never block the event loop and never raise: a
manager that stopped listening must not take the daemon down with it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger(__name__)
STATUS_EVERY_S = 5.0  # how often STATUS= is refreshed when there is no watchdog to ride on


class Notifier:
    """One process's channel to its service manager. `watchdog_interval` is half of `WatchdogSec`
    (or None)."""

    def __init__(
        self,
        address: str | None = None,
        *,
        watchdog_usec: int | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.address = address
        self.sleep = sleep
        self.watchdog_interval = watchdog_usec / 2_000_000 if watchdog_usec else None
        self.sent: list[str] = []  # what went out, newest last (for `gateway status` and tests)
        self._sock: socket.socket | None = None
        self._last_status: str | None = None
        self._warned = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, pid: int, watchdog: bool = True) -> Notifier:
        """Read the manager's variables; the watchdog is
        ours only if `WATCHDOG_PID` is unset or our pid."""
        address = env.get("NOTIFY_SOCKET") or None
        usec: int | None = None
        owner = env.get("WATCHDOG_PID")
        if watchdog and (not owner or owner == str(pid)):
            try:
                usec = int(env.get("WATCHDOG_USEC") or 0) or None
            except ValueError:
                usec = None
        return cls(address, watchdog_usec=usec)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, *assignments: str) -> bool:
        """Send `KEY=value` lines in one datagram; False if
        there is no manager or it could not be reached."""
        if self.address is None:
            return False
        payload = "\n".join(assignments)
        try:
            sock = self._socket()
            sock.sendto(payload.encode(), socket.MSG_DONTWAIT, _sockaddr(self.address))
        except OSError as exc:
            if not self._warned:
                log.warning("sd_notify to %s failed: %s", self.address, exc)
                self._warned = True
            return False
        self.sent.append(payload)
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send("READY=1", *self._status_lines(status))

    def stopping(self, status: str | None = "draining") -> bool:
        return self.send("STOPPING=1", *self._status_lines(status))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        lines = self._status_lines(text)
        return self.send(*lines) if lines else False

    def _status_lines(self, text: str | None) -> list[str]:
        if text is None:
            return []
        text = " ".join(text.split())  # one line: a newline would start a new assignment
        if text == self._last_status:
            return []
        self._last_status = text
        return [f"STATUS={text}"]

    async def keepalive(self, status: Callable[[], str] | None = None) -> None:
        """Run until cancelled: WATCHDOG=1 at half of WatchdogSec from the event loop itself (so a
        wedged loop misses it and gets restarted), with STATUS= whenever `status()` changes."""
        every = self.watchdog_interval
        if not self.enabled:
            return
        while True:
            text = _safe(status)
            if every is not None:
                self.send("WATCHDOG=1", *self._status_lines(text))
            elif text is not None:
                self.status(text)
            await self.sleep(every if every is not None else STATUS_EVERY_S)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        return self._sock


def _sockaddr(address: str) -> str | bytes:
    """`@name` is Linux's abstract namespace (a leading
    NUL byte); anything else is a filesystem path."""
    if address.startswith("@"):
        return b"\0" + address[1:].encode()
    return address


def _safe(status: Callable[[], str] | None) -> str | None:
    if status is None:
        return None
    try:
        return status()
    except Exception:
        log.debug("status line failed", exc_info=True)
        return None
