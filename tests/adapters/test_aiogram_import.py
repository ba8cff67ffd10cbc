"""aiogram imported with its models built on first use: nothing built at import, the same objects
and requests as a plain import, a plain import when pydantic's internals differ, and the RSS that
was the point of it.

aiogram runs in fresh interpreters (tests/adapters/aiogram_probe.py) because this process has
imported it already; the mechanism itself is also checked in-process on a small package built like
aiogram's types.
"""

from __future__ import annotations

import importlib
import json
import logging
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic._internal import _config

from adapters.telegram.aiogram_import import (
    UnsupportedPydanticError,
    deferred_models,
    import_deferred,
)

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("aiogram_probe.py")


def probe(mode: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(PROBE), mode],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


@pytest.fixture(scope="module")
def eager() -> dict[str, Any]:
    return probe("eager")[0]


def test_deferred_import_builds_nothing_yet_and_parses_like_a_plain_import(
    eager: dict[str, Any],
) -> None:
    deferred, stderr = probe("deferred")
    assert stderr == ""
    assert eager["types"] == deferred["types"] > 400
    assert eager["built_after_import"] > 0.9 * eager["types"]
    assert deferred["built_after_import"] == 0
    for key in ("updates", "dumps", "requests", "response"):
        assert deferred[key] == eager[key], key


def test_what_the_probe_parses_is_what_telegram_sent(eager: dict[str, Any]) -> None:
    """Known values, so that 'the same as eager' cannot mean 'equally wrong'."""
    message, edited, promoted, kicked, post = eager["updates"]
    assert [e["type"] for e in message["message"]["entities"]] == [
        "bot_command",
        "url",
        "mention",
        "text_link",
        "text_mention",
    ]
    assert message["message"]["entities"][4]["user"]["first_name"] == "Bob"
    reply = message["message"]["reply_to_message"]
    assert (reply["from_user"]["username"], reply["text"]) == ("gw_bot", "earlier answer")
    assert reply["reply_markup"]["inline_keyboard"][0][1]["callback_data"] == "again:9"
    assert message["message"]["forward_origin"]["__class__"] == "MessageOriginUser"
    assert (edited["edited_message"]["date"], edited["edited_message"]["edit_date"]) == (
        "2023-11-14T22:13:20+00:00",
        1700000100,
    )
    assert [p["file_id"] for p in edited["edited_message"]["photo"]] == ["p1", "p2"]
    assert promoted["my_chat_member"]["old_chat_member"]["__class__"] == "ChatMemberMember"
    assert promoted["my_chat_member"]["new_chat_member"]["__class__"] == "ChatMemberAdministrator"
    assert kicked["my_chat_member"]["new_chat_member"]["__class__"] == "ChatMemberBanned"
    assert post["channel_post"]["sender_chat"]["title"] == "News"
    send = eager["requests"][0]
    assert (send["method"], send["chat_id"], send["text"]) == (
        "sendMessage",
        "-100500",
        "𝔸nswer **x**",
    )
    assert json.loads(send["entities"])[1] == {
        "type": "text_link",
        "offset": 4,
        "length": 1,
        "url": "https://e.org",
    }
    assert json.loads(send["reply_parameters"]) == {
        "message_id": 10,
        "allow_sending_without_reply": True,
    }
    assert json.loads(eager["requests"][3]["commands"])[0] == {
        "command": "new",
        "description": "Start a new session",
    }
    assert (eager["response"]["__class__"], eager["response"]["text"]) == ("Message", "done")


def test_unexpected_pydantic_falls_back_to_a_plain_import_with_a_warning(
    eager: dict[str, Any],
) -> None:
    fallback, stderr = probe("fallback")
    assert (
        "WARNING adapters.telegram.aiogram_import aiogram: "
        "importing it with its models built eagerly" in stderr
    )
    assert "ConfigWrapper.for_model takes" in stderr
    assert fallback == eager


def rss_after(code: str) -> float:
    script = (
        code + "\nfrom pathlib import Path\nprint(next(int(line.split()[1]) for line in "
        "Path('/proc/self/status').read_text().splitlines() if line.startswith('VmRSS:')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split()[-1])


def test_the_telegram_adapter_costs_well_under_half_the_memory_of_a_plain_aiogram_import() -> None:
    deferred = rss_after("import adapters.telegram.adapter")
    eager = rss_after("import aiogram\nimport adapters.telegram.adapter")
    assert deferred < 0.6 * eager, (deferred, eager)


# The mechanism on a package shaped like aiogram: types with `defer_build=True` that import each
# other only under TYPE_CHECKING and are rebuilt by a loop in the package's __init__, and a
# "methods" module without it.
PACKAGE = {
    "__init__.py": """
        from typing import Optional
        from .a import Parent
        from .b import Child
        _types_namespace = {"Optional": Optional, "Parent": Parent, "Child": Child}
        for _model in (Parent, Child):
            _model.model_rebuild(_types_namespace=_types_namespace)
        del _types_namespace
        from .methods import Call
        """,
    "base.py": """
        from pydantic import BaseModel, ConfigDict
        class Obj(BaseModel):
            model_config = ConfigDict(defer_build=True)
        """,
    "a.py": """
        from __future__ import annotations
        from typing import TYPE_CHECKING
        from .base import Obj
        if TYPE_CHECKING:
            from .b import Child
        class Parent(Obj):
            name: str
            children: list[Child] = []
        """,
    "b.py": """
        from __future__ import annotations
        from typing import TYPE_CHECKING
        from .base import Obj
        if TYPE_CHECKING:
            from .a import Parent
        class Child(Obj):
            age: int
            parent: Optional[Parent] = None
        """,
    "methods.py": """
        from __future__ import annotations
        from pydantic import BaseModel
        from .b import Child
        class Call(BaseModel):
            child: Child
        """,
}


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"deferred_pkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / name).mkdir()
    for file, text in PACKAGE.items():
        (tmp_path / name / file).write_text(textwrap.dedent(text), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


def module_of(package: str) -> Any:
    return sys.modules[package]


def models(package: str) -> list[type[BaseModel]]:
    module = module_of(package)
    return [module.Parent, module.Child, module.Call]


def parse(package: str) -> tuple[Any, Any]:
    """First use from a frame whose locals name the
    models' types differently: they must not leak in."""
    Child, Parent = int, str  # noqa: F841 - shadows on purpose
    module = sys.modules[package]
    parent = module.Parent.model_validate(
        {"name": "p", "children": [{"age": 3, "parent": {"name": "q"}}]}
    )
    call = module.Call.model_validate({"child": {"age": 4}})
    return parent, call


def test_deferred_models_are_built_on_first_use_with_the_packages_names(package: str) -> None:
    import_deferred(package)
    assert [m.__pydantic_complete__ for m in models(package)] == [False, False, False]
    parent, call = parse(package)
    assert parent.children[0].parent.name == "q"
    assert type(parent.children[0]).__name__ == "Child"
    assert call.model_dump() == {"child": {"age": 4, "parent": None}}
    module = module_of(package)
    assert (module.Parent.__pydantic_complete__, module.Call.__pydantic_complete__) == (True, True)


def test_import_deferred_is_idempotent(package: str) -> None:
    first = import_deferred(package)
    assert import_deferred(package) is first
    assert [m.__pydantic_complete__ for m in models(package)] == [False, False, False]


def test_an_already_imported_package_is_left_as_it_is(package: str) -> None:
    plain = importlib.import_module(package)
    assert import_deferred(package) is plain
    assert [m.__pydantic_complete__ for m in models(package)] == [True, True, True]


def test_the_originals_are_restored_even_when_the_import_fails(package: str) -> None:
    for_model = _config.ConfigWrapper.__dict__["for_model"]
    rebuild = BaseModel.__dict__["model_rebuild"]
    with pytest.raises(ModuleNotFoundError), deferred_models(package):
        importlib.import_module(package + ".missing")
    assert _config.ConfigWrapper.__dict__["for_model"] is for_model
    assert BaseModel.__dict__["model_rebuild"] is rebuild


def test_changed_internals_mean_a_plain_import_and_a_warning(
    package: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = _config.ConfigWrapper.__dict__["for_model"].__func__

    def for_model(cls: Any, bases: Any, namespace: Any, annotations: Any, kwargs: Any) -> Any:
        return original(cls, bases, namespace, annotations, kwargs)

    monkeypatch.setattr(_config.ConfigWrapper, "for_model", classmethod(for_model))
    with pytest.raises(UnsupportedPydanticError), deferred_models(package):
        pass
    with caplog.at_level(logging.WARNING, logger="adapters.telegram.aiogram_import"):
        import_deferred(package)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [package]
    assert [m.__pydantic_complete__ for m in models(package)] == [True, True, True]
    assert parse(package)[0].children[0].age == 3
