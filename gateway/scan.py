"""Threat scan for text that will be trusted as instructions: context files, SOUL.md, memory entries, skills.

Deterministic regexes, not a model: the same text always gets the same verdict. It only reports;
callers decide whether to block. Findings never contain a secret's value.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str  # "invisible", "injection", "secret", "exfiltration"
    detail: str  # short human text, never the secret itself

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"

    @property
    def label(self) -> str:
        """`kind: family` without the matched phrase, for text the model will read."""
        return f"{self.kind}: {self.detail.split(': ', 1)[0]}"


# Zero-width and bidi controls: they hide or reorder text so a human reviewer sees something else.
INVISIBLE_CHARS: frozenset[str] = frozenset(
    [chr(c) for c in range(0x200B, 0x200E)]
    + ["\u2060"]
    + [chr(c) for c in range(0x2062, 0x2065)]
    + ["\ufeff"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)

_FLAGS = re.IGNORECASE
_S = r"\s+"  # words may be separated by any run of whitespace, newlines included
_ARTICLES = r"(?:(?:all|any|of|the|your|my|these|those|every|everything)\s+)*"
# An env var whose name says it holds a secret: $OPENAI_API_KEY, ${GITHUB_TOKEN}, $env:DB_PASSWORD.
_SECRET_VAR = r"(?:\w*_)?(?:api_?key|key|token|secret|pass|passw(?:or)?d|credentials?|auth(?:_token)?)(?:_\w*)?\b"
# Paths that hold credentials (.env.example is not one).
_SECRET_FILE = (r"(?:\.env(?![\w.-])|~/\.ssh\b|\.ssh/|\bid_(?:rsa|ed25519|ecdsa|dsa)\b|\.aws/|\.netrc\b|\.pgpass\b"
                r"|\.git-credentials\b|\bcredentials\.json\b|/credentials\b|\.docker/config\.json)")

# (kind, label, pattern). Order is the report order. Patterns run on normalized text (see _normalize).
_INJECTION: tuple[tuple[str, str, str], ...] = (
    ("injection", "ignore previous instructions",
     (rf"\b(?:ignore|disregard|forget|skip|override)\s+{_ARTICLES}"
     rf"(?:previous|prior|above|earlier|preceding|former|original|initial|system|developer)\s+"
     r"(?:instructions?|rules|directions|directives|guidelines|prompts?|messages|context|commands)")),
    ("injection", "ignore your instructions",
     (rf"\b(?:ignore|disregard|forget)\s+{_ARTICLES}(?:your|its|the\s+assistant'?s)\s+"
     r"(?:instructions|rules|guidelines|programming|system\s+prompt|safety)")),
    ("injection", "ignore everything above",
     r"\b(?:ignore|disregard|forget)\s+(?:everything|all|anything)\s+(?:above|before\s+this|said\s+before)"),
    ("injection", "hide from the user",
     r"\b(?:do\s+not|don'?t|never|must\s+not)\s+(?:tell|inform)\s+the\s+user"),
    ("injection", "hide from the user",
     r"\b(?:do\s+not|don'?t|never)\s+(?:let\s+the\s+user\s+know|(?:reveal|mention)\s+(?:this|these|it|that)\s+to\s+the\s+user)"),
    ("injection", "hide from the user",
     (r"\b(?:conceal\s+\S+(?:\s+\S+)?|keep\s+(?:this|it|that|these|them)\s+(?:a\s+)?secret"
     r"|hide\s+(?:this|these)\s+(?:instructions?|messages?|actions?|steps?|commands?|requests?|text))\s+from\s+the\s+user")),
    ("injection", "hide from the user",
     r"\bwithout\s+(?:telling|informing)\s+the\s+user|\bthe\s+user\s+(?:must|should)\s+(?:not|never)\s+(?:know|find\s+out|learn|be\s+told)\b"),
    ("injection", "system prompt override",
     (r"\b(?:system\s+prompt\s+override|new\s+system\s+prompt|override\s+(?:your|the|all|any)\s+"
     r"(?:previous\s+|prior\s+|system\s+)?(?:instructions|system\s+prompt|rules|guidelines))")),
    ("injection", "system prompt override",
     r"\byour\s+(?:new|real|actual|true)\s+(?:instructions|system\s+prompt|rules|purpose)\s+(?:are|is)\b"),
    ("injection", "system prompt override",
     (r"\byou\s+are\s+now\s+(?:an?\b|my\b|no\s+longer\b|free\b|unrestricted|unfiltered|uncensored|jailbroken"
     r"|dan\b|in\s+(?:developer|god|jailbreak|dan|unrestricted)\s+mode)")),
    ("injection", "role-play jailbreak",
     r"\bdo\s+anything\s+now\b|\bjailbroken\b|\bjailbreak\s+mode\b"),
    ("injection", "role-play jailbreak",
     r"\b(?:act|behave|respond|operate)\s+(?:now\s+)?(?:in|as\s+if\s+in)\s+(?:developer|god|dan|unrestricted)\s+mode"),
    ("injection", "role-play jailbreak",
     (r"\b(?:pretend|imagine|act\s+as\s+if)\s+(?:that\s+)?you\s+(?:are|were|have)\s+(?:no|not\s+bound\s+by|free\s+(?:of|from))"
     r"\s+(?:\w+\s+){0,2}(?:restrictions|rules|limits|limitations|guidelines|filters|policies)")),
    ("injection", "role-play jailbreak",
     r"\b(?:act|behave|respond|roleplay|role-play)\s+as\s+(?:an?\s+)?(?:unrestricted|unfiltered|uncensored|jailbroken)\b"),
    ("injection", "fake chat-role marker",
     r"<\|(?:im_start|im_end|system|endoftext)\|>|\[/?INST\]|<<SYS>>"),
    ("exfiltration", "command sends secrets",
     (r"\b(?:curl|wget|invoke-webrequest|invoke-restmethod|iwr|irm|nc|netcat)\b[^\n]*?"
     rf"(?:\$\{{?{_SECRET_VAR}|\$env:{_SECRET_VAR}|\$\(\s*(?:cat|env|printenv)\b|`\s*(?:cat|env|printenv)\b"
     r"|\bprintenv\b|\bos\.environ\b)")),
    ("exfiltration", "reads secret files",
     rf"\b(?:curl|wget|scp|rsync|nc|netcat)\b[^\n]*?{_SECRET_FILE}"),
    ("exfiltration", "reads secret files",
     r"\b(?:cat|less|more|head|tail|get-content|gc|type|base64|xxd|strings)\s+(?:-{1,2}[\w-]+\s+)*[\"']?\S*?"
     + _SECRET_FILE),
    ("exfiltration", "reads secret files",
     rf"\b(?:read|print|dump|output|show|display|open)\s+(?:out\s+)?{_ARTICLES}(?:contents?\s+of\s+)?{_ARTICLES}"
     + _SECRET_FILE),
    ("exfiltration", "reveals secrets",
     (rf"\b(?:reveal|leak|send|upload|exfil\w*|paste)\s+{_ARTICLES}"
     r"(?:private\s+keys?|api\s+keys?|secrets|passwords|credentials|tokens|environment\s+variables|ssh\s+keys?)\b")),
    ("exfiltration", "sends private data to a URL",
     (r"\b(?:send|post|upload|forward|transmit|leak|beacon|submit|e-?mail)\b[^\n]{0,80}?"
     r"\b(?:conversation|chat\s+log|history|memory|memories|secrets?|keys?|tokens?|passwords?|credentials"
     r"|env(?:ironment)?|personal|private|user\s+data|system\s+prompt|messages)\b[^\n]{0,80}?"
     r"\bto\b[^\n]{0,40}?(?:https?|ftp|wss?)://")),
    ("exfiltration", "exfiltrate",
     r"\bexfiltrat(?:e|es|ed|ing|ion)\b"),
    ("exfiltration", "markdown image with templated query",
     r"!\[[^\]\n]*\]\(\s*https?://[^)\s]*[?&][^)\s]*=\s*(?:\{|\$|<|%7b)"),
)

_STRICT: tuple[tuple[str, str, str], ...] = (
    ("exfiltration", "instruction to send data to a URL",
     (r"\b(?:send|post|upload|forward|transmit|submit|push|e-?mail|report|beacon|ping|fetch|webhook)\b"
     r"[^\n]{0,120}?\b(?:to|at|into)\b[^\n]{0,40}?(?:(?:https?|ftp|wss?)://|www\.)")),
)

# Secret shapes run on the raw (NFKC) text: formatting characters are part of a token's alphabet.
_SECRETS: tuple[tuple[str, str, str], ...] = (
    ("secret", "Anthropic API key (sk-ant-…)", r"\bsk-ant-[A-Za-z0-9_-]{20,}"),
    ("secret", "OpenAI-style API key (sk-…)", r"\bsk-(?!ant-)(?=[A-Za-z0-9_-]*\d)(?:proj-|live-|test-|svcacct-)?[A-Za-z0-9_-]{20,}"),
    ("secret", "Stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("secret", "Slack token (xox…-/xapp-)", r"\bxox[abeoprs]-[A-Za-z0-9-]{10,}|\bxapp-[A-Za-z0-9-]{10,}"),
    ("secret", "GitHub token", r"\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{22,}"),
    ("secret", "AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("secret", "Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("secret", "Telegram bot token", r"(?<![\w:-])\d{5,}:[A-Za-z0-9_-]{35}(?![\w-])"),
    ("secret", "Discord bot token", r"\b[MN][A-Za-z\d_-]{23,27}\.[\w-]{6}\.[\w-]{27,}"),
    ("secret", "private key block", r"-----BEGIN[A-Z ]*PRIVATE KEY-----"),
    ("secret", "password or key assignment",
     (r"\b(?:password|passwd|pwd|passphrase|secret|api[_-]?key|access[_-]?key|auth[_-]?token|token)"
     r"\s*[:=]\s*[\"']?(?![<$*{\[(])[^\s\"'<>]{4,}")),
)


def _compile(table: tuple[tuple[str, str, str], ...], flags: int) -> tuple[tuple[str, str, re.Pattern[str]], ...]:
    return tuple((kind, label, re.compile(p, flags)) for kind, label, p in table)


_INJECTION_RE = _compile(_INJECTION, _FLAGS)
_STRICT_RE = _compile(_STRICT, _FLAGS)
# Key shapes are case-sensitive (AKIA, sk-); the assignment pattern is not.
_SECRETS_RE = tuple(
    (kind, label, re.compile(p, _FLAGS if label == "password or key assignment" else 0))
    for kind, label, p in _SECRETS
)

# Markdown emphasis and quote characters an attacker can sprinkle inside a phrase to break a match.
_DECORATION = re.compile(r"[*`\"\u201c\u201d\u2018\u2019]")


def _normalize(text: str) -> str:
    """Fold look-alikes (full-width letters, ligatures), drop format chars and decoration for phrase matching."""
    folded = unicodedata.normalize("NFKC", text)
    folded = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return _DECORATION.sub("", folded.replace("\u2019", "'"))


def _invisible(text: str) -> list[Finding]:
    found: list[Finding] = []
    seen: set[str] = set()
    for i, ch in enumerate(text):
        if ch in INVISIBLE_CHARS and ch not in seen:
            seen.add(ch)
            name = unicodedata.name(ch, "FORMAT CHARACTER")
            found.append(Finding("invisible", f"U+{ord(ch):04X} {name} at {i}"))
    return found


def _phrase(match: re.Match[str]) -> str:
    words = " ".join(match.group(0).split()).lower()
    return words if len(words) <= 60 else words[:57] + "..."


def scan_text(text: str, *, strict: bool = False) -> list[Finding]:
    """Everything suspicious in `text`, in a stable order; empty means clean.

    strict=False is for files a user placed on purpose (context files, SOUL.md); strict=True is for
    text the model itself writes and later trusts (memory entries, skills), which must also carry no
    secrets and no instruction to send anything to a URL.
    """
    findings = _invisible(text)
    normalized = _normalize(text)
    tables = _INJECTION_RE + _STRICT_RE if strict else _INJECTION_RE
    for kind, label, pattern in tables:
        m = pattern.search(normalized)
        if m:
            findings.append(Finding(kind, f"{label}: {_phrase(m)!r}"))
    if strict:
        raw = unicodedata.normalize("NFKC", text)
        for kind, label, pattern in _SECRETS_RE:
            if pattern.search(raw):
                findings.append(Finding(kind, label))
    return _dedupe(findings)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: set[str] = set()
    out: list[Finding] = []
    for f in findings:
        key = f.kind + f.detail.split(":", 1)[0]
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def describe(findings: list[Finding]) -> str:
    """One line for a log or a [BLOCKED: …] notice: the first finding, plus how many more."""
    if not findings:
        return ""
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"{findings[0]}{more}"
