"""Slack voice replies and files: the note uploaded as an audio file in the thread it answers (a
file for the chat likewise, under its own name), with Slack's current upload flow
(files.getUploadURLExternal, the upload, files.completeUploadExternal: slack_sdk's
files_upload_v2). Needs the bot scope files:write; without it the upload is dropped with one clear
warning."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.text import API_ERRORS, PLATFORM, error_code, send_error
from gateway.errors import PlatformUnavailable, RecipientUnavailable
from gateway.events import ChatRef, OutboundAudio, OutboundFile

log = logging.getLogger("adapters.slack.adapter")

FILENAME = "voice-reply.ogg"
TITLE = "Voice reply"
NO_UPLOADS = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "restricted_action",
        "file_uploads_disabled",
        "not_in_channel",
        "channel_not_found",
    }
)


async def upload_voice(client: AsyncWebClient | None, audio: OutboundAudio) -> str:
    """The uploaded file's id."""
    return await upload(client, audio.chat, audio.data, FILENAME, TITLE, what="a voice reply")


async def upload_file(client: AsyncWebClient | None, file: OutboundFile) -> str:
    """A file for the chat, under its own name; the uploaded file's id."""
    return await upload(client, file.chat, file.data, file.filename, file.filename, what="a file")


async def upload(
    client: AsyncWebClient | None,
    chat: ChatRef,
    data: bytes,
    filename: str,
    title: str,
    *,
    what: str,
) -> str:
    if client is None:
        raise PlatformUnavailable(PLATFORM, "not started")
    kwargs: dict[str, Any] = {
        "channel": chat.chat_id,
        "file": data,
        "filename": filename,
        "title": title,
    }
    if chat.thread_id:
        kwargs["thread_ts"] = chat.thread_id
    try:
        response = await client.files_upload_v2(**kwargs)
    except SlackApiError as exc:
        code = error_code(exc)
        if code in NO_UPLOADS:
            hint = "; add the files:write bot scope" if code == "missing_scope" else ""
            log.warning(
                "slack: %s could not be uploaded to %s (%s%s)", what, chat.chat_id, code, hint
            )
            raise RecipientUnavailable(PLATFORM, f"file upload refused: {code}") from None
        raise send_error(exc) from None
    except API_ERRORS as exc:
        raise send_error(exc) from None
    uploaded = response.get("file") or {}
    return str(uploaded.get("id") or "")
