"""The model-facing vocabulary: neutral chat messages, tool calls, replies, token usage and the
client seams.

Everything that talks to a model, or stores what it
said, shares these shapes; nothing here sends a request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, overload

# {"role", "content", "tool_calls"?: [{"id","name","arguments"}], "tool_call_id"?,
#  "images"?: [{"media_type", "file", "data"?: base64}]}
# images: a user message's pictures (without data: a note)
ChatMessage = dict[str, Any]
ClientKind = Literal["native", "sdk"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    # raw JSON text as the model produced it (may be invalid; the tool layer reports that)
    arguments: str


class ToolDef(Protocol):
    """What a client needs of a tool: gateway/agent/tools/registry.py's ToolSpec satisfies it."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def parameters(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass(frozen=True, slots=True)
class LLMReply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    provider: str
    stop_reason: str = ""


class TextSink(Protocol):
    """Where a streamed answer's text goes as the model writes
    it (a live preview: gateway/delivery/stream.py)."""

    def text(self, delta: str) -> None: ...

    def restart(self) -> None:
        """The text so far is void: the request is retried, the fallback model answers, or the next
        call begins."""


class LLMClient(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def context_window(self) -> int: ...

    async def complete(
        self,
        *,
        system: str,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDef],
        max_tokens: int | None = None,
        stream: TextSink | None = None,
    ) -> LLMReply:
        """One model call. With `stream`, the request streams and the text reaches `stream` as it is
        written; the reply is the same either way."""

    async def close(self) -> None: ...


class StreamAssembler(Protocol):
    """Folds a wire's streamed events back into its
    non-streamed JSON answer (gateway/llm/streams.py)."""

    def feed(self, event: str, data: Any) -> None: ...

    def reset(self) -> None: ...

    def answer(self) -> dict[str, Any]: ...


class Transport(Protocol):
    """Sends one request body of a wire and returns the JSON
    answer (gateway/llm/http.py, gateway/llm/sdk.py)."""

    async def post(self, body: Mapping[str, Any]) -> dict[str, Any]: ...

    async def stream(self, body: Mapping[str, Any], assembler: StreamAssembler) -> dict[str, Any]:
        """The same request with `stream: true` in `body`: each event goes to `assembler`, whose
        answer is returned; a retry starts the assembler over."""

    async def close(self) -> None: ...


IMAGE_GONE_NOTE = "[An image was attached here; it is no longer available.]"
IMAGE_BLIND_NOTE = "[An image was attached here; this model cannot see images.]"
IMAGE_LEFT_OUT_NOTE = (
    "[An image was attached here; it is left out now: the conversation holds more pictures than "
    "one request can carry.]"
)
# What one request may carry: Anthropic takes 100 images and 32 MB in all (OpenAI 500 images, 50 MB
# of them). The oldest pictures are left out past either, STEP at a time, so the request's start
# stays the same for the next STEP pictures (the prompt cache keeps matching) instead of changing
# with every new one.
MAX_REQUEST_IMAGES = 100
# base64 characters: room for the text within Anthropic's 32 MB
MAX_REQUEST_IMAGE_CHARS = 24_000_000
LEAVE_OUT_STEP = 10


def fit_images(messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
    """The history with its oldest pictures marked left out when it holds more than one request may
    carry (a conversation that outgrew the limit would otherwise be refused on every turn)."""
    sizes = [
        len(str(image.get("data")))
        for m in messages
        for image in m.get("images") or ()
        if image.get("data")
    ]
    drop = 0
    while len(sizes) - drop > MAX_REQUEST_IMAGES or sum(sizes[drop:]) > MAX_REQUEST_IMAGE_CHARS:
        drop += LEAVE_OUT_STEP
    if not drop:
        return messages
    out: list[ChatMessage] = []
    for m in messages:
        if drop > 0 and m.get("images"):
            images = []
            for image in m["images"]:
                if drop > 0 and image.get("data"):
                    image, drop = {**image, "data": None, "left_out": True}, drop - 1
                images.append(image)
            m = {**m, "images": images}
        out.append(m)
    return out


def split_images(message: ChatMessage, vision: bool) -> tuple[str, list[tuple[str, str]]]:
    """A message's text and the (media_type, base64) of the images a wire sends as image blocks; an
    image the model cannot see (no vision, or its file is gone) becomes a fixed line of text
    instead, so the same stored history always gives the same request."""
    text = message.get("content") or ""
    shown: list[tuple[str, str]] = []
    notes: list[str] = []
    for image in message.get("images") or ():
        if not vision:
            notes.append(IMAGE_BLIND_NOTE)
        elif image.get("left_out"):
            notes.append(IMAGE_LEFT_OUT_NOTE)
        elif image.get("data"):
            shown.append((str(image["media_type"]), str(image["data"])))
        else:
            notes.append(IMAGE_GONE_NOTE)
    return "\n".join([text, *notes]) if notes else text, shown


def as_object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def token_count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) else 0


# -------------------------------------------------------------------------- a session's history
MESSAGE_CHARS = 40  # what a message adds around its text on the wire: role, keys, quotes, a type


def message_chars(m: ChatMessage) -> int:
    """About the JSON size of one message, from string lengths (encoding a whole history only to
    measure it showed in the gateway's CPU per message); the compression check sums it."""
    content = m.get("content")
    size = MESSAGE_CHARS + (len(content) if content.__class__ is str else len(json.dumps(content)))
    if len(m) > 2:  # more than role and content: tool calls, a tool result
        if m.get("tool_calls"):
            size += len(json.dumps(m["tool_calls"]))
        if m.get("tool_call_id"):
            size += len(m["tool_call_id"]) + MESSAGE_CHARS
    return size


@dataclass(frozen=True, slots=True)
class WirePrefix:
    """A wire's form of a session's first `neutral` stored messages: their wire messages' compact
    JSON, joined by commas (`data`). Nothing after them can change it: the next message starts a
    wire message of its own."""

    neutral: int = 0
    data: bytes = b""


class WireMemo:
    """What the wires keep of one session's stored history between turns (a WirePrefix per wire
    and vision setting). The store's history cache owns it, drops it with the session's cached
    history whenever that history is rewritten, and counts its bytes (`grown`)."""

    __slots__ = ("grown", "prefixes", "requests")

    def __init__(self, grown: Callable[[int], None] | None = None) -> None:
        self.prefixes: dict[str, WirePrefix] = {}
        self.requests = 0  # model requests built from this history so far
        self.grown = grown

    def keep(self, key: str, prefix: WirePrefix) -> None:
        before = self.prefixes.get(key)
        self.prefixes[key] = prefix
        if self.grown is not None:
            self.grown(len(prefix.data) - (len(before.data) if before is not None else 0))


class History(Sequence[ChatMessage]):
    """The model input of a turn: a session's stored history (its first `stored` messages, made
    into chat messages when read: the turn need not touch them all), then what the turn adds
    (`append`, `plus`).

    With a `memo`, the wires convert the stored part once and keep it (anthropic_wire.py), so a
    turn's work does not grow with the history; `stored_chars` is the stored part's
    `message_chars`, kept too."""

    __slots__ = ("_kept", "_more", "_view", "memo", "stored", "stored_chars")

    def __init__(
        self,
        kept: Sequence[Any],
        view: Callable[[Any], ChatMessage],
        *,
        stored: int | None = None,
        more: Sequence[ChatMessage] = (),
        memo: WireMemo | None = None,
        stored_chars: int | None = None,
    ) -> None:
        self._kept = kept  # read up to `stored` only: the owner may append to it later
        self.stored = len(kept) if stored is None else stored
        self._view = view
        self._more: list[ChatMessage] = list(more)
        self.memo = memo
        self.stored_chars = stored_chars

    @classmethod
    def of(cls, messages: Sequence[ChatMessage]) -> History:
        """A history of plain chat messages (nothing kept between turns)."""
        return messages if isinstance(messages, History) else cls([], _same, more=messages)

    def __len__(self) -> int:
        return self.stored + len(self._more)

    @overload
    def __getitem__(self, index: int) -> ChatMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[ChatMessage]: ...

    def __getitem__(self, index: int | slice) -> ChatMessage | list[ChatMessage]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("history index out of range")
        if index < self.stored:
            return self._view(self._kept[index])
        return self._more[index - self.stored]

    def __iter__(self) -> Iterator[ChatMessage]:
        view, kept = self._view, self._kept
        for i in range(self.stored):
            yield view(kept[i])
        yield from self._more

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (History, list)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

    def append(self, message: ChatMessage) -> None:
        self._more.append(message)

    def extend(self, messages: Iterable[ChatMessage]) -> None:
        self._more.extend(messages)

    def plus(self, *messages: ChatMessage) -> History:
        """This history with `messages` after it; the stored part and its memo are shared."""
        return History(
            self._kept,
            self._view,
            stored=self.stored,
            more=[*self._more, *messages],
            memo=self.memo,
            stored_chars=self.stored_chars,
        )

    def chars(self) -> int:
        """The sum of `message_chars` over every message, the stored part's as kept."""
        if self.stored_chars is None:
            return sum(message_chars(m) for m in self)
        return self.stored_chars + sum(message_chars(m) for m in self._more)


def _same(message: Any) -> ChatMessage:
    return message  # type: ignore[no-any-return]
