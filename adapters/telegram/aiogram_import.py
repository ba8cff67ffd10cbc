"""Imports aiogram with its pydantic models built on first use, not at import; import this module
before aiogram.

Why (measured 2026-11-29, aiogram 3.31, pydantic 2.13, CPython 3.11): a plain `import aiogram` costs
~165 MB RSS and ~2.1 s, because `aiogram/types/__init__.py` ends with a loop calling
`model_rebuild(_types_namespace=...)` on all ~440 types (defeating their `defer_build=True`) and the
~230 `aiogram.methods` models build at class creation; pydantic builds each model's whole validator
with the nested models inlined. A bot uses a handful of them. Deferred, the import costs ~60 MB
(process total) and ~0.4 s; the types and methods a bot really uses add a few MB when first used
(the first Update parsed takes ~70 ms).

How: while aiogram is imported (and only then) two pydantic internals are wrapped:
`ConfigWrapper.for_model` adds `defer_build=True` to aiogram's models, and
`BaseModel.model_rebuild(_types_namespace=...)` on a not yet built aiogram model keeps the namespace
(the names aiogram imports only under TYPE_CHECKING) for the first real build instead of building
now. If pydantic's internals are not the expected shape, aiogram is imported plainly.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import logging
import sys
import threading
from collections import ChainMap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from pydantic import BaseModel
from pydantic._internal import _config

from gateway.errors import GatewayError

__all__ = ["UnsupportedPydanticError", "deferred_models", "import_deferred"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_FOR_MODEL_PARAMS = ["bases", "namespace", "raw_annotations", "kwargs"]
_REBUILD_PARAMS = {"force", "raise_errors", "_parent_namespace_depth", "_types_namespace"}
_BUILTINS = vars(builtins)


class UnsupportedPydanticError(GatewayError):
    """pydantic's private API is not what the wrappers
    were written against; import eagerly instead."""


def import_deferred(package: str = "aiogram") -> ModuleType:
    """Import `package` with its models deferred; idempotent (an already imported package is
    returned as is)."""
    with _lock:
        if package in sys.modules:
            return sys.modules[package]
        try:
            with deferred_models(package):
                return importlib.import_module(package)
        except UnsupportedPydanticError as exc:
            log.warning(
                "%s: importing it with its models built eagerly (~100 MB more RSS): %s",
                package,
                exc,
            )
            return importlib.import_module(package)


@contextmanager
def deferred_models(package: str) -> Iterator[None]:
    """While active, models defined in `package` (or its submodules) are built on first use.

    Raises UnsupportedPydanticError before patching anything if the internals are not the expected
    shape; restores the originals on exit, whatever happens inside.
    """
    for_model_attr, rebuild_attr, depth = _patch_points()
    original_for_model: Callable[..., Any] = for_model_attr.__func__
    original_rebuild: Callable[..., Any] = rebuild_attr.__func__

    def ours(module: object) -> bool:
        return isinstance(module, str) and (module == package or module.startswith(package + "."))

    def for_model(
        cls: type[Any],
        bases: tuple[type[Any], ...],
        namespace: dict[str, Any],
        raw_annotations: dict[str, Any],
        kwargs: dict[str, Any],
    ) -> Any:
        wrapper = original_for_model(cls, bases, namespace, raw_annotations, kwargs)
        if ours(namespace.get("__module__")):
            wrapper.config_dict["defer_build"] = True
        return wrapper

    def model_rebuild(cls: type[BaseModel], /, **kwargs: Any) -> bool | None:
        types_namespace = kwargs.get("_types_namespace")
        if (
            isinstance(types_namespace, dict)
            and ours(cls.__module__)
            and not cls.__pydantic_complete__
        ):
            _keep_namespace(cls, types_namespace)
            return None
        # One frame more than the caller expected (this one),
        # so its parent namespace is still the caller's.
        kwargs["_parent_namespace_depth"] = kwargs.get("_parent_namespace_depth", depth) + 1
        result: bool | None = original_rebuild(cls, **kwargs)
        return result

    _config.ConfigWrapper.for_model = classmethod(for_model)  # type: ignore[assignment]
    BaseModel.model_rebuild = classmethod(model_rebuild)  # type: ignore[method-assign, assignment]
    try:
        yield
        _pin_module_namespaces(ours)
    finally:
        _config.ConfigWrapper.for_model = for_model_attr  # type: ignore[method-assign, assignment]
        BaseModel.model_rebuild = rebuild_attr  # type: ignore[method-assign, assignment]


# A deferred model is built by its first use, which resolves its annotations with the locals of the
# frame that used it placed above the module's globals (pydantic's `_parent_namespace_depth=5`): a
# caller's local `datetime` (the class) would shadow the module `datetime` that aiogram's video.py
# annotates with. A model's parent namespace outranks those locals, so each one gets what an eager
# build would have seen; the ChainMaps share the dicts.


def _keep_namespace(cls: type[BaseModel], types_namespace: dict[str, Any]) -> None:
    """As an eager `model_rebuild(_types_namespace=...)`:
    those names first, then the module's, then builtins.

    The module's globals also get the names they lack, for this model built nested in another
    model's schema, where only the outer model's namespace and the inner one's module are seen.
    """
    module_globals = vars(sys.modules[cls.__module__])
    cls.__pydantic_parent_namespace__ = ChainMap(  # type: ignore[assignment]
        types_namespace, module_globals, _BUILTINS
    )
    for name, value in types_namespace.items():
        module_globals.setdefault(name, value)


def _pin_module_namespaces(ours: Callable[[str], bool]) -> None:
    """As an eager build at class creation: the module's
    names, then builtins (aiogram.methods, base classes)."""
    for name, module in list(sys.modules.items()):
        if module is None or not ours(name):
            continue
        module_globals = vars(module)
        for value in list(module_globals.values()):
            if not (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == name
            ):
                continue
            if (
                not value.__pydantic_complete__
                and value.__dict__.get("__pydantic_parent_namespace__") is None
            ):
                value.__pydantic_parent_namespace__ = ChainMap(  # type: ignore[assignment]
                    module_globals, _BUILTINS
                )


def _patch_points() -> tuple[classmethod[Any, Any, Any], classmethod[Any, Any, Any], int]:
    """The two classmethods to wrap and model_rebuild's
    default frame depth, or UnsupportedPydanticError."""
    for_model = inspect.getattr_static(_config.ConfigWrapper, "for_model", None)
    rebuild = BaseModel.__dict__.get("model_rebuild")
    if not isinstance(for_model, classmethod) or not isinstance(rebuild, classmethod):
        raise UnsupportedPydanticError(
            "ConfigWrapper.for_model or BaseModel.model_rebuild is not a classmethod"
        )
    if "config_dict" not in getattr(_config.ConfigWrapper, "__slots__", ()):
        raise UnsupportedPydanticError("ConfigWrapper has no config_dict slot")
    if not hasattr(BaseModel, "__pydantic_complete__") or not hasattr(
        BaseModel, "__pydantic_parent_namespace__"
    ):
        raise UnsupportedPydanticError(
            "BaseModel lacks __pydantic_complete__ or __pydantic_parent_namespace__"
        )
    for_model_params = list(inspect.signature(for_model.__func__).parameters)[1:]
    if for_model_params != _FOR_MODEL_PARAMS:
        raise UnsupportedPydanticError(
            f"ConfigWrapper.for_model takes {for_model_params}, not {_FOR_MODEL_PARAMS}"
        )
    rebuild_params = inspect.signature(rebuild.__func__).parameters
    keyword_only = {
        name for name, p in rebuild_params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    if keyword_only != _REBUILD_PARAMS:
        raise UnsupportedPydanticError(f"BaseModel.model_rebuild takes {sorted(keyword_only)}")
    depth = rebuild_params["_parent_namespace_depth"].default
    if not isinstance(depth, int):
        raise UnsupportedPydanticError("model_rebuild's _parent_namespace_depth has no int default")
    return for_model, rebuild, depth


import_deferred("aiogram")
