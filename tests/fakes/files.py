"""Files the platform fakes serve (Telegram's file URLs, Discord's CDN, Slack's private URLs):
streamed in chunks like a real server, with a gate that holds a download after its first chunk (a
test can kill the gateway mid-download, or remove the file so the download is cut off) and a count
of what was served."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

from aiohttp import web

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class StoredFile:
    data: bytes
    name: str
    mime_type: str


class FileShelf:
    def __init__(self) -> None:
        self.files: dict[str, StoredFile] = {}
        self.served: Counter[str] = Counter()  # key → downloads that finished
        self.started: Counter[str] = Counter()  # key → downloads that began
        self._gate: asyncio.Event | None = None

    def put(self, key: str, data: bytes, name: str, mime_type: str) -> StoredFile:
        stored = self.files[key] = StoredFile(data, name, mime_type)
        return stored

    def hold(self) -> None:
        """From now on a download sends its first chunk, then waits until `release()`."""
        self._gate = asyncio.Event()

    def remove(self, key: str) -> None:
        """The file is gone: a download of it in progress is cut off (the connection drops after the
        chunk it is at), a later one gets 404."""
        self.files.pop(key, None)

    def release(self) -> None:
        if self._gate is not None:
            self._gate.set()
        self._gate = None

    async def serve(self, request: web.Request, key: str) -> web.StreamResponse:
        stored = self.files.get(key)
        if stored is None:
            return web.Response(status=404, text="Not Found")
        self.started[key] += 1
        response = web.StreamResponse(
            headers={"Content-Type": stored.mime_type, "Content-Length": str(len(stored.data))}
        )
        await response.prepare(request)
        try:
            for offset in range(0, len(stored.data), CHUNK):
                await response.write(stored.data[offset : offset + CHUNK])
                if offset == 0 and self._gate is not None and len(stored.data) > CHUNK:
                    await self._gate.wait()
                if key not in self.files and request.transport is not None:  # removed meanwhile
                    request.transport.close()
                    return response
            await response.write_eof()
        except ConnectionError:  # the client went away mid-file (a killed gateway): not served
            return response
        self.served[key] += 1
        return response
