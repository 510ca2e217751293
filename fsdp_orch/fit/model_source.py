"""The model ``fit:`` names, built without weights: a Hugging Face config (a ``config.json``, or a
model folder holding one; never the hub) or a Python factory ``package.module:function``. Called
under ``FakeTensorMode``, so that no parameter takes memory. Imports torch (and transformers for a
config) when called."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

from fsdp_orch.vocab.errors import InputError

FACTORY_SEP = ":"


def config_file(model: str, base: str) -> str | None:
    """The config.json ``model`` names, relative to ``base`` (the job file's folder); None when
    ``model`` is a factory."""
    path = os.path.join(base, os.path.expanduser(model))
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if path.endswith(".json") or os.path.exists(path):
        return path
    if FACTORY_SEP in model:
        return None
    return path


def model_text(model: str, base: str) -> str:
    """What identifies the model for the cache: its config's text, or the factory's name."""
    path = config_file(model, base)
    if path is None:
        return model
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise InputError(f"cannot read the model's config {path}: {exc.strerror}",
                         field="fit.model") from None


def layer_count(model: str, base: str) -> int | None:
    """A Hugging Face config's ``num_hidden_layers``; None for a factory (or none said)."""
    path = config_file(model, base)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            layers = json.load(f).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return None
    return layers if type(layers) is int and layers > 0 else None


def build(model: str, base: str, dtype: Any, flash_attention: bool,
          layers: int | None = None) -> Any:
    """The torch module (its parameters in ``dtype``); ``layers``: a Hugging Face model built
    with that many layers in place of its config's."""
    path = config_file(model, base)
    if path is None:
        return _from_factory(model, base, dtype)
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise InputError("a Hugging Face config needs transformers where fit runs "
                         "(pip install transformers)", field="fit.model") from None
    try:
        with open(path, encoding="utf-8") as f:
            json.load(f)
        config = AutoConfig.from_pretrained(os.path.dirname(path) or ".", local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path} is not a Hugging Face config: {exc}",
                         field="fit.model") from None
    config._attn_implementation = "sdpa" if flash_attention else "eager"
    if layers is not None:
        config.num_hidden_layers = layers
    config.use_cache = False
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def _from_factory(model: str, base: str, dtype: Any) -> Any:
    name, _, function = model.partition(FACTORY_SEP)
    if base not in sys.path:
        sys.path.insert(0, base)
    try:
        made = getattr(importlib.import_module(name), function)()
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot call the model factory {model}: {exc}",
                         field="fit.model") from None
    return made.to(dtype)


__all__ = ["build", "config_file", "layer_count", "model_text"]
