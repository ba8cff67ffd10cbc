"""Telegram's webhook server: an aiohttp route that checks the secret token and feeds each update to
the dispatcher.

Telegram gets its 200 only once the update is stored (the dispatcher's handler awaits `submit`); a
503 while shutting down and a 500 when storing failed make Telegram deliver the update again.
Registering the URL with Telegram (setWebhook) is the adapter's part of start-up.
"""

from __future__ import annotations

import logging
import secrets

from aiogram import Bot, Dispatcher
from aiogram.types import Update
from aiohttp import web

from gateway.config.settings import TelegramConfig
from gateway.config.yamlload import Secret
from gateway.errors import AdapterFatal
from gateway.events import Caller, HttpListener, ServeHttp

# one logger for the Telegram adapter, whichever module speaks
log = logging.getLogger("adapters.telegram.adapter")


class NotStored(Exception):
    """The gateway did not store the update (shutting down): Telegram must deliver it again."""


class WebhookServer:
    """Serves `config.path` on `config.listen_host:listen_port`; `port` is the one bound (0 in
    config picks one)."""

    def __init__(self, config: TelegramConfig, serve: ServeHttp | None = None) -> None:
        self.config = config
        self.port: int | None = None
        self.secret = ""
        self._serve = serve  # the daemon's bounded listener (gateway/ops/http_limits.py)
        self._listener: HttpListener | None = None
        self._bot: Bot | None = None
        self._dp: Dispatcher | None = None

    async def serve(self, bot: Bot, dp: Dispatcher) -> None:
        cfg = self.config
        self._bot, self._dp = bot, dp
        # Without a configured secret, a fresh random one
        # still keeps strangers from posting fake updates.
        self.secret = cfg.secret_token.value if cfg.secret_token else secrets.token_urlsafe(32)
        if self._serve is None:
            raise AdapterFatal(
                "telegram",
                "webhook mode needs the daemon's HTTP listener (TelegramAdapter(serve=...))",
            )
        app = web.Application()
        app.router.add_post(cfg.path, self._on_webhook)
        self._listener = await self._serve(app, cfg.listen_host, cfg.listen_port, self.caller)
        self.port = self._listener.port

    async def close(self) -> None:
        if self._listener is not None:
            # the webhook stays set: Telegram keeps updates until we are back
            await self._listener.stop()
            self._listener = None

    def caller(self, request: web.BaseRequest) -> Caller:
        """Telegram's POST to the path with the secret-token header; anyone else is refused before
        the listener waits on a body."""
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if (
            request.method == "POST"
            and request.path == self.config.path
            and self.secret
            and Secret(self.secret).matches(given)
        ):
            return Caller.KNOWN
        return Caller.STRANGER

    async def _on_webhook(self, request: web.Request) -> web.Response:
        given = request.headers.get("X-Telegram-Bot-Api-Secret-Token", "")
        if not Secret(self.secret).matches(given):
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
