"""Telegram's webhook server: an aiohttp route that checks the secret token and feeds each update to the dispatcher.

Telegram gets its 200 only once the update is stored (the dispatcher's handler awaits `submit`); a 503 while
shutting down and a 500 when storing failed make Telegram deliver the update again. Registering the URL with
Telegram (setWebhook) is the adapter's part of start-up.
"""

from __future__ import annotations

import hmac
import logging
import secrets

from aiogram import Bot, Dispatcher
from aiogram.types import Update
from aiohttp import web

from gateway.config.settings import TelegramConfig

log = logging.getLogger("adapters.telegram.adapter")  # one logger for the Telegram adapter, whichever module speaks


class NotStored(Exception):
    """The gateway did not store the update (shutting down): Telegram must deliver it again."""


class WebhookServer:
    """Serves `config.path` on `config.listen_host:listen_port`; `port` is the one bound (0 in config picks one)."""

    def __init__(self, config: TelegramConfig) -> None:
        self.config = config
        self.port: int | None = None
        self.secret = ""
        self._runner: web.AppRunner | None = None
        self._bot: Bot | None = None
        self._dp: Dispatcher | None = None

    async def serve(self, bot: Bot, dp: Dispatcher) -> None:
        cfg = self.config
        self._bot, self._dp = bot, dp
        # Without a configured secret, a fresh random one still keeps strangers from posting fake updates.
        self.secret = cfg.secret_token.value if cfg.secret_token else secrets.token_urlsafe(32)
        app = web.Application()
        app.router.add_post(cfg.path, self._on_webhook)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, cfg.listen_host, cfg.listen_port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or ()
        self.port = sockets[0].getsockname()[1] if sockets else None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # the webhook stays set: Telegram keeps updates until we are back
            self._runner = None

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not hmac.compare_digest(given.encode(), self.secret.encode()):
            return web.Response(status=401, text="Unauthorized")
        assert self._bot is not None and self._dp is not None
        try:
            update = Update.model_validate(await request.json(), context={"bot": self._bot})
        except ValueError:
            return web.Response(status=400, text="not an Update")
        try:
            await self._dp.feed_update(self._bot, update)
        except NotStored:
            return web.Response(status=503, text="shutting down")
        except Exception:
            log.exception("telegram: update %s not stored", update.update_id)
            return web.Response(status=500, text="not stored")
        return web.json_response({})
