"""Tool search: a session's deferred tools, found by what they do and called by their real name.

When a session's MCP tools would take too much of the context window (tools.search, policy.py),
their schemas stay out of the tools array. The array holds the core tools plus `tool_search` and
`tool_call`, and it is the same bytes for the whole session (the provider's cached prefix).
`tool_search` ranks the session's frozen catalog (BM25 over names, descriptions, parameter names and
descriptions) and answers the best matches with their full schemas, which travel in the
conversation. `tool_call` names one with its arguments; the agent loop runs it by its real name
through the same path as a direct call (gateway/agent/loop.py, `Agent.dispatch`).
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gateway.agent.tools.registry import ToolResult, ToolSpec
from gateway.errors import ToolError
from gateway.mcp.names import PREFIX
from gateway.mcp.vet import vet_tool
from gateway.scan import mark_untrusted

SEARCH = "tool_search"
CALL = "tool_call"
BRIDGE = (SEARCH, CALL)
DEFAULT_RESULTS = 5
MAX_RESULTS = 10
MAX_QUERY_CHARS = 500
MAX_ANSWER_CHARS = 24_000  # one search result: about 6,000 tokens of schemas at most
MAX_BRIEF_CHARS = 1_000  # a description shown without its schema
K1, B = 1.2, 0.75
WEIGHTS = {"name": 3, "params": 2, "text": 1}  # a word of a name says more than one of prose
STOPWORDS = frozenset(
    (
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "get",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "some",
        "that",
        "the",
        "this",
        "to",
        "tool",
        "tools",
        "use",
        "using",
        "want",
        "what",
        "which",
        "with",
        "you",
        "your",
    )
)

SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What you want to do, in a few words"},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_RESULTS,
            "description": f"How many tools to return (default {DEFAULT_RESULTS})",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
CALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "description": "The tool's full name, as tool_search returned it",
        },
        "arguments": {
            "type": "object",
            "description": "Its arguments, as its parameters schema asks",
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}


def bridge_specs(deferred: Sequence[ToolSpec]) -> tuple[ToolSpec, ToolSpec]:
    """The two tools that stand for `deferred` in the tools array. Their text depends only on which
    servers the deferred tools come from: the same for every session with the same servers."""
    servers = sorted({s.server for s in deferred if s.server})
    server = "server" if len(servers) == 1 else "servers"
    where = f"the MCP {server} {', '.join(servers)}" if servers else "other sources"
    search = (
        f"Find tools of {where} that are not listed here: describe what you want to do in "
        "a few words. Returns the best matches with their full names, descriptions and JSON "
        f"schemas. Call one with {CALL}."
    )
    call = f"Call a tool that {SEARCH} found: its full name and its arguments, as its schema asks."
    return ToolSpec(SEARCH, search, SEARCH_PARAMETERS), ToolSpec(CALL, call, CALL_PARAMETERS)


@dataclass(frozen=True, slots=True)
class Bridged:
    """A tool_call unwrapped: the real tool and the arguments the model gave it."""

    name: str
    arguments: dict[str, Any]


class DeferredCatalog:
    """The tools a session may find and call but is not shown, frozen with it
    (gateway/prompt/session_tools.py). Sessions with the same catalog share one; its index is built
    on the first search."""

    def __init__(self, entries: Sequence[ToolSpec]) -> None:
        self.entries = tuple(entries)
        self._by_name = {e.name: e for e in self.entries}
        self._exact = {**{_own_name(e): e for e in self.entries}, **self._by_name}
        self._index: Bm25 | None = None
        self._problems: dict[str, str | None] = {}  # name → why today's scan withholds it

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, name: str) -> ToolSpec | None:
        return self._by_name.get(name)

    @property
    def ready(self) -> bool:
        return self._index is not None

    def prepare(self) -> None:
        """Build the search index (once; tens of milliseconds for hundreds of tools, so the agent
        loop runs it in a thread)."""
        if self._index is None:
            self._index = Bm25([_document(e) for e in self.entries])

    def search(self, query: str, limit: int = DEFAULT_RESULTS) -> list[ToolSpec]:
        """The best matches for `query`, best first; a tool's exact name (or its own name on its
        server) comes first."""
        query = query[:MAX_QUERY_CHARS]
        exact = self._exact.get(query.strip())
        self.prepare()
        assert self._index is not None
        ranked = [self.entries[i] for i in self._index.rank(tokens(query), limit)]
        if exact is None:
            return ranked
        return [exact, *(e for e in ranked if e.name != exact.name)][:limit]

    def answer(self, arguments: str | Mapping[str, Any] | None) -> ToolResult:
        """tool_search's result: the matches as JSON with their full schemas, as many as fit in
        MAX_ANSWER_CHARS, best first; the others by name and a short description only. Their
        text is the servers', not the owner's: scanned and framed as untrusted, like an MCP
        tool's result."""
        try:
            args = _object(arguments, "arguments")
            query = args.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ToolError("'query' is required: what you want to do, in a few words")
            limit = args.get("limit", DEFAULT_RESULTS)
            if not isinstance(limit, int) or isinstance(limit, bool):
                limit = DEFAULT_RESULTS
        except ToolError as exc:
            return ToolResult(f"Invalid arguments for {SEARCH}: {exc}", is_error=True)
        found = self.search(query, max(1, min(limit, MAX_RESULTS)))
        withheld = [e.name for e in found if self._problem(e) is not None]
        shown, left_out, too_long = _fit([e for e in found if e.name not in withheld])
        notes = []
        if not found:
            notes.append(f"No tool matches. Try other words; {len(self)} tools can be searched.")
        if left_out:
            notes.append(
                f"Some schemas were left out for length: {SEARCH} with a tool's full "
                "name returns its schema."
            )
        if too_long:
            notes.append(
                f"The schema of {', '.join(too_long)} is too long to show here: call "
                f"it with {CALL}, and the errors name what its arguments lack."
            )
        if withheld:
            notes.append(
                f"Withheld, as their text looks like a prompt injection: {', '.join(withheld)}."
            )
        out: dict[str, Any] = {"tools": shown}
        if notes:
            out["note"] = " ".join(notes)
        if not shown:
            return ToolResult(_json(out))
        servers = sorted({s.server for s in found if s.server})
        server = "server" if len(servers) == 1 else "servers"
        source = f"the MCP {server} {', '.join(servers)}" if servers else "other sources"
        return ToolResult(mark_untrusted(_json(out), source=f"tool descriptions of {source}"))

    def _problem(self, entry: ToolSpec) -> str | None:
        """Why today's scan withholds a tool of the frozen catalog (it was vetted when the session
        started, maybe by an older scan), or None."""
        if entry.name not in self._problems:
            self._problems[entry.name] = vet_tool(entry.description, entry.parameters).problem
        return self._problems[entry.name]

    def unwrap(
        self, arguments: str | Mapping[str, Any] | None, shown: Mapping[str, ToolSpec]
    ) -> Bridged | ToolResult:
        """The tool a tool_call names (deferred, or one of `shown`, the tools sent), or the error
        the model gets (an unknown name, arguments that are not an object)."""
        try:
            args = _object(arguments, "arguments")
            name = args.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ToolError(
                    f"'name' is required: the tool's full name, as {SEARCH} returned it"
                )
            inner = _object(args.get("arguments"), "'arguments'")
        except ToolError as exc:
            return ToolResult(f"Invalid arguments for {CALL}: {exc}", is_error=True)
        name = name.strip()
        if name in BRIDGE:
            return ToolResult(f"{CALL} runs the tools {SEARCH} finds, not {name}.", is_error=True)
        if name not in self._by_name and name not in shown:
            near = ", ".join(e.name for e in self.search(name.replace(PREFIX, " "), 3))
            hint = f" Closest names: {near}." if near else ""
            text = f"Unknown tool {name!r}: use {SEARCH} to find the tool and its full name.{hint}"
            return ToolResult(text, is_error=True)
        return Bridged(name, inner)


@dataclass(frozen=True, slots=True)
class CatalogTool(ToolSpec):
    """tool_search or tool_call as a session holds it: bound to that session's frozen catalog."""

    catalog: DeferredCatalog | None = field(default=None, compare=False, repr=False)


def bind(specs: Sequence[ToolSpec], catalog: DeferredCatalog) -> tuple[ToolSpec, ...]:
    """`specs` with tool_search and tool_call bound to `catalog` (what is sent stays the same)."""
    return tuple(
        CatalogTool(s.name, s.description, s.parameters, s.annotations, s.server, catalog)
        if s.name in BRIDGE
        else s
        for s in specs
    )


def catalog_of(specs: Sequence[ToolSpec]) -> DeferredCatalog | None:
    return next((s.catalog for s in specs if isinstance(s, CatalogTool)), None)


# ---- ranking ------------------------------------------------------------------------------------

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case word stems of `text`; snake_case, kebab-case and camelCase split into words."""
    words = _WORD.findall(_CAMEL.sub(r"\1 \2", text).lower())
    stems = _stems
    if len(stems) > MAX_STEMS:
        stems.clear()
    return [stems.get(w) or stems.setdefault(w, _stem(w)) for w in words if w not in STOPWORDS]


_stems: dict[str, str] = {}  # word → stem: a catalog's words repeat, and so do queries'
MAX_STEMS = 50_000


def _stem(word: str) -> str:
    """A light English stemmer, the same for tools and queries: plurals and the commonest endings,
    so that "cities" finds "city" and "created" finds "create"."""
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith("ed") and len(word) > 4:
        word = word[:-2]
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


class Bm25:
    """Okapi BM25 over weighted fields, with an inverted index: a query costs only the postings of
    its terms."""

    def __init__(self, documents: Sequence[Counter[str]]) -> None:
        self.size = len(documents)
        lengths = [sum(d.values()) for d in documents]
        self.average = (sum(lengths) / self.size) if self.size else 1.0
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, doc in enumerate(documents):
            norm = K1 * (1 - B + B * lengths[i] / (self.average or 1.0))
            for term, tf in doc.items():
                self.postings.setdefault(term, []).append((i, tf * (K1 + 1) / (tf + norm)))
        self.vocabulary = sorted(self.postings)

    def rank(self, query: Sequence[str], limit: int) -> list[int]:
        scores: dict[int, float] = {}
        for term, weight in self._expanded(query):
            postings = self.postings[term]
            idf = math.log(1 + (self.size - len(postings) + 0.5) / (len(postings) + 0.5))
            for doc, part in postings:
                scores[doc] = scores.get(doc, 0.0) + weight * idf * part
        return heapq.nsmallest(limit, scores, key=lambda d: (-scores[d], d))

    def _expanded(self, query: Sequence[str]) -> Iterator[tuple[str, float]]:
        """Each known query term; an unknown one of 3+ letters stands for the words it begins
        (temp → temperature) at half weight."""
        for term in dict.fromkeys(query):
            if term in self.postings:
                yield term, 1.0
            elif len(term) >= 3:
                yield from ((w, 0.5) for w in self._starting(term))

    def _starting(self, prefix: str) -> list[str]:
        from bisect import bisect_left

        found: list[str] = []
        for word in self.vocabulary[bisect_left(self.vocabulary, prefix) :]:
            if not word.startswith(prefix) or len(found) == 8:
                break
            found.append(word)
        return found


def _document(spec: ToolSpec) -> Counter[str]:
    """What a tool is found by, each word counted by the weight of the field it is in."""
    doc: Counter[str] = Counter()
    names, texts = _schema_words(spec.parameters)
    fields = (
        ("name", f"{_own_name(spec)} {spec.server}"),
        ("params", " ".join(names)),
        ("text", " ".join([spec.description, *texts])),
    )
    for field_name, text in fields:
        for word in tokens(text):
            doc[word] += WEIGHTS[field_name]
    return doc


def _schema_words(schema: Any, depth: int = 0) -> tuple[list[str], list[str]]:
    """Parameter names and descriptions (titles, enum values) of a JSON schema, nested ones too."""
    names: list[str] = []
    texts: list[str] = []
    if not isinstance(schema, Mapping) or depth > 8:
        return names, texts
    for key in ("description", "title"):
        if isinstance(schema.get(key), str) and depth:
            texts.append(schema[key])
    texts.extend(str(v) for v in schema.get("enum") or () if isinstance(v, str))
    properties = schema.get("properties")
    children = list(properties.items()) if isinstance(properties, Mapping) else []
    children += [("", schema[k]) for k in ("items", "additionalProperties") if k in schema]
    children += [("", s) for k in ("anyOf", "oneOf", "allOf") for s in schema.get(k) or ()]
    for name, child in children:
        if name:
            names.append(name)
        more_names, more_texts = _schema_words(child, depth + 1)
        names += more_names
        texts += more_texts
    return names, texts


def _fit(found: Sequence[ToolSpec]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(what the answer shows, names whose schema did not fit, names whose schema never fits):
    whole tools while they fit in MAX_ANSWER_CHARS, then a short description, then the name, so
    that one hostile tool of a megabyte cannot flood the conversation."""
    shown: list[dict[str, Any]] = []
    left_out: list[str] = []
    too_long: list[str] = []
    room = MAX_ANSWER_CHARS
    for entry in found:
        full = _shown(entry)
        size = len(_json(full))
        if size <= room:
            shown.append(full)
            room -= size
            continue
        (too_long if size > MAX_ANSWER_CHARS else left_out).append(entry.name)
        brief = _shown(entry, schema=False)
        size = len(_json(brief))
        shown.append(brief if size <= room else {"name": entry.name})
        room -= min(size, room)
    return shown, left_out, too_long


def _shown(spec: ToolSpec, *, schema: bool = True) -> dict[str, Any]:
    """A tool as an answer shows it: whole, or its name and a description cut short."""
    if schema:
        return {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
    text = spec.description
    if len(text) > MAX_BRIEF_CHARS:
        text = text[: MAX_BRIEF_CHARS - 1].rstrip() + "…"
    return {"name": spec.name, "description": text}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _own_name(spec: ToolSpec) -> str:
    """The tool's name on its server, as the model sees it (`mcp_<server>_` taken off)."""
    prefix = f"{PREFIX}{spec.server}_"
    return spec.name[len(prefix) :] if spec.server and spec.name.startswith(prefix) else spec.name


def _object(value: str | Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """A JSON object given as one or as its text (models do both); None is an empty one."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            why = f"{exc.msg} at position {exc.pos}"
            raise ToolError(f"{what} are not valid JSON ({why})") from None
    if not isinstance(value, Mapping):
        raise ToolError(f"{what} must be a JSON object")
    return dict(value)
