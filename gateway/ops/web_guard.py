"""Who may use the daemon's web listener: one aiohttp middleware in front of every route.

Every route is the owner's (the web chat, the dashboard, anything added later) unless `ROUTE_ACCESS`
below names it as more open, so a new route is protected without a line of its own. An owner's
request must name this host (no DNS rebinding), come from the page's own origin when a browser sends
one (no cross-site WebSocket or form), and carry the login secret: the cookie set by the login link,
`Authorization: Bearer`, or `?token=`. All of it is read from the request line and headers
(`caller`), so the bounded listener asks the guard before it waits on a body: a stranger's refusal
never waits for one (ops/http_limits.py).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import quote

from aiohttp import web
from yarl import URL

from gateway.config.settings import WEB_KEY_FILE, WebConfig
from gateway.config.yamlload import Secret
from gateway.events import Caller

COOKIE_PREFIX = "agent_gateway_"
COOKIE_MAX_AGE_S = 90 * 86400
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Access(enum.Enum):
    OPEN = "open"  # anyone, any Host: probes, and nothing in the answer is private
    # this host's name; a loopback peer (not relayed by a proxy) or the secret as Bearer
    OPERATOR = "operator"
    OWNER = "owner"  # this host's name, the page's own origin, and the login secret


# Liveness and readiness are for systemd, load balancers and monitors, which send whatever Host they
# like; what /readyz says beyond ready or not (the model's name, why the store fails) is for
# operators only (Ops.operator). /status and /metrics are read by `gateway status` and a local
# Prometheus: counts and states, redacted, never chat text, so a loopback peer needs no secret;
# anyone else needs it as a Bearer token.
ROUTE_ACCESS: Mapping[str, Access] = {
    "/healthz": Access.OPEN,
    "/readyz": Access.OPEN,
    "/status": Access.OPERATOR,
    "/metrics": Access.OPERATOR,
}
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOCKED_PAGE = """<!doctype html><meta charset="utf-8"><title>agent-gateway: log in</title>
<p>This web chat needs its login link. On the machine that runs the gateway,
run <code>gateway web-url</code> and open the link it prints (it sets a cookie in this browser).</p>
"""


def load_web_secret(home: Path) -> str:
    """The install's web login secret, created once (atomically, mode 0600) so the daemon and the
    CLI agree."""
    path = home / WEB_KEY_FILE
    try:
        found = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{WEB_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    _give_to_home_owner(tmp, home)
    try:
        os.link(tmp, path)  # fails if another process won the race; then its secret is the secret
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text(encoding="ascii").strip()


def _give_to_home_owner(path: Path, home: Path) -> None:
    """root running `gateway web-url` for a service's home
    must not leave a file the service cannot read."""
    if os.geteuid() == 0:
        info = home.stat()
        if info.st_uid != 0:
            os.chown(path, info.st_uid, info.st_gid)


def login_secret(config: WebConfig, home: Path) -> Secret | None:
    """`web.auth_token` when set, else the generated
    per-install secret; None only for `web.auth: none`."""
    if config.auth == "none":
        return None
    if config.auth_token:
        return config.auth_token
    return Secret(load_web_secret(home))


def is_local(request: web.BaseRequest) -> bool:
    """A loopback peer that is not a reverse proxy relaying
    someone else (X-Forwarded-For / Forwarded)."""
    if "X-Forwarded-For" in request.headers or "Forwarded" in request.headers:
        return False
    try:
        return ipaddress.ip_address((request.remote or "").split("%")[0]).is_loopback
    except ValueError:
        return False


class WebGuard:
    """The daemon builds one from the config and calls
    `protect(app)` once every route is attached."""

    def __init__(
        self, secret: Secret | None, *, host: str = "127.0.0.1", public_url: str | None = None
    ) -> None:
        self.secret = secret
        self.public = URL(public_url) if public_url else None
        self.names = {n for n in (_name(host), self.public.host if self.public else None) if n}
        digest = hashlib.sha256(secret.value.encode() if secret else b"").hexdigest()
        # two installs on one host keep their own cookie
        self.cookie_name = COOKIE_PREFIX + digest[:8]
        self._cookie_value = (
            hmac.new(secret.value.encode(), b"web-cookie", "sha256").hexdigest() if secret else ""
        )

    @classmethod
    def for_config(cls, config: WebConfig, home: Path) -> WebGuard:
        return cls(login_secret(config, home), host=config.host, public_url=config.public_url)

    def protect(self, app: web.Application) -> None:
        app.middlewares.append(self._middleware)

    def login_url(self, base: str) -> str:
        """The link that logs a browser in (the configured
        public URL, if any, rather than `base`)."""
        root = str(self.public).rstrip("/") if self.public else base.rstrip("/")
        return f"{root}/?token={quote(self.secret.value, safe='')}" if self.secret else f"{root}/"

    # ------------------------------------------------------------------ the checks
    def caller(self, request: web.BaseRequest) -> Caller:
        """Who `request` is, from its line and headers alone: a probe on an open route, else someone
        this route accepts (KNOWN); anyone else gets the refusal raised (403 for a foreign Host or
        Origin, 401 without the secret)."""
        access = ROUTE_ACCESS.get(request.path, Access.OWNER)
        if access is Access.OPEN:
            # anyone; what only an operator may read there, its handler withholds (operator())
            return Caller.PROBE
        if not self.host_ok(request.headers.get("Host")):
            own = "this listener answers to its own names only"
            raise web.HTTPForbidden(text=f"unknown Host header ({own})\n")
        if access is Access.OPERATOR:
            if self.operator(request):
                return Caller.KNOWN
            raise web.HTTPUnauthorized(
                text=f"{request.path} from another host needs the login "
                "secret (Authorization: Bearer)\n"
            )
        if not self.origin_ok(request.headers.get("Origin"), request.headers.get("Host")):
            raise web.HTTPForbidden(text="cross-origin request refused\n")
        if self.secret is None:
            # `web.auth: none`: this machine only, never a request a proxy relays
            if is_local(request):
                return Caller.KNOWN
            raise _locked(request)
        if self._cookie_ok(request) or self._bearer_ok(request) or self._token_ok(request):
            return Caller.KNOWN
        raise _locked(request)

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.caller(request) is Caller.PROBE or request.path in ROUTE_ACCESS:
            return await handler(request)
        if self._logging_in(request):
            return self._log_in(request)
        return _with_headers(await handler(request))  # a socket or a script: the token is enough

    def _logging_in(self, request: web.Request) -> bool:
        """A browser opening the login link: a GET page (not a socket) with only `?token=`."""
        if request.method != "GET" or "websocket" in request.headers.get("Upgrade", "").lower():
            return False
        logged_in = self._cookie_ok(request) or self._bearer_ok(request)
        return self._token_ok(request) and not logged_in

    def operator(self, request: web.BaseRequest) -> bool:
        """This listener's name, and a loopback peer not
        relayed by a proxy or the secret as Bearer."""
        return self.host_ok(request.headers.get("Host")) and (
            is_local(request) or self._bearer_ok(request)
        )

    def host_ok(self, host: str | None) -> bool:
        """An IP literal, a loopback name, or a name this listener was configured with: never a
        rebound name."""
        if host is None:
            return True
        name = _name(host)
        if name is None:
            return False
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return name == "localhost" or name.endswith(".localhost") or name in self.names

    def origin_ok(self, origin: str | None, host: str | None) -> bool:
        """Browsers always send Origin on a WebSocket handshake and on a cross-site POST; it must be
        this page's."""
        if origin is None:
            return True
        try:
            url = URL(origin)
        except ValueError:
            return False
        if not url.scheme or not url.host:  # "null": a sandboxed frame, a file:// page
            return False
        if self.public is not None and (url.scheme, url.host, url.port) == (
            self.public.scheme,
            self.public.host,
            self.public.port,
        ):
            return True
        own = URL.build(scheme=url.scheme, authority=host or "") if host else None
        return (
            own is not None
            and (own.host or "").lower() == url.host.lower()
            and own.port == url.port
        )

    def _cookie_ok(self, request: web.BaseRequest) -> bool:
        given = request.cookies.get(self.cookie_name)
        if self.secret is None or given is None:
            return False
        return Secret(self._cookie_value).matches(given)

    def _bearer_ok(self, request: web.BaseRequest) -> bool:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return (
            self.secret is not None
            and scheme.lower() == "bearer"
            and self.secret.matches(given.strip())
        )

    def _token_ok(self, request: web.BaseRequest) -> bool:
        token = request.query.get("token")
        return self.secret is not None and token is not None and self.secret.matches(token)

    def _log_in(self, request: web.Request) -> web.Response:
        """Set the cookie and send the browser to the same URL
        without the token (out of history and screens)."""
        target = request.rel_url.without_query_params("token")
        # Never "//host" or "/\\host" (browsers read a backslash as a slash): that would send the
        # browser elsewhere.
        location = "/" + str(target).lstrip("/\\")
        response = web.Response(
            status=303,
            headers={"Location": location, "Cache-Control": "no-store", **SECURITY_HEADERS},
        )
        secure = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
        response.set_cookie(
            self.cookie_name,
            self._cookie_value,
            max_age=COOKIE_MAX_AGE_S,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=secure,
        )
        return response


def _name(host: str | None) -> str | None:
    """The host name of a Host header or `web.host` value, lower-cased, without port, brackets or
    final dot."""
    if not host:
        return None
    try:
        url = URL.build(scheme="http", authority=host.strip())
    except ValueError:
        return None
    return (url.host or "").lower().rstrip(".") or None


def _with_headers(response: web.StreamResponse) -> web.StreamResponse:
    if not response.prepared:  # a WebSocket has sent its headers already
        for key, value in SECURITY_HEADERS.items():
            response.headers.setdefault(key, value)
    return response


def _locked(request: web.BaseRequest) -> web.HTTPUnauthorized:
    if "text/html" in request.headers.get("Accept", ""):
        return web.HTTPUnauthorized(
            text=LOCKED_PAGE, content_type="text/html", headers=SECURITY_HEADERS
        )
    return web.HTTPUnauthorized(text="the web chat needs its login secret: run `gateway web-url`\n")
