"""Attachments at rest: `GATEWAY_HOME/media/<session_id>/`, one folder per session, beside state.db.

A session's files live and die with it: `delete_session_media` removes them when its rows go
(`gateway users forget`), and the retention sweep removes files older than `media.retention_days`.
The history names a prepared image by its path relative to the media folder, and `read_base64` gives
the model the same bytes every turn.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from gateway.config.media import MEDIA_DIR

log = logging.getLogger(__name__)

# an empty session folder goes only when nothing was written in it for this long
EMPTY_FOLDER_GRACE_S = 3600.0


def media_root(home: Path) -> Path:
    return home / MEDIA_DIR


def session_dir(home: Path, session_id: int) -> Path:
    return media_root(home) / str(int(session_id))


def private_folder(home: Path, folder: Path) -> Path:
    """Make `folder` (under the media folder) and the media folder itself, each 0700 whatever the
    umask: the files are people's photos and documents."""
    root = media_root(home)
    for path in (root, *reversed([p for p in folder.parents if root in p.parents]), folder):
        path.mkdir(mode=0o700, exist_ok=True)
    return folder


def open_private(path: Path) -> BinaryIO:
    """A new file for writing, 0600 whatever the umask (an existing one is emptied)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def write_private(path: Path, data: bytes) -> None:
    with open_private(path) as f:
        f.write(data)


def relative_name(home: Path, path: Path) -> str:
    """How the history names a file: relative to the media folder, with forward slashes (a moved
    home still works)."""
    return path.relative_to(media_root(home)).as_posix()


def read_base64(home: Path, name: str) -> str | None:
    """A stored file as base64 text, or None once it is
    gone (retention) or when the name leaves the folder."""
    root = media_root(home).resolve()
    path = (root / name).resolve()
    if root not in path.parents:
        return None
    try:
        return base64.b64encode(path.read_bytes()).decode("ascii")
    except OSError:
        return None


def delete_session_media(home: Path, session_ids: Iterable[int]) -> int:
    """Remove every file of these sessions; returns how many files went.

    The one call for anything that deletes sessions (`gateway users forget`): pass the ids of the
    sessions whose rows are being deleted, before or after the rows go. A session without files, or
    called twice, is fine.
    """
    removed = 0
    for session_id in session_ids:
        folder = session_dir(home, session_id)
        if folder.is_dir():
            removed += sum(1 for p in folder.rglob("*") if p.is_file())
            shutil.rmtree(folder, ignore_errors=True)
    return removed


def sweep(home: Path, *, older_than_days: float, now: float | None = None) -> int:
    """The retention: remove files not written for
    `older_than_days` and the session folders left empty."""
    root = media_root(home)
    if not root.is_dir():
        return 0
    now_s = time.time() if now is None else now
    cutoff = now_s - older_than_days * 86_400
    removed = 0
    for folder in [p for p in root.iterdir() if p.is_dir()]:
        for path in [p for p in folder.iterdir() if p.is_file()]:
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except OSError as exc:
                log.warning("media retention: cannot remove %s: %s", path.name, exc)
        with contextlib.suppress(OSError):
            if folder.stat().st_mtime < now_s - EMPTY_FOLDER_GRACE_S:
                # a fresh one: a download about to start
                folder.rmdir()  # only when empty
    return removed
