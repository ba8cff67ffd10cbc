"""Albums in groups: Telegram sends each photo (or file) of an album as a message of its own, and
only one of them carries the caption, the one that may @mention the bot. Photos sent as an album
usually carry the caption on the first part, files sent as an album on the last; either way the
whole album is for the bot once one part speaks to it. The parts before that one are held here (in
memory, briefly, a bounded number) and handed back when the addressed part arrives; the parts after
it are let in because their album is remembered as addressed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace

from gateway.events import Inbound

AlbumKey = tuple[int, str]  # (chat id, media_group_id)

REMEMBERED_ALBUMS = 500  # albums addressed to us, remembered for their later parts
HELD_ALBUMS = 64  # albums not (yet) addressed to us whose parts are held
HELD_PARTS = 10  # Telegram's albums hold at most 10 items


class Albums:
    def __init__(self) -> None:
        self._addressed: OrderedDict[AlbumKey, None] = OrderedDict()
        self._held: OrderedDict[AlbumKey, list[Inbound]] = OrderedDict()

    def addressed(self, key: AlbumKey) -> bool:
        return key in self._addressed

    def hold(self, key: AlbumKey, part: Inbound) -> None:
        """An album part that does not speak to us (yet):
        kept in case a later part of its album does."""
        parts = self._held.setdefault(key, [])
        self._held.move_to_end(key)
        if len(parts) < HELD_PARTS:
            parts.append(part)
        while len(self._held) > HELD_ALBUMS:
            self._held.popitem(last=False)

    def address(self, key: AlbumKey) -> list[Inbound]:
        """The album speaks to us: remember it, and return
        its parts held so far (now addressed), in order."""
        self._addressed[key] = None
        self._addressed.move_to_end(key)
        while len(self._addressed) > REMEMBERED_ALBUMS:
            self._addressed.popitem(last=False)
        return [replace(part, is_addressed=True) for part in self._held.pop(key, [])]
