"""Telegram through aiogram 3: the adapter (polling or webhook), its text rendering and errors, and the lazy
aiogram import. Imports only the vocabulary (gateway.events, gateway.errors, gateway.config) and its own modules.
"""

# Before any aiogram import in this package: aiogram's ~670 models are built on first use (~100 MB saved).
from adapters.telegram import aiogram_import as aiogram_import
