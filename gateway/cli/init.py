"""gateway init: the first set-up, asked question by question (or from flags with --yes), written as
a commented config.yaml. It never asks for a secret (only the names of the variables that hold
them), never overwrites a config without --force, tries the model once when it can, and ends with
the next steps.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TextIO

from gateway.cli import context
from gateway.cli.context import EXIT_ERROR, EXIT_OK, check_base_url, environ, home_of
from gateway.config.starter import (
    CHAT_PLATFORMS,
    TOKEN_VARS,
    PlatformChoice,
    Starter,
    check_env_name,
    check_user_id,
    render,
)
from gateway.errors import ConfigError

# (label, provider, default model, base_url, key variable): the presets the questions offer
PRESETS = {
    "anthropic": (
        "Anthropic (Claude)",
        "anthropic",
        "claude-sonnet-4-5",
        None,
        "ANTHROPIC_API_KEY",
    ),
    "openai": ("OpenAI", "openai", "gpt-4.1-mini", None, "OPENAI_API_KEY"),
    "openrouter": (
        "OpenRouter",
        "openai",
        "anthropic/claude-sonnet-4.5",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
    ),
    "ollama": ("Ollama on this machine", "openai", "llama3.1", "http://127.0.0.1:11434/v1", None),
    "other": (
        "another OpenAI-compatible server (vLLM, llama.cpp, LiteLLM …)",
        "openai",
        "",
        None,
        "OPENAI_API_KEY",
    ),
}
OLLAMA_CONTEXT = 32_768
DEFAULT_WEB_PORT = 8765
NON_INTERACTIVE = "gateway init --yes --provider … --model …"
Check = Callable[[str], object]  # raises ValueError saying what is wrong with an answer


class InitStopped(Exception):
    """The questions ended without a config (stdin closed, or the user said no)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "init", help="set up: model, platforms, access; writes a commented config.yaml"
    )
    p.add_argument(
        "--yes", action="store_true", help="ask nothing: take the answers from the flags below"
    )
    p.add_argument(
        "--force", action="store_true", help="replace an existing config.yaml (kept as a .bak copy)"
    )
    p.add_argument("--provider", choices=["anthropic", "openai"], help="the model's wire protocol")
    p.add_argument("--model", help="the model's name as the provider spells it")
    p.add_argument("--base-url", help="the API endpoint (OpenAI-compatible servers: ending in /v1)")
    p.add_argument(
        "--api-key-env", help="the environment variable holding the key (default by provider)"
    )
    p.add_argument(
        "--telegram-token-env", metavar="VAR", help="turn Telegram on; VAR holds the bot token"
    )
    p.add_argument(
        "--discord-token-env", metavar="VAR", help="turn Discord on; VAR holds the bot token"
    )
    p.add_argument(
        "--slack-bot-token-env", metavar="VAR", help="turn Slack on; VAR holds the xoxb- token"
    )
    p.add_argument(
        "--slack-app-token-env", metavar="VAR", help="with --slack-bot-token-env: the xapp- token"
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="PLATFORM:ID",
        help="a user who may talk to the agent (repeat it), e.g. telegram:123456789",
    )
    p.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="PLATFORM:ID",
        help="a user who may approve pairing codes in the chat (repeat it)",
    )
    p.add_argument(
        "--no-pairing", action="store_true", help="strangers get no answer (no pairing codes)"
    )
    p.add_argument(
        "--web-port",
        type=int,
        help=f"the web chat's port (default ${context.PORT_VAR}, else {DEFAULT_WEB_PORT} or "
        "the next free one when another program holds it now)",
    )
    p.add_argument(
        "--no-model-test", action="store_true", help="do not send the one-line test request"
    )
    p.set_defaults(func=cmd_init)


def cmd_init(
    args: argparse.Namespace, *, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> int:
    out = stdout or sys.stdout
    env = environ()
    home = home_of(args).absolute()
    path = home / "config.yaml"
    if path.exists() and not args.force:
        # asked nothing yet: the README's `gateway init && gateway run` runs on
        print(
            f"{path} already exists; not touching it. `gateway config check` validates it; to "
            "start over, run `gateway init --force` (the old file is kept beside it as a .bak "
            "copy).",
            file=sys.stderr,
        )
        # --yes: the flags were not applied, which a script must see
        return EXIT_ERROR if args.yes else EXIT_OK
    try:
        if args.yes:
            starter, service = from_flags(args), False
        else:
            tester = None if args.no_model_test else (lambda chosen: model_test(chosen, env, home))
            starter, service = Questions(stdin or sys.stdin, out, env, tester).run(home)
        wanted = args.web_port if args.web_port is not None else context.port_from_env(env)
        starter = replace(starter, web_port=web_port(wanted, home, out))
    except (ValueError, InitStopped) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.yes and not args.no_model_test:
        if starter.api_key_env and not env.get(starter.api_key_env):
            print(
                f"skip model     {starter.api_key_env} is not set here, so no test request",
                file=out,
            )
        else:
            print(model_test(starter, env, home), file=out)
    write_config(home, render(starter), force=args.force, out=out)
    installed = install_user_service(home) if service else EXIT_OK
    home_flag = f" --home {args.home}" if args.home else ""
    print(next_steps(starter, env, path, service=service, home_flag=home_flag), file=out)
    return installed


# -------------------------------------------------------------------------------------------- --yes
def from_flags(args: argparse.Namespace) -> Starter:
    if not args.provider or not args.model:
        raise ValueError("--yes needs --provider (anthropic or openai) and --model NAME")
    if bool(args.slack_bot_token_env) != bool(args.slack_app_token_env):
        raise ValueError(
            "Slack needs both --slack-bot-token-env and --slack-app-token-env (Socket Mode)"
        )
    allowed = _by_platform(args.allow, "--allow")
    platforms = []
    for name, envs in (
        ("telegram", (args.telegram_token_env,)),
        ("discord", (args.discord_token_env,)),
        ("slack", (args.slack_bot_token_env, args.slack_app_token_env)),
    ):
        if envs[0]:
            platforms.append(
                PlatformChoice(
                    name, tuple(check_env_name(v) for v in envs), tuple(allowed.pop(name, ()))
                )
            )
    if allowed:
        raise ValueError(
            f"--allow names {', '.join(sorted(allowed))}, which is not turned on (add its "
            "--…-token-env)"
        )
    base_url = check_base_url(args.base_url, flag="--base-url")
    key_env = (
        check_env_name(args.api_key_env)
        if args.api_key_env
        else _default_key_env(args.provider, args.base_url)
    )
    _by_platform(args.admin, "--admin")
    return Starter(
        provider=args.provider,
        model=args.model,
        base_url=base_url,
        api_key_env=key_env,
        platforms=tuple(platforms),
        pairing=not args.no_pairing,
        admins=tuple(args.admin),
    )


def _default_key_env(provider: str, base_url: str | None) -> str | None:
    if base_url and _is_local(base_url):
        return None
    return "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"


def _is_local(url: str) -> bool:
    return "//127.0.0.1" in url or "//localhost" in url or "//[::1]" in url


def _by_platform(entries: Sequence[str], flag: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for entry in entries:
        platform, _, user = entry.partition(":")
        if platform not in CHAT_PLATFORMS or not user.strip():
            raise ValueError(
                f"{flag} {entry!r}: expected PLATFORM:ID with "
                f"PLATFORM one of {', '.join(CHAT_PLATFORMS)}"
            )
        try:
            found.setdefault(platform, []).append(check_user_id(platform, user.strip()))
        except ValueError as exc:
            raise ValueError(f"{flag} {entry!r}: {exc}") from None
    return found


def web_port(
    wanted: int | None, home: Path, out: TextIO, *, in_use: Callable[[int], bool] | None = None
) -> int:
    """--web-port as given (with a note when something listens there now); else 8765, or the first
    free one after it when another program (a second gateway?) holds 8765 now, so `gateway run` can
    start. This home's own running daemon is the likely holder: then 8765 stays."""
    from gateway.ops.home import held as home_held

    busy = in_use or context.port_in_use
    if wanted is not None:
        if not 0 < wanted < 65536:
            raise ValueError(f"--web-port {wanted}: expected 1–65535")
        if busy(wanted):
            print(
                f"note: port {wanted} is in use on this machine now; `gateway run` needs it free",
                file=out,
            )
        return wanted
    if not busy(DEFAULT_WEB_PORT) or home_held(home):
        return DEFAULT_WEB_PORT
    after = range(DEFAULT_WEB_PORT + 1, DEFAULT_WEB_PORT + 100)
    port = next((p for p in after if not busy(p)), DEFAULT_WEB_PORT)
    if port != DEFAULT_WEB_PORT:
        print(
            f"port {DEFAULT_WEB_PORT} is in use on this machine (another gateway?), so the web "
            f"chat gets port {port} (web.port)",
            file=out,
        )
    return port


# ------------------------------------------------------------------------------------ the questions
class Questions:
    """The interactive set-up: one question per line, the default in [brackets], Enter takes it."""

    def __init__(
        self,
        stdin: TextIO,
        stdout: TextIO,
        env: Mapping[str, str],
        tester: Callable[[Starter], str] | None = None,
    ) -> None:
        self.stdin = stdin
        self.out = stdout
        self.env = env
        self.tester = tester

    def run(self, home: Path) -> tuple[Starter, bool]:
        self.say(
            f"agent-gateway set-up for {home}. The answer "
            "in [brackets] is the default: Enter takes it.\n"
            "Nothing secret is asked: keys and tokens stay "
            "in environment variables, only their names are "
            "written.\n"
        )
        starter = self.tried_model()
        platforms = tuple(self.platform(name) for name in self.platform_names())
        pairing = self.yes(
            "Let strangers who write to the bot ask for access with a pairing code?", True
        )
        admins = tuple(
            self.ask_list(
                "Admins who may approve codes from the chat (platform:id, comma-separated)",
                check=lambda entry: _by_platform([entry], "admin"),
            )
            if pairing and platforms
            else ()
        )
        service = self.yes(
            "Install and start a systemd user service now (gateway install-service --user "
            "--enable)?",
            False,
        )
        return replace(starter, platforms=platforms, pairing=pairing, admins=admins), service

    def tried_model(self) -> Starter:
        """The model questions, then one test request; a
        model that fails may be kept or chosen again."""
        while True:
            starter = self.model()
            if self.tester is None or not self.wants_test(starter):
                return starter
            line = self.tester(starter)
            self.say(line)
            if line.startswith("ok") or self.yes("Keep this model anyway?", False):
                return starter

    def model(self) -> Starter:
        keys = list(PRESETS)
        detected = next(
            (k for k in keys if PRESETS[k][4] and self.env.get(PRESETS[k][4] or "")), "anthropic"
        )
        self.say("Model provider:")
        for i, key in enumerate(keys, 1):
            self.say(f"  {i}) {PRESETS[key][0]}")
        choice = self.ask(
            "Choose",
            str(keys.index(detected) + 1),
            allowed=[str(i) for i in range(1, len(keys) + 1)],
        )
        _label, provider, name, base_url, key_env = PRESETS[keys[int(choice) - 1]]
        if keys[int(choice) - 1] == "ollama":
            from gateway.llm.factory import ollama_model

            name = ollama_model() or name
        if keys[int(choice) - 1] == "other":
            base_url = self.ask(
                "Its base URL (ending in /v1)", "http://127.0.0.1:8000/v1", check=check_base_url
            )
        name = self.ask("Model name", name or None)
        key_env = self.key_variable(keys[int(choice) - 1], base_url, key_env)
        return Starter(
            provider=provider,  # type: ignore[arg-type]
            model=name,
            base_url=base_url,
            api_key_env=key_env,
            context_window=OLLAMA_CONTEXT if keys[int(choice) - 1] == "ollama" else None,
        )

    def key_variable(self, preset: str, base_url: str | None, default: str | None) -> str | None:
        """The variable holding the key. A server on this machine may need none (Ollama never does),
        but a local vLLM, llama.cpp or LiteLLM started with a key refuses every request without it,
        so it is asked, optional."""
        if base_url and _is_local(base_url):
            if preset != "other":
                return None
            return (
                self.ask(
                    "Environment variable that holds its API key, if it needs one (Enter: none)",
                    required=False,
                    check=check_env_name,
                )
                or None
            )
        if default is None:
            return None
        return self.ask(
            "Environment variable that holds the API key", default, check=check_env_name
        )

    def wants_test(self, starter: Starter) -> bool:
        if starter.api_key_env and not self.env.get(starter.api_key_env):
            self.say(
                f"{starter.api_key_env} is not set in this shell, so no test request now; export "
                "it before `gateway run` (`gateway doctor` tries the model any time)."
            )
            return False
        return self.yes("Send a one-line test request to the model now?", True)

    def platform_names(self) -> list[str]:
        while True:
            names = [
                n.lower()
                for n in self.ask_list(
                    "Chat platforms besides the web chat (comma-separated: "
                    "telegram, discord, slack)"
                )
            ]
            unknown = [n for n in names if n not in CHAT_PLATFORMS]
            if not unknown:
                return list(dict.fromkeys(names))
            self.say(f"  not a platform: {', '.join(unknown)}")

    def platform(self, name: str) -> PlatformChoice:
        title = name.capitalize()
        kinds = (
            ("bot token (xoxb-…)", "app-level token (xapp-…)")
            if name == "slack"
            else ("bot token",)
        )
        envs = tuple(
            self.ask(
                f"{title}: environment variable with the {kind}", default, check=check_env_name
            )
            for kind, default in zip(kinds, TOKEN_VARS[name], strict=True)
        )
        users = self.ask_list(
            f"{title}: user ids allowed to talk to the agent (comma-separated; you first)",
            check=lambda user: check_user_id(name, user),
        )
        return PlatformChoice(name, envs, tuple(users))

    # ------------------------------------------------------------------ one line at a time
    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def ask(
        self,
        question: str,
        default: str | None = None,
        *,
        allowed: Sequence[str] | None = None,
        check: Check | None = None,
        required: bool = True,
    ) -> str:
        for _ in range(5):
            self.out.write(f"{question}{f' [{default}]' if default else ''}: ")
            self.out.flush()
            line = self.stdin.readline()
            if not line:
                raise InitStopped(f"no answer (input ended); `{NON_INTERACTIVE}` asks nothing")
            answer = line.strip() or (default or "")
            problem = _problem(answer, allowed, check, required)
            if problem is None:
                return answer
            self.say(f"  {problem}")
        raise InitStopped(f"no usable answer to {question!r}")

    def ask_list(self, question: str, *, check: Check | None = None) -> list[str]:
        """Comma-separated answers; `check` is asked of
        each, and one bad part asks the whole line again."""

        def each(answer: str) -> None:
            for part in _parts(answer):
                if check is not None:
                    check(part)

        return _parts(self.ask(question, required=False, check=each))

    def yes(self, question: str, default: bool) -> bool:
        answer = self.ask(
            f"{question} {'[Y/n]' if default else '[y/N]'}", required=False, check=_yes_no
        )
        return default if not answer else answer.lower().startswith("y")


def _parts(answer: str) -> list[str]:
    return [part.strip() for part in answer.split(",") if part.strip()]


def _yes_no(answer: str) -> None:
    if answer.lower() not in ("", "y", "yes", "n", "no"):
        raise ValueError("expected y or n")


def _problem(
    answer: str, allowed: Sequence[str] | None, check: Check | None, required: bool
) -> str | None:
    if not answer:
        return "an answer is needed" if required else None
    if allowed is not None and answer not in allowed:
        return f"expected one of: {', '.join(allowed)}"
    if check is not None:
        try:
            check(answer)
        except ValueError as exc:
            return str(exc)
    return None


# ----------------------------------------------------------------------------------------- doing it
def model_test(starter: Starter, env: Mapping[str, str], home: Path) -> str:
    """One short request to the model just chosen, as `gateway doctor` sends it; the check line."""
    import asyncio

    from gateway.config.settings import Config
    from gateway.config.yamlload import load_dataclass, parse_yaml_text
    from gateway.ops.doctor import Doctor

    text = render(replace(starter, platforms=()))
    config: Config = load_dataclass(
        Config, parse_yaml_text(text, "config.yaml"), file="config.yaml", env=env
    )
    check = asyncio.run(Doctor(home, env).check_model(replace(config, home=home)))
    return check.line()


def write_config(home: Path, text: str, *, force: bool, out: TextIO) -> None:
    """Atomically, 0600, in a 0700 home with its folders;
    an existing file is kept as config.yaml.<time>.bak."""
    _check_loads(home, text)
    for folder in (home, home / "memories", home / "skills"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / "config.yaml"
    tmp = home / f".config.yaml.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    if force and path.exists():
        backup = path.with_name(f"config.yaml.{datetime.now().strftime('%Y%m%dT%H%M%S')}.bak")
        os.link(path, backup)
        print(f"kept the old config as {backup}", file=out)
    os.replace(tmp, path)
    print(f"wrote {path}", file=out)


def _check_loads(home: Path, text: str) -> None:
    """The file must load as `gateway run` will read it
    (each ${VAR} stands in for its future value)."""
    from gateway.config.settings import Config
    from gateway.config.yamlload import load_dataclass, parse_yaml_text

    filler = {name: "set-at-start-up" for name in _env_refs(text)}
    try:
        load_dataclass(
            Config,
            parse_yaml_text(text, str(home / "config.yaml")),
            file=str(home / "config.yaml"),
            env=filler,
        )
    except ConfigError as exc:  # a bug here, never the user's: the answers were checked one by one
        raise ValueError(f"the config init would write does not load:\n{exc}") from None


def _env_refs(text: str) -> list[str]:
    import re

    return re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", text)


def install_user_service(home: Path) -> int:
    """`gateway install-service --user --enable` for this home: the unit, its env file, enable
    --now, linger."""
    from gateway.cli.service import cmd_install_service

    return cmd_install_service(
        argparse.Namespace(
            home=str(home), system=False, user=True, dry_run=False, enable=True, unit_dir=None
        )
    )


def next_steps(
    starter: Starter, env: Mapping[str, str], path: Path, *, service: bool, home_flag: str
) -> str:
    """What to do now, in order; `home_flag` repeats a --home
    the user gave so each command works as printed."""
    missing = [name for name in starter.env_names() if not env.get(name)]
    steps = []
    if missing:
        where = (
            (
                "in ~/.config/agent-gateway/env (NAME=value lines), then `systemctl --user restart "
                "agent-gateway`"
            )
            if service
            else (
                "in the shell that runs the gateway (export NAME=value), or in "
                "the service's env file once it runs as one"
            )
        )
        steps.append(f"set {', '.join(missing)} {where}")
    steps.append(
        f"`gateway{home_flag} config check` validates the file; `gateway{home_flag} doctor` tries "
        "the tokens and the model"
    )
    if not service:
        steps.append(
            f"`gateway{home_flag} run` starts it and prints the web chat's login link; /dashboard "
            "shows how it runs"
        )
    steps.append(f"edit {path} for everything else (docs/configuration.md lists every key)")
    return "\nNext steps:\n" + "\n".join(f"  {i}. {step}" for i, step in enumerate(steps, 1))
