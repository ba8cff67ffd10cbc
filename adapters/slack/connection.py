"""Slack's connection, one of two: an aiohttp server for the signed HTTP Events API, or a Socket
Mode websocket (with its `goodbye` and the liveness ping the supervisor asks for). Either way bolt's
app handles what comes in; the ack window around each request is in `ack`."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.ack import SocketClient, SocketHandler, events_caller, events_endpoint
from adapters.slack.text import NETWORK_ERRORS, PLATFORM, describe, start_error
from gateway.config.settings import SlackConfig
from gateway.errors import AdapterFatal, PlatformUnavailable
from gateway.events import HttpListener, ServeHttp

# one logger for the Slack adapter, whichever module speaks
log = logging.getLogger("adapters.slack.adapter")


class Connection:
    """`config.mode` picks the way in: "http" serves `config.path` (`http_port` is the port bound),
    otherwise Socket Mode with the app token."""

    def __init__(
        self,
        config: SlackConfig,
        *,
        ping_interval: float,
        ping_timeout: float,
        serve: ServeHttp | None = None,
    ) -> None:
        self.config = config
        self._serve = serve  # the daemon's bounded listener (gateway/ops/http_limits.py)
        self._listener: HttpListener | None = None
        self.ping_interval = ping_interval  # the SDK's own websocket ping cadence
        self.ping_timeout = ping_timeout
        self.http_port: int | None = None
        self._socket: SocketHandler | None = None
        self._pongs: dict[float, asyncio.Future[None]] = {}

    async def open(self, app: AsyncApp, client: AsyncWebClient) -> None:
        if self.config.mode == "http":
            await self._serve_http(app)
        else:
            await self._connect_socket(app, client)

    async def close(self) -> None:
        if self._socket is not None:
            socket, self._socket = self._socket, None
            await socket.close_async()  # type: ignore[no-untyped-call]
        if self._listener is not None:
            listener, self._listener = self._listener, None
            await listener.stop()
        self.http_port = None

    async def _serve_http(self, app: AsyncApp) -> None:
        cfg = self.config
        if self._serve is None:
            raise AdapterFatal(
                PLATFORM, "http mode needs the daemon's HTTP listener (SlackAdapter(serve=...))"
            )
        server = web.Application()
        secret = cfg.signing_secret.value if cfg.signing_secret else ""
        server.router.add_post(cfg.path, events_endpoint(app, secret))
        gate = events_caller(cfg.path)
        self._listener = await self._serve(server, cfg.listen_host, cfg.listen_port, gate)
        self.http_port = self._listener.port
        log.info("slack: Events API at http://%s:%s%s", cfg.listen_host, self.http_port, cfg.path)

    async def _connect_socket(self, app: AsyncApp, client: AsyncWebClient) -> None:
        token = self.config.app_token.value if self.config.app_token else ""
        # Open the first URL ourselves: the SDK's connect() retries a rejected app token forever.
        try:
            opened = await client.apps_connections_open(app_token=token)
        except SlackApiError as exc:
            raise start_error(exc, "app token", "SLACK_APP_TOKEN") from None
        except NETWORK_ERRORS as exc:
            raise PlatformUnavailable(
                PLATFORM, f"apps.connections.open failed: {describe(exc)}"
            ) from None
        sdk = SocketClient(
            app_token=token,
            web_client=client,
            ping_interval=self.ping_interval,
            logger=logging.getLogger("adapters.slack.adapter.socket"),
        )
        sdk.on_pong = self._on_pong
        sdk.message_listeners.append(self._on_socket_message)
        sdk.wss_uri = str(opened["url"])
        self._socket = SocketHandler(app, sdk)
        await self._socket.connect_async()  # type: ignore[no-untyped-call]

    async def _on_socket_message(
        self, client: Any, message: dict[str, Any], raw: str | None
    ) -> None:
        if message.get("type") == "goodbye":
            # the SDK reconnects on `disconnect` by itself, not on this
            log.info("slack: Socket Mode said goodbye; reconnecting")
            await client.connect_to_new_endpoint(force=True)

    def _on_pong(self, marker: float) -> None:
        waiter = self._pongs.get(marker)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def ping(self) -> bool:
        """Socket Mode: one websocket ping answered within `ping_timeout` (the supervisor reconnects
        us when no event and no pong came for `liveness_minutes`). HTTP mode has no connection to
        check."""
        if self.config.mode == "http":
            return self._listener is not None
        session = self._socket.client.current_session if self._socket is not None else None
        if session is None or session.closed:
            return False
        marker = time.time()  # the SDK parses the pong's payload back into this float
        while marker in self._pongs:
            marker += 1e-6
        waiter = self._pongs[marker] = asyncio.get_running_loop().create_future()
        try:
            await session.ping(f"sdk-ping-pong:{marker}".encode())
            async with asyncio.timeout(self.ping_timeout):
                await waiter
            return True
        except (TimeoutError, ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
            log.info("slack: Socket Mode ping unanswered (%s)", describe(exc))
            return False
        finally:
            self._pongs.pop(marker, None)
