"""``sandbox.base.lazy_torch``: a placeholder imports its module at first use, binds the real object in the
importing namespace and leaves ``sys.modules`` alone until then; ``no_grad`` is ``@torch.no_grad()`` applied
at call time."""

from __future__ import annotations

import sys

import pytest
import torch

from sandbox.base.lazy_torch import LazyImport, lazy_import, no_grad


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A module that nothing has imported yet: ``lazy_probe`` with a class, a function and a value."""
    (tmp_path / "lazy_probe.py").write_text(
        "class Thing:\n    pass\n\ndef double(x):\n    return 2 * x\n\nVALUE = 41\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_probe", raising=False)
    yield "lazy_probe"
    sys.modules.pop("lazy_probe", None)


def test_nothing_is_imported_until_first_use_then_the_name_is_the_module(fresh_module):
    namespace: dict = {}
    namespace["probe"] = lazy_import(fresh_module, namespace)
    namespace["alias"] = namespace["probe"]
    assert isinstance(namespace["probe"], LazyImport)
    assert fresh_module not in sys.modules
    assert namespace["probe"].VALUE == 41
    assert namespace["probe"] is sys.modules[fresh_module]  # rebound: later uses skip the placeholder
    assert namespace["alias"] is sys.modules[fresh_module]


def test_an_attribute_target_resolves_on_call_and_on_isinstance(fresh_module):
    namespace: dict = {}
    namespace["double"] = lazy_import(f"{fresh_module}:double", namespace)
    namespace["Thing"] = lazy_import(f"{fresh_module}:Thing", namespace)
    assert namespace["double"](21) == 42
    assert namespace["double"] is sys.modules[fresh_module].double
    thing = sys.modules[fresh_module].Thing()
    assert isinstance(thing, namespace["Thing"]) and not isinstance(3, namespace["Thing"])
    assert namespace["Thing"] is sys.modules[fresh_module].Thing


def test_setting_an_attribute_sets_it_on_the_module(fresh_module):
    namespace: dict = {}
    placeholder = lazy_import(fresh_module, namespace)
    namespace["probe"] = placeholder
    placeholder.VALUE = 7  # what monkeypatch.setattr(module.torch, ...) does
    assert sys.modules[fresh_module].VALUE == 7
    assert namespace["probe"] is sys.modules[fresh_module]


def test_a_missing_module_fails_at_first_use_with_the_import_error():
    namespace: dict = {}
    namespace["missing"] = lazy_import("no_such_module_anywhere", namespace)
    with pytest.raises(ModuleNotFoundError, match="no_such_module_anywhere"):
        namespace["missing"].anything


@pytest.mark.parametrize("target", ["", "a:b:c", 3])
def test_a_bad_target_is_refused_naming_it(target):
    with pytest.raises(ValueError, match="lazy_import target"):
        lazy_import(target, {})


def test_the_namespace_must_be_a_dict():
    with pytest.raises(TypeError, match="lazy_import namespace"):
        lazy_import("math", None)


def test_no_grad_disables_gradients_at_call_time_and_keeps_the_function():
    @no_grad
    def scaled(w: torch.Tensor) -> torch.Tensor:
        """Twice w."""
        assert not torch.is_grad_enabled()
        return w * 2

    w = torch.ones(3, requires_grad=True)
    out = scaled(w)
    assert not out.requires_grad and torch.is_grad_enabled()
    assert scaled.__name__ == "scaled" and scaled.__doc__ == "Twice w."
    reference = torch.no_grad()(lambda w: w * 2)(w)
    assert torch.equal(out, reference) and out.requires_grad == reference.requires_grad


def test_no_grad_refuses_a_generator_function():
    def gen():
        yield 1

    with pytest.raises(TypeError, match="plain function"):
        no_grad(gen)
