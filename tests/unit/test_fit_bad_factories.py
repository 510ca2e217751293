"""``fit`` with a model factory that does not give a model (issue 61's inputs): each is one
InputError naming ``fit.model`` and what went wrong (the CLI prints it as one line, exit 2);
``sys:exit`` no longer exits 0. In process: the factory is called as ``fit`` calls it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fsdp_orch.fit.model_source import build
from fsdp_orch.vocab.errors import InputError

FACTORIES = ("def boom():\n    raise RuntimeError('the factory broke')\n\n"
             "def wrong():\n    return 42\n\n"
             "NOT_A_FUNCTION = [1]\n")


@pytest.mark.parametrize(("model", "said"), [
    ("bad_factories:boom", "the model factory bad_factories:boom raised RuntimeError: the factory "
                           "broke (at {folder}/bad_factories.py:2)"),
    ("bad_factories:wrong", "the model factory bad_factories:wrong returned a int, expected a "
                            "torch.nn.Module"),
    ("bad_factories:NOT_A_FUNCTION", "bad_factories:NOT_A_FUNCTION is a list, not a function"),
    ("sys:exit", "the model factory sys:exit exited (SystemExit None) instead of returning the "
                 "model")])
def test_a_factory_that_gives_no_model_is_one_error_naming_fit_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str, said: str) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.delitem(sys.modules, "bad_factories", raising=False)  # each test's own file
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "bad_factories.py").write_text(FACTORIES)
    with pytest.raises(InputError) as refused:
        build(model, str(tmp_path), torch.float32, flash_attention=False)
    assert refused.value.field == "fit.model"
    assert said.format(folder=tmp_path) in refused.value.detail, refused.value.detail
    assert "\n" not in str(refused.value)
