"""Telegram through aiogram 3: the adapter (lifecycle, polling, updates → `Inbound`), the webhook
server (webhook), sending and "typing…" (outbound) paced per chat with its flood waits (pacing),
live previews (preview: drafts in private chats, edits in groups), text rendering and errors (text),
attachments by file_id (files), a group's albums and the parts held until one speaks to the bot
(albums), inline keyboards and their callback queries (buttons), voice replies (voice), and the
lazy aiogram import (aiogram_import). Imports only the vocabulary (gateway.events, gateway.errors,
gateway.config) and its own modules.
"""

# Before any aiogram import in this package: aiogram's
# ~670 models are built on first use (~100 MB saved).
from adapters.telegram import aiogram_import as aiogram_import
