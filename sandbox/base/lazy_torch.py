"""torch imported at first use, so that loading a scenario (its configs, the registries, ``sandbox plan``,
``sandbox scenario``) does not pay for ``import torch``.

The method modules keep their config beside their code; their code uses torch only when it computes. A module
binds ``torch = lazy_import("torch", globals())`` in place of ``import torch``: the placeholder imports the real
module at the first attribute access or call and then binds it under the same name in the importing module's
namespace, so every later use there is the module itself (no indirection on the hot path). The pattern is that of
TensorFlow's ``LazyLoader`` (``tensorflow/python/util/lazy_loader.py``, TF 2.x), which also rebinds the name in its
parent module's globals; unlike ``importlib.util.LazyLoader`` (and the ``lazy_loader`` package built on it) nothing is
put in ``sys.modules``, so ``"torch" not in sys.modules`` stays a true statement until torch is really imported.

:func:`no_grad` is ``@torch.no_grad()`` for a function defined before torch is imported: the decorator is applied
at definition time, the context is entered at call time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

_SLOTS = ("_target", "_namespace")


class LazyImport:
    """A module, or one attribute of a module (``"torch.func:vmap"``), imported when first used.

    Attribute access, calls, ``isinstance`` and attribute assignment (``monkeypatch.setattr(mod.torch, ...)``) all
    resolve it; resolving rebinds every name of ``namespace`` bound to this placeholder to the real object."""

    __slots__ = _SLOTS

    def __init__(self, target: str, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_namespace", namespace)

    def resolve(self) -> Any:
        """Import the target, bind it in place of this placeholder in its namespace, and return it."""
        module_name, _, attribute = self._target.partition(":")
        obj = importlib.import_module(module_name)
        if attribute:
            obj = getattr(obj, attribute)
        for name, value in list(self._namespace.items()):
            if value is self:
                self._namespace[name] = obj
        return obj

    def __getattr__(self, name: str) -> Any:
        if name in _SLOTS:  # not yet set (a copy or an unpickling): never recurse into resolve()
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.resolve(), name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.resolve(), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __instancecheck__(self, instance: Any) -> bool:
        return isinstance(instance, self.resolve())

    def __repr__(self) -> str:
        return f"<lazy import of {self._target!r}, not imported yet>"


def lazy_import(target: str, namespace: dict[str, Any]) -> Any:
    """``torch = lazy_import("torch", globals())`` in place of ``import torch``; ``"module:attribute"`` in place of
    ``from module import attribute``. ``namespace`` is the importing module's ``globals()``."""
    if not isinstance(target, str) or not target or target.count(":") > 1:
        raise ValueError(f"lazy_import target: expected 'module' or 'module:attribute', got {target!r}")
    if not isinstance(namespace, dict):
        raise TypeError(f"lazy_import namespace: expected the importing module's globals() dict, got {namespace!r}")
    return LazyImport(target, namespace)


torch = lazy_import("torch", globals())


def no_grad(fn: Callable) -> Callable:
    """``fn`` run under ``torch.no_grad()``: what ``@torch.no_grad()`` does to a plain function
    (``torch.autograd.grad_mode``, torch 2.x), without importing torch when ``fn`` is defined."""
    if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn) or isinstance(fn, type):
        raise TypeError(f"no_grad decorates a plain function, got {fn!r}")

    @functools.wraps(fn)
    def run_without_grad(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return fn(*args, **kwargs)

    return run_without_grad
