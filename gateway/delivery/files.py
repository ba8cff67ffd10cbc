"""Files for the chat (the shell's `attach`): taken from the workspace, kept with the session's
media, and sent by the outbox as rows of kind `file`, durable like the rest of a reply.

`attach` copies each file (gateway/sandbox/files.py: inside the workspace only, symbolic links
included, within `tools.shell.max_attach_mb`) to `media/<session>/sent/` and records one row per
file (text: the name the chat shows; plain: the copy, relative to the media folder; turn
`t<inbound id>:file<hex>`, so forgetting a person finds it), then has the outbox send it: in the
chat's order, retried, and sent after a restart if it was not. Once sent, the copy goes. A chat
whose platform cannot take files (`FileReplies`) gets a line naming the files left in the
workspace, and the model reads the same.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import re
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.agent.tools.registry import ToolContext
from gateway.config.shell import ShellConfig
from gateway.delivery.outbox import Outbox
from gateway.delivery.rows import row_chat
from gateway.errors import NotSendable
from gateway.events import Adapter, FileReplies, OutboundFile, OutboundKind, OutboundMessage
from gateway.sandbox.files import Refused, shown_name, size_text, take
from gateway.store.media_files import media_root, private_folder, session_dir
from gateway.store.rows import OutboundRow

log = logging.getLogger(__name__)

MAX_FILES = 10  # per command (Telegram's and Discord's most per message)
FILE_TURN = "t{inbound}:file{token}"
COPY = re.compile(r"\d+/sent/[0-9a-f]+")  # what a row's `plain` may name
CANNOT = "📎 Files cannot be sent in this chat; {names} stayed in the workspace."
FAILED = "📎 {name} could not be sent ({reason})."


class ChatFiles:
    """The shell's `attach` (`attach`) and the outbox's sender of `file` rows (`send`)."""

    def __init__(self, outbox: Outbox, home: Path, *, max_bytes: int) -> None:
        self.outbox = outbox
        self.home = home
        self.max_bytes = max_bytes

    @classmethod
    def of(cls, outbox: Outbox, shell: ShellConfig, home: Path) -> ChatFiles | None:
        """With the shell enabled, its files to the chat, each at most `max_attach_mb`."""
        return cls(outbox, home, max_bytes=shell.max_attach_mb << 20) if shell.enabled else None

    async def attach(self, ctx: ToolContext, workspace: Path, paths: Sequence[str]) -> str:
        """Record each file for the turn's chat and start sending; what the model is told."""
        origin = ctx.origin
        if origin is None:
            return "Files: not sent (there is no chat to send them to)."
        chat, inbound = origin.chat, self._inbound_id(ctx)
        if not isinstance(self.outbox.adapters.get(chat.adapter_key), FileReplies):
            names = ", ".join(shown_name(p) for p in paths)
            turn = f"t{inbound}:files{secrets.token_hex(4)}"
            await self.outbox.post(
                turn, chat, CANNOT.format(names=names), reply_to_id=origin.message_id
            )
            return f"Files: not sent, this chat cannot receive files ({names}); tell the user."
        folder = await asyncio.to_thread(
            private_folder, self.home, session_dir(self.home, ctx.session_id) / "sent"
        )
        lines, rows = [], []
        for path in paths[:MAX_FILES]:
            token = secrets.token_hex(8)
            try:
                size = await asyncio.to_thread(
                    take, workspace, path, folder / token, self.max_bytes
                )
            except (Refused, OSError) as exc:
                lines.append(f"- {path}: not sent ({exc})")
                continue
            name = shown_name(path)
            turn = FILE_TURN.format(inbound=inbound, token=token)
            rows.append(
                _row(turn, origin.chat, name, f"{ctx.session_id}/sent/{token}", origin.message_id)
            )
            lines.append(f"- {path}: sent to the chat as {name} ({size_text(size)})")
        lines += [
            f"- {p}: not sent (at most {MAX_FILES} files a command)" for p in paths[MAX_FILES:]
        ]
        if rows:
            self.outbox.store.insert_outbound(rows, now=self.outbox.clock())
            self.outbox.deliver_soon(str(rows[0]["turn_id"]))  # the chat's rows, in order
        return "Files:\n" + "\n".join(lines)

    def _inbound_id(self, ctx: ToolContext) -> int:
        origin = ctx.origin
        assert origin is not None
        found = self.outbox.store.one(
            "SELECT id FROM inbound WHERE platform = ? AND chat_id = ? AND platform_message_id = ?",
            (origin.chat.platform, origin.chat.chat_id, origin.message_id),
        )
        return int(found[0]) if found is not None else 0

    async def send(self, adapter: Adapter, row: OutboundRow, message: OutboundMessage) -> str:
        """Send a `file` row's copy; NotSendable (after telling the chat) when it cannot go."""
        try:
            if not isinstance(adapter, FileReplies):
                raise NotSendable(f"{row.platform} cannot take files")
            data = await asyncio.to_thread(self._read, row)
        except NotSendable as exc:
            log.warning("%s: file %s of %s not sent: %s", row.platform, row.text, row.turn_id, exc)
            self.outbox.post_soon(
                f"{row.turn_id}x",
                row_chat(row),
                FAILED.format(name=row.text, reason=exc),
                reply_to_id=row.reply_to_id,
            )
            raise
        mime = mimetypes.guess_type(row.text)[0] or "application/octet-stream"
        sent = await adapter.send_file(
            OutboundFile(
                chat=message.chat,
                data=data,
                filename=row.text,
                mime_type=mime,
                reply_to_id=row.reply_to_id,
                key=message.key,
            )
        )
        (media_root(self.home) / row.plain).unlink(missing_ok=True)
        return sent

    def _read(self, row: OutboundRow) -> bytes:
        if not COPY.fullmatch(row.plain):
            raise NotSendable("not a file the gateway kept")
        try:
            with open(media_root(self.home) / row.plain, "rb") as f:
                return f.read()  # bounded when it was taken
        except FileNotFoundError:
            raise NotSendable("its copy is gone") from None


def _row(turn: str, chat: Any, name: str, copy: str, reply_to: str) -> dict[str, object]:
    return {
        "turn_id": turn,
        "chunk_index": 0,
        "chunk_count": 1,
        "platform": chat.platform,
        "chat_type": chat.chat_type,
        "chat_id": chat.chat_id,
        "thread_id": chat.thread_id,
        "kind": OutboundKind.FILE.value,
        "text": name,
        "plain": copy,
        "reply_to_id": reply_to,
        "entities": None,
        "account": chat.account,
    }
