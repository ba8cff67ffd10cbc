"""Who may use the web listener, tried the way an attacker would, with real HTTP and WebSocket
requests against a running daemon: a page on another origin, a rebound DNS name, no secret, a wrong
or garbled one."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.config.settings import WEB_KEY_FILE, load_config
from gateway.config.yamlload import Secret
from gateway.errors import ConfigError
from gateway.ops.daemon import Daemon
from gateway.ops.doctor import Doctor
from gateway.ops.web_guard import COOKIE_PREFIX, WebGuard, load_web_secret
from gateway.ops.wiring import build_gateway, platform_adapters
from tests.daemon_proc import free_port
from tests.fakes.llm import FakeLLM
from tests.helpers import write_config

EVIL = "http://evil.example"


async def start(home: Path, fake_llm: FakeLLM, web: str = "") -> Daemon:
    write_config(
        home, provider="anthropic", base_url=fake_llm.base_url, extra=f"web:\n  port: 0\n{web}"
    )
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    return daemon


@pytest.fixture
async def daemon(home: Path, fake_llm: FakeLLM) -> AsyncIterator[Daemon]:
    d = await start(home, fake_llm)
    try:
        yield d
    finally:
        await d.stop()


def url(daemon: Daemon, path: str) -> str:
    return f"http://127.0.0.1:{daemon.web_port}{path}"


def inbound_texts(home: Path) -> list[str]:
    with sqlite3.connect(home / "state.db") as db:
        return [r[0] for r in db.execute("SELECT text FROM inbound ORDER BY id")]


async def logged_in(daemon: Daemon, home: Path) -> aiohttp.ClientSession:
    """A browser that opened the login link: it holds the cookie, and nothing else."""
    http = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with http.get(url(daemon, f"/?token={load_web_secret(home)}")) as resp:
        assert resp.status == 200
    return http


async def test_a_page_on_another_origin_cannot_open_the_socket_even_with_the_owners_cookie(
    daemon: Daemon, home: Path
) -> None:
    http = await logged_in(daemon, home)
    try:
        for origin in (EVIL, f"http://localhost:{daemon.web_port}", "http://127.0.0.1:1", "null"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url(daemon, "/ws?client=tab1"), headers={"Origin": origin})
            assert refused.value.status == 403, origin
        async with http.ws_connect(
            url(daemon, "/ws?client=tab1"),
            headers={"Origin": f"http://127.0.0.1:{daemon.web_port}"},
        ) as ws:
            assert [json.loads((await ws.receive()).data)["type"] for _ in range(2)] == [
                "hello",
                "history",
            ]
            await ws.send_str(json.dumps({"text": "from my own page"}))
            assert json.loads((await ws.receive()).data)["type"] == "ack"
    finally:
        await http.close()
    # nothing from the other origins was ever taken in
    assert inbound_texts(home) == ["from my own page"]


async def test_nothing_but_probes_answers_a_rebound_host_name(daemon: Daemon, home: Path) -> None:
    rebound = {"Host": f"rebind.evil.example:{daemon.web_port}"}
    bearer = {"Authorization": f"Bearer {load_web_secret(home)}"}
    async with aiohttp.ClientSession() as http:
        for path in (
            "/status",
            "/metrics",
            "/",
            "/ws",
            "/dashboard",
            "/dashboard/api/state",
            "/dashboard/api/events",
            "/dashboard/static/dashboard.js",
        ):
            async with http.get(url(daemon, path), headers={**rebound, **bearer}) as resp:
                assert resp.status == 403, path
        for path in ("/upload", "/dashboard/api/pairing/approve", "/dashboard/api/pairing/deny"):
            async with http.post(
                url(daemon, path), headers={**rebound, **bearer}, json={"code": "K7Q2MZ4P"}
            ) as resp:
                assert resp.status == 403, path
        for path in ("/healthz", "/readyz"):
            # probes send whatever Host they like, and learn nothing private
            async with http.get(url(daemon, path), headers=rebound) as resp:
                assert resp.status == 200, path
        for host in (
            f"localhost:{daemon.web_port}",
            "app.localhost",
            f"127.0.0.1:{daemon.web_port}",
            "[::1]",
        ):
            async with http.get(url(daemon, "/status"), headers={"Host": host}) as resp:
                assert resp.status == 200, host


async def test_readyz_tells_anyone_ready_or_not_and_only_an_operator_which_model(
    daemon: Daemon, home: Path
) -> None:
    async with aiohttp.ClientSession() as http:
        for headers in ({"Host": "rebind.evil.example"}, {"X-Forwarded-For": "203.0.113.9"}):
            # a stranger
            async with http.get(url(daemon, "/readyz"), headers=headers) as resp:
                assert resp.status == 200 and await resp.json() == {
                    "ready": True,
                    "store": "ok",
                    "draining": False,
                    "model": "configured",
                    "adapters": {"web": "running"},
                }, headers
        # this machine, or the secret through a proxy
        for headers in (
            {},
            {"X-Forwarded-For": "203.0.113.9", "Authorization": f"Bearer {load_web_secret(home)}"},
        ):
            async with http.get(url(daemon, "/readyz"), headers=headers) as resp:
                assert (await resp.json())["model"] == "anthropic/claude-test", headers


async def test_without_the_secret_every_owner_route_is_locked_and_says_how_to_log_in(
    daemon: Daemon, home: Path
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(url(daemon, "/"), headers={"Accept": "text/html"}) as resp:
            assert resp.status == 401 and "gateway web-url" in await resp.text()
        for path in (
            "/ws?client=x",
            "/dashboard",
            "/dashboard/api/state",
            "/dashboard/api/events",
            "/dashboard/static/dashboard.js",
            "/anything/added/later",
            "/?token=wrong",
        ):
            async with http.get(url(daemon, path)) as resp:
                assert resp.status == 401, path
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url(daemon, "/ws?client=x"))
        assert refused.value.status == 401
        for path in ("/dashboard/api/pairing/approve", "/dashboard/api/pairing/deny"):
            async with http.post(url(daemon, path), json={"code": "K7Q2MZ4P"}) as resp:
                assert resp.status == 401, path
        bearer = {"Authorization": f"Bearer {load_web_secret(home)}"}
        async with http.get(url(daemon, "/dashboard"), headers=bearer) as resp:
            assert (
                resp.status == 200
                and "<title>agent-gateway · dashboard</title>" in await resp.text()
            )
        async with http.get(url(daemon, "/anything/added/later"), headers=bearer) as resp:
            assert resp.status == 404  # past the guard: the route simply does not exist


async def test_the_login_link_sets_a_strict_httponly_cookie_and_cleans_the_address(
    daemon: Daemon, home: Path
) -> None:
    secret = load_web_secret(home)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(
            url(daemon, f"/?token={secret}&client=abc"), allow_redirects=False
        ) as resp:
            assert resp.status == 303 and resp.headers["Location"] == "/?client=abc"
            cookie = resp.headers["Set-Cookie"]
            assert (
                cookie.startswith(COOKIE_PREFIX)
                and "HttpOnly" in cookie
                and "SameSite=Strict" in cookie
            )
            # the cookie is derived from the secret, not the secret itself
            assert secret not in cookie
        async with http.get(url(daemon, "/")) as resp:
            assert resp.status == 200 and "<title>agent-gateway" in await resp.text()
            assert resp.headers["X-Frame-Options"] == "DENY"
    async with aiohttp.ClientSession() as fresh:
        async with fresh.get(
            url(daemon, f"//evil.example/?token={secret}"), allow_redirects=False
        ) as resp:
            # never a protocol-relative jump to another site
            assert resp.headers["Location"] == "/evil.example/"


async def test_garbage_credentials_get_401_never_500(daemon: Daemon, home: Path) -> None:
    reader, writer = await _raw(daemon)
    for header in (
        b"Authorization: Bearer \xff\xfe",
        b"Cookie: " + COOKIE_PREFIX.encode() + b"x=\xff\xfe",
        b"Origin: http://\xff.example",
    ):
        writer.write(
            b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 1.2.3.4\r\n"
            + header
            + b"\r\n\r\n"
        )
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header + b"\r\n\r\n")
    await writer.drain()
    answers = (await _read_answers(reader, 6)).split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"401", b"401", b"401", b"401", b"401", b"403"]
    writer.close()


async def test_a_forged_cookie_is_refused_and_a_token_opens_a_socket_without_a_redirect(
    daemon: Daemon, home: Path
) -> None:
    secret = load_web_secret(home)
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(url(daemon, f"/?token={secret}"), allow_redirects=False) as resp:
            name = resp.cookies.popitem()[0]
    forged = {"Cookie": f"{name}={'0' * 64}"}  # the right cookie name, a made-up value
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/dashboard/api/state"):
            async with http.get(url(daemon, path), headers=forged) as resp:
                assert resp.status == 401, path
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(url(daemon, "/ws?client=f"), headers=forged)
        assert refused.value.status == 401
        async with http.ws_connect(url(daemon, f"/ws?client=f&token={secret}")) as ws:
            # a script: no cookie
            assert json.loads((await ws.receive()).data)["type"] == "hello"
    other = WebGuard(Secret("another-install-secret"))
    assert other.cookie_name != name  # two installs on one host keep their own cookies


async def test_the_login_redirect_never_leaves_this_site(daemon: Daemon, home: Path) -> None:
    secret = load_web_secret(home).encode()
    for path in (
        b"//evil.example/",
        b"/\\evil.example/",
        b"/\\/evil.example/",
        b"/%2F%2Fevil.example/",
    ):
        reader, writer = await _raw(daemon)
        writer.write(
            b"GET "
            + path
            + b"?token="
            + secret
            + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        answer = await reader.read()
        writer.close()
        location = next(line for line in answer.split(b"\r\n") if line.startswith(b"Location: "))[
            10:
        ]
        assert location.startswith(b"/") and location[1:2] not in (b"/", b"\\"), (path, location)


async def _raw(daemon: Daemon) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", daemon.web_port)


async def _read_answers(reader: asyncio.StreamReader, count: int) -> bytes:
    data = b""
    async with asyncio.timeout(10):
        while data.count(b"HTTP/1.1 ") < count or not data.endswith(b"\n"):
            chunk = await reader.read(65536)
            if not chunk:
                break
            data += chunk
    return data


async def test_the_secret_is_made_once_private_and_kept_across_restarts(
    home: Path, fake_llm: FakeLLM
) -> None:
    first = await start(home, fake_llm)
    await first.stop()
    path = home / WEB_KEY_FILE
    secret = path.read_text().strip()
    assert len(secret) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    second = await start(home, fake_llm)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(
                url(second, "/"), headers={"Authorization": f"Bearer {secret}"}
            ) as resp:
                assert resp.status == 200
    finally:
        await second.stop()


async def test_web_auth_token_is_the_login_secret_when_set(home: Path, fake_llm: FakeLLM) -> None:
    daemon = await start(home, fake_llm, "  auth_token: chosen-token-123\n")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(
                url(daemon, "/"), headers={"Authorization": "Bearer chosen-token-123"}
            ) as resp:
                assert resp.status == 200
        assert not (home / WEB_KEY_FILE).exists()
    finally:
        await daemon.stop()


async def test_auth_none_opens_the_chat_on_loopback_but_keeps_origin_and_host_checks(
    home: Path, fake_llm: FakeLLM
) -> None:
    daemon = await start(home, fake_llm, "  auth: none\n")
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(url(daemon, "/")) as resp:
                assert resp.status == 200
            async with http.get(url(daemon, "/"), headers={"Host": "rebind.evil.example"}) as resp:
                assert resp.status == 403
            for relayed in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}):
                # a proxy
                async with http.get(url(daemon, "/dashboard/api/state"), headers=relayed) as resp:
                    assert resp.status == 401, relayed
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(url(daemon, "/ws?client=x"), headers={"Origin": EVIL})
            assert refused.value.status == 403
        checks = await Doctor(home, {}).run()
        web = next(c for c in checks if c.name == "web")
        assert web.verdict == "warn" and "auth is none" in web.detail
    finally:
        await daemon.stop()


def test_auth_none_off_loopback_is_a_config_error(home: Path) -> None:
    (home / "config.yaml").write_text(
        "web:\n  host: 0.0.0.0\n  auth: none\n  auth_token: some-token-123\n"
    )
    with pytest.raises(ConfigError, match=r"auth: none is allowed only with a loopback"):
        load_config(home, env={})
    (home / "config.yaml").write_text(
        "web:\n  auth: none\n  public_url: https://chat.example.com\n"
    )
    with pytest.raises(
        ConfigError, match=r"config.yaml:\d+.*auth: none cannot go with web.public_url"
    ):
        load_config(home, env={})


async def test_a_public_url_behind_a_proxy_is_its_own_origin(home: Path, fake_llm: FakeLLM) -> None:
    daemon = await start(home, fake_llm, "  public_url: https://chat.example.com\n")
    bearer = {"Authorization": f"Bearer {load_web_secret(home)}"}
    try:
        async with aiohttp.ClientSession() as http:
            # Host passed on
            for headers in (
                {"Host": "chat.example.com", "Origin": "https://chat.example.com"},
                {"Origin": "https://chat.example.com"},
            ):  # the proxy sent its own Host
                async with http.ws_connect(
                    url(daemon, "/ws?client=p"), headers={**headers, **bearer}
                ) as ws:
                    assert [json.loads((await ws.receive()).data)["type"] for _ in range(2)] == [
                        "hello",
                        "history",
                    ]
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await http.ws_connect(
                    url(daemon, "/ws?client=p"),
                    headers={"Origin": "https://chat.example.com.evil.example", **bearer},
                )
    finally:
        await daemon.stop()


async def test_gateway_web_url_prints_the_login_link(home: Path) -> None:
    (home / "config.yaml").write_text("web:\n  port: 8799\n")
    gateway = str(Path(sys.executable).parent / "gateway")
    proc = await asyncio.create_subprocess_exec(
        gateway,
        "--home",
        str(home),
        "web-url",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == f"http://127.0.0.1:8799/?token={load_web_secret(home)}"
    assert os.stat(home / WEB_KEY_FILE).st_mode & 0o077 == 0


async def test_gateway_run_prints_the_login_link_on_a_terminal_and_never_logs_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    import pty
    import signal

    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    write_config(
        home, provider="anthropic", base_url=fake_llm.base_url, extra=f"web:\n  port: {port}\n"
    )
    main, terminal = pty.openpty()
    gateway = str(Path(sys.executable).parent / "gateway")
    proc = await asyncio.create_subprocess_exec(
        gateway,
        "--home",
        str(home),
        "--log-format",
        "json",
        "run",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=terminal,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
    )
    os.close(terminal)
    printed = b""
    try:
        async with asyncio.timeout(60):
            while b"token=" not in printed or not printed.endswith(b"\n"):
                printed += await asyncio.to_thread(os.read, main, 4096)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        os.close(main)
    secret = load_web_secret(home)
    # the start-up banner's line
    assert f"  web chat   http://127.0.0.1:{port}/?token={secret}".encode() in printed
    assert secret.encode() not in err and b"gateway web-url" in err  # the log says where to get it


def _lan_address() -> str | None:
    """A non-loopback address of this machine (none on a host without a network)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            # no packet is sent: this only picks the outgoing interface
            probe.connect(("192.0.2.1", 9))
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def test_off_loopback_status_needs_the_secret_and_gateway_status_sends_it(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    address = _lan_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address")
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    write_config(
        home,
        provider="anthropic",
        base_url=fake_llm.base_url,
        extra=f"web:\n  host: {address}\n  port: {port}\n  auth_token: lan-token-123\n",
    )
    config = load_config(home, env={})
    daemon = Daemon(
        build_gateway(config, env={}, adapters=platform_adapters(config), probe_ollama=False),
        install_signals=False,
    )
    await daemon.start()
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://{address}:{port}/status") as resp,
        ):
            assert resp.status == 401  # this machine's own LAN address is just another peer
        gateway = str(Path(sys.executable).parent / "gateway")
        proc = await asyncio.create_subprocess_exec(
            gateway,
            "--home",
            str(home),
            "status",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert "web       running" in out.decode()
    finally:
        await daemon.stop()
