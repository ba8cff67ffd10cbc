"""`gateway doctor`: config, home permissions, the
database, each platform token, the model, the shell.

One line per check with a fix hint. Tokens are checked with each platform's own auth call (Telegram
getMe, Discord /users/@me, Slack auth.test) at the configured API base, so tests point it at fakes.
Nothing is changed, except by `repair` (`doctor --fix`): missing folders and loose permissions,
nothing else.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp

from gateway.agent.tools.catalog import shell_doctor
from gateway.agent.tools.policy import check_tool_names
from gateway.config.settings import WEB_KEY_FILE, Config, load_config
from gateway.errors import ConfigError, LLMError, LLMNotConfigured, LLMRejected, LLMTimeout
from gateway.mcp.hub import McpHub
from gateway.telemetry.logs import Redactor, config_secrets, env_secrets
from gateway.telemetry.status_client import connect_host
from gateway.voice.speaker import doctor_check

Verdict = Literal["ok", "warn", "fail", "skip"]
HTTP_TIMEOUT_S = 10.0
DISCORD_API = "https://discord.com/api/v10"
SLACK_API = "https://slack.com/api/"
SECRET_FILES = ("config.yaml", "pairing.key")  # web.key has a check of its own (check_web)
DB_FIX = (
    "stop the daemon; restore the latest backup (docs/operations.md: backups) or salvage with "
    "`sqlite3 state.db .recover`"
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    verdict: Verdict
    detail: str
    fix: str | None = None

    def line(self) -> str:
        label = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}[self.verdict]
        hint = f" — fix: {self.fix}" if self.fix and self.verdict in ("warn", "fail") else ""
        return f"{label} {self.name:<9} {self.detail}{hint}"


class Doctor:
    def __init__(
        self, home: Path, env: Mapping[str, str], *, timeout: float = HTTP_TIMEOUT_S
    ) -> None:
        self.home = home
        self.env = env
        self.timeout = timeout

    async def run(self) -> list[Check]:
        config, first = self.check_config()
        checks = [first, *self.check_home(), self.check_database(), *self.check_memory()]
        if config is None:
            return checks
        checks.extend(self.check_web(config))
        checks.extend(Check("voice", *found) for found in doctor_check(config.voice, self.env))
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            probes: list[Awaitable[list[Check]]] = [
                self._one(self.check_telegram(http, config)),
                self._one(self.check_discord(http, config)),
                self.check_slack(http, config),
                self._one(self.check_model(config)),
                self._one(self.check_daemon(http, config)),
                self.check_mcp(config),
                shell_doctor(config, Check),
            ]
            for found in await asyncio.gather(*probes):
                checks.extend(found)
        redact = Redactor([*config_secrets(config), *env_secrets(self.env)])
        return [Check(c.name, c.verdict, redact(c.detail), c.fix) for c in checks]

    @staticmethod
    async def _one(check: Awaitable[Check | None]) -> list[Check]:
        found = await check
        return [] if found is None else [found]

    # ------------------------------------------------------------------ local
    def check_config(self) -> tuple[Config | None, Check]:
        path = self.home / "config.yaml"
        try:
            config = load_config(self.home, env=dict(self.env))
            check_tool_names(config)
        except ConfigError as exc:
            first = str(exc).splitlines()[0]
            return None, Check(
                "config",
                "fail",
                first,
                "edit config.yaml; `gateway config check` lists every error",
            )
        if not path.exists():
            return config, Check(
                "config", "ok", f"no {path} (defaults; the web chat works without one)"
            )
        platforms = [p for p in ("telegram", "discord", "slack") if getattr(config, p) is not None]
        model = f"{config.model.provider}/{config.model.name}" if config.model else "auto-detected"
        return config, Check(
            "config", "ok", f"{path} (model {model}; platforms: {', '.join(platforms) or 'none'})"
        )

    def check_home(self) -> list[Check]:
        """The home is private (0700: what the daemon creates and the system unit's
        StateDirectoryMode= sets). Inside a private home a file's own mode does not matter (the
        system unit's config.yaml is 0644 so the dynamic user can read it); in a home others can
        enter, the files holding secrets must be 0600."""
        home = self.home
        if not home.exists():
            return [Check("home", "ok", f"{home} does not exist yet (the first run creates it)")]
        info = home.stat()
        found: list[Check] = []
        if not os.access(home, os.W_OK):
            found.append(
                Check(
                    "home",
                    "fail",
                    f"{home} is not writable by uid {os.getuid()}",
                    f"chown -R $(id -un) {home}",
                )
            )
        elif info.st_mode & 0o022:
            found.append(
                Check(
                    "home",
                    "fail",
                    f"{home} is writable by group/others ({_mode(info)})",
                    f"chmod 700 {home} (or `gateway doctor --fix`)",
                )
            )
        elif info.st_mode & 0o077:
            found.append(
                Check(
                    "home",
                    "warn",
                    f"{home} is readable by group/others ({_mode(info)}); it holds "
                    "memories and chat history",
                    f"chmod 700 {home} (or `gateway doctor --fix`)",
                )
            )
        else:
            found.append(Check("home", "ok", f"{home} ({_mode(info)}, owner uid {info.st_uid})"))
        if info.st_mode & 0o011:  # others can reach the files: each secret must guard itself
            for path in (home / name for name in SECRET_FILES):
                if path.exists() and path.stat().st_mode & 0o044:
                    found.append(
                        Check(
                            "home",
                            "warn",
                            f"{path} is readable by group/others ({_mode(path.stat())})",
                            f"chmod 600 {path}, or chmod 700 {home} (`gateway doctor --fix`)",
                        )
                    )
        found.extend(self._check_env_files())
        return found

    def check_web(self, config: Config) -> list[Check]:
        """The web chat's login: who can chat as the owner
        without it (web users are trusted as the owner)."""
        web = config.web
        if not web.enabled:
            return []
        if web.auth == "none":
            return [
                Check(
                    "web",
                    "warn",
                    "web.auth is none: any program or user on this machine can chat as the "
                    "owner, read the history and write memory",
                    "remove `auth: none` from web:, then open the link `gateway web-url` prints",
                )
            ]
        key = self.home / WEB_KEY_FILE
        if not web.auth_token and key.exists() and key.stat().st_mode & 0o077:
            return [
                Check(
                    "web",
                    "warn",
                    f"{key} is readable by group/others ({_mode(key.stat())})",
                    f"chmod 600 {key} (or `gateway doctor --fix`)",
                )
            ]
        how = "web.auth_token" if web.auth_token else f"the secret in {key.name}"
        return [
            Check(
                "web",
                "ok",
                f"the web chat needs its login link ({how}; `gateway web-url` prints it)",
            )
        ]

    def _check_env_files(self) -> list[Check]:
        """The service's EnvironmentFile= holds the tokens themselves: 0600 (install-service creates
        it so)."""
        found = []
        for path in env_files(self.home, self.env):
            try:
                info = path.stat()
            except OSError:
                continue
            if info.st_mode & 0o077:
                found.append(
                    Check(
                        "home",
                        "warn",
                        f"{path} holds tokens and is open to group/others ({_mode(info)})",
                        f"chmod 600 {path} (or `gateway doctor --fix`)",
                    )
                )
        return found

    def repair(self) -> list[str]:
        """What `doctor --fix` changes, only where it is safe: missing folders are made, and the
        home, web.key and the env file lose group/other access; config.yaml and pairing.key too, but
        only when the home was open (inside a private home their mode does not matter, and the
        system unit's config.yaml must stay readable by its dynamic user). Ownership, the database
        and tokens are left alone."""
        done: list[str] = []
        was_open = self.home.exists() and bool(self.home.stat().st_mode & 0o077)
        for folder in (self.home, self.home / "memories", self.home / "skills"):
            if not folder.exists():
                folder.mkdir(mode=0o700, parents=True)
                done.append(f"created {folder} (drwx------)")
        done.extend(_tighten(self.home, 0o700))
        secrets = (*SECRET_FILES, WEB_KEY_FILE) if was_open else (WEB_KEY_FILE,)
        for path in [*(self.home / name for name in secrets), *env_files(self.home, self.env)]:
            if path.exists():
                done.extend(_tighten(path, 0o600))
        return done

    def check_database(self) -> Check:
        path = self.home / "state.db"
        if not path.exists():
            return Check("database", "ok", f"no {path.name} yet (created on the first run)")
        step = "open"
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                step = "integrity_check"
                rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
                step = "schema"
                migrations = (
                    conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0]
                    if rows == ["ok"]
                    else 0
                )
            finally:
                conn.close()
        except sqlite3.Error as exc:
            rows = [f"{exc}"] if step == "integrity_check" else []
            if not rows:
                return Check("database", "fail", f"{path}: {exc}", DB_FIX)
        if rows != ["ok"]:
            return Check("database", "fail", f"integrity_check: {'; '.join(rows[:3])}", DB_FIX)
        size = path.stat().st_size
        return Check(
            "database",
            "ok",
            f"{path.name} integrity ok ({size // 1024:,} KiB, {migrations} migrations)",
        )

    def check_memory(self) -> list[Check]:
        """What happened to the memory files on an upgrade
        (the old global USER.md, gateway/access/roles.py)."""
        path = self.home / "state.db"
        if not path.exists():
            return []
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                row = conn.execute(
                    "SELECT text, created_at FROM people_notes WHERE name = 'user_md_migration'"
                ).fetchone()
            finally:
                conn.close()
        except sqlite3.Error:
            return []  # before migration 0005_people: nothing was moved yet
        return [] if row is None else [Check("memory", "ok", f"{row[0]} ({row[1][:10]})")]

    # ------------------------------------------------------------------ platforms
    async def check_telegram(self, http: aiohttp.ClientSession, config: Config) -> Check | None:
        tg = config.telegram
        if tg is None:
            return None
        base = tg.api_server.rstrip("/")
        ok, status, body = await _call(http, "GET", f"{base}/bot{tg.token.value}/getMe")
        if ok and isinstance(body, dict) and body.get("ok"):
            me = body.get("result") or {}
            return Check("telegram", "ok", f"getMe: @{me.get('username')} (id {me.get('id')})")
        if status in (401, 404):
            return Check(
                "telegram",
                "fail",
                f"getMe: token rejected ({status})",
                "put the token from @BotFather in telegram.token (e.g. ${TELEGRAM_BOT_TOKEN})",
            )
        return Check(
            "telegram",
            "fail",
            f"getMe at {base}: {_why(status, body)}",
            "check the network and telegram.api_server",
        )

    async def check_discord(self, http: aiohttp.ClientSession, config: Config) -> Check | None:
        dc = config.discord
        if dc is None:
            return None
        base = (dc.api_base or DISCORD_API).rstrip("/")
        ok, status, body = await _call(
            http, "GET", f"{base}/users/@me", headers={"Authorization": f"Bot {dc.token.value}"}
        )
        if ok and isinstance(body, dict) and body.get("id"):
            return Check(
                "discord", "ok", f"/users/@me: {body.get('username')} (id {body.get('id')})"
            )
        if status == 401:
            return Check(
                "discord",
                "fail",
                "/users/@me: token rejected (401)",
                "reset the bot token in the Developer Portal "
                "(Bot → Reset Token) and set discord.token",
            )
        return Check(
            "discord",
            "fail",
            f"/users/@me at {base}: {_why(status, body)}",
            "check the network and discord.api_base",
        )

    async def check_slack(self, http: aiohttp.ClientSession, config: Config) -> list[Check]:
        sl = config.slack
        if sl is None:
            return []
        base = (sl.api_url or SLACK_API).rstrip("/") + "/"
        found = []
        ok, status, body = await _call(
            http,
            "POST",
            f"{base}auth.test",
            headers={"Authorization": f"Bearer {sl.bot_token.value}"},
        )
        if ok and isinstance(body, dict) and body.get("ok"):
            found.append(
                Check("slack", "ok", f"auth.test: {body.get('user')} in {body.get('team')}")
            )
        elif isinstance(body, dict) and body.get("error"):
            found.append(
                Check(
                    "slack",
                    "fail",
                    f"auth.test: {body['error']}",
                    "set slack.bot_token to the app's Bot User OAuth Token (xoxb-...)",
                )
            )
        else:
            found.append(
                Check(
                    "slack",
                    "fail",
                    f"auth.test at {base}: {_why(status, body)}",
                    "check the network and slack.api_url",
                )
            )
        if sl.mode == "socket" and sl.app_token:
            ok, status, body = await _call(
                http,
                "POST",
                f"{base}apps.connections.open",
                headers={"Authorization": f"Bearer {sl.app_token.value}"},
            )
            if ok and isinstance(body, dict) and body.get("ok"):
                found.append(
                    Check("slack", "ok", "apps.connections.open: app token can open Socket Mode")
                )
            else:
                why = (
                    body.get("error")
                    if isinstance(body, dict) and body.get("error")
                    else _why(status, body)
                )
                found.append(
                    Check(
                        "slack",
                        "fail",
                        f"apps.connections.open: {why}",
                        "set slack.app_token to an app-level "
                        "token (xapp-...) with connections:write",
                    )
                )
        return found

    # ------------------------------------------------------------------ model and daemon
    async def check_model(self, config: Config) -> Check:
        from gateway.llm.factory import build_llm

        try:
            llm = build_llm(config, self.env)
        except LLMNotConfigured as exc:
            return Check(
                "model",
                "fail",
                str(exc),
                "`gateway init`, or set model: in config.yaml, or export ANTHROPIC_API_KEY",
            )
        try:
            reply = await asyncio.wait_for(
                llm.complete(
                    system="Health check.",
                    messages=[{"role": "user", "content": "Reply with: ok"}],
                    tools=[],
                    max_tokens=8,
                ),
                self.timeout * 3,
            )
        except LLMRejected as exc:
            return Check(
                "model",
                "fail",
                f"{llm.provider}/{llm.model}: rejected: {exc}",
                "check model.name and the API key (model.api_key_env)",
            )
        except (LLMError, TimeoutError) as exc:
            kind = "timed out" if isinstance(exc, (LLMTimeout, TimeoutError)) else "unavailable"
            return Check(
                "model",
                "fail",
                f"{llm.provider}/{llm.model}: {kind}: {exc}",
                "check model.base_url and the network",
            )
        finally:
            await llm.close()
        used = (
            reply.usage.input_tokens
            + reply.usage.cache_read_tokens
            + reply.usage.cache_write_tokens
        )
        return Check(
            "model",
            "ok",
            f"{llm.provider}/{reply.model or llm.model} answered ({used} prompt tokens)",
        )

    async def check_mcp(self, config: Config) -> list[Check]:
        """Start each MCP server once, list its tools, stop
        it (the daemon's own servers are not touched)."""
        if not config.mcp_servers:
            return []
        hub = McpHub(config.mcp_servers, log_dir=self.home / "logs" / "mcp")
        try:
            await hub.start()
            return [_mcp_check(hub, state.name) for state in hub.states.values()]
        finally:
            await hub.stop()

    async def check_daemon(self, http: aiohttp.ClientSession, config: Config) -> Check | None:
        if not config.web.enabled:
            return Check(
                "daemon", "skip", "web listener off (web.enabled: false): cannot ask the daemon"
            )
        url = f"http://{connect_host(config.web.host)}:{config.web.port}"
        ok, status, body = await _call(http, "GET", f"{url}/readyz")
        if status is None:
            return Check("daemon", "skip", f"not running (nothing answers at {url})")
        if isinstance(body, dict) and "adapters" in body:
            states = ", ".join(f"{k} {v}" for k, v in body["adapters"].items()) or "no adapters"
            if "model" in body and body["model"] is None:
                states += "; no model"
            verdict: Verdict = "ok" if ok else "warn"
            return Check(
                "daemon",
                verdict,
                f"running at {url}: {'ready' if ok else 'not ready'} ({states})",
                "`gateway status` shows each adapter's last error",
            )
        return Check(
            "daemon",
            "warn",
            f"something else answers at {url} ({_why(status, body)})",
            "choose another web.port",
        )


async def _call(
    http: aiohttp.ClientSession, method: str, url: str, *, headers: Mapping[str, str] | None = None
) -> tuple[bool, int | None, Any]:
    """(2xx?, status or None if unreachable, parsed
    JSON or text). Never raises for network trouble."""
    try:
        async with http.request(method, url, headers=dict(headers or {})) as resp:
            try:
                body: Any = await resp.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError):
                body = (await resp.text())[:200]
            return 200 <= resp.status < 300, resp.status, body
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return False, None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _why(status: int | None, body: Any) -> str:
    if status is None:
        return f"unreachable ({body})"
    if isinstance(body, dict):
        text = body.get("description") or body.get("message") or body.get("error") or ""
        return f"HTTP {status} {text}".strip()
    return f"HTTP {status}"


def env_files(home: Path, env: Mapping[str, str]) -> list[Path]:
    """Where install-service puts this install's tokens: the system unit's env file for a home under
    /var/lib, else the user unit's (only when the environment names the user's home: tests pass
    none)."""
    from gateway.ops.service import SYSTEM_ENV_FILE, user_env_file

    if home.absolute().is_relative_to("/var/lib"):
        return [Path(SYSTEM_ENV_FILE)]
    return [user_env_file(env)] if env.get("XDG_CONFIG_HOME") or env.get("HOME") else []


def _tighten(path: Path, mode: int) -> list[str]:
    """chmod to `mode` when group/others have any access
    and the file is ours; a line saying what changed."""
    info = path.stat()
    if not info.st_mode & 0o077 or info.st_uid != os.geteuid():
        return []
    try:
        path.chmod(mode)
    except OSError as exc:
        return [f"could not chmod {path}: {exc.strerror}"]
    return [f"chmod {mode:o} {path} (was {_mode(info)})"]


def _mode(info: os.stat_result) -> str:
    return stat.filemode(info.st_mode)


def _mcp_check(hub: McpHub, name: str) -> Check:
    state = hub.states[name]
    label = f"mcp:{name}"
    if state.state == "disabled":
        return Check(label, "skip", "enabled: false")
    if state.state == "up":
        names = ", ".join(sorted(t.name for t in state.tools.values())) or "no tools"
        detail = f"{state.transport}: {len(state.tools)} tools ({names})"
        if state.withheld:
            why = "; ".join(f"{n} ({w})" for n, w in sorted(state.withheld.items()))
            return Check(
                label,
                "warn",
                f"{detail}; withheld from sessions (their text reads like orders to the "
                f"model): {why}",
                f"check that mcp_servers.{name} runs the server (and version) you meant; "
                "the other tools are offered",
            )
        return Check(label, "ok", detail)
    tail = hub.error_log(name, lines=3).replace("\n", " | ")
    detail = f"{state.transport}: {state.error or 'did not start'}" + (
        f"; stderr: {tail}" if tail else ""
    )
    return Check(
        label,
        "fail",
        detail,
        f"check mcp_servers.{name} (command, args, env / url, headers); "
        f"its stderr is in logs/mcp/{name}.log",
    )


def render(checks: list[Check]) -> str:
    return "\n".join(c.line() for c in checks)


def exit_code(checks: list[Check]) -> int:
    """0 all good (warnings allowed), 78 when the config
    itself is broken, 1 for any other failure."""
    if any(c.name == "config" and c.verdict == "fail" for c in checks):
        return 78
    return 1 if any(c.verdict == "fail" for c in checks) else 0
