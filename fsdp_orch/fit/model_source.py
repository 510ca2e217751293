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

from fsdp_orch.places.imports import import_problem
from fsdp_orch.places.trust import load_problem, refusal
from fsdp_orch.vocab.errors import InputError

FACTORY_SEP = ":"


def config_file(model: str, base: str) -> str | None:
    """The config.json ``model`` names: a file or folder relative to ``base`` (the job file's
    folder), else a model id (``org/name``) already in the local Hugging Face cache; None when
    ``model`` is a factory."""
    path = os.path.join(base, os.path.expanduser(model))
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if path.endswith(".json") or os.path.exists(path):
        return path
    if FACTORY_SEP in model:
        return None
    return cached_hub_config(model) or path


def hub_cache() -> str:
    """Where huggingface_hub keeps what it downloaded (its own order: HF_HUB_CACHE, HF_HOME/hub,
    ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def cached_hub_config(model_id: str) -> str | None:
    """The config.json of ``model_id`` (``org/name``) in the local cache: the snapshot its
    ``refs/main`` names, else the newest snapshot holding one; None when not cached. Never the
    network."""
    if model_id.count("/") != 1 or model_id.startswith((".", "/", "~")):
        return None
    folder = os.path.join(hub_cache(), "models--" + model_id.replace("/", "--"))
    try:
        with open(os.path.join(folder, "refs", "main"), encoding="utf-8") as f:
            revision = f.read().strip()
        candidate = os.path.join(folder, "snapshots", revision, "config.json")
        if os.path.isfile(candidate):
            return candidate
    except OSError:
        pass
    try:
        snapshots = [os.path.join(folder, "snapshots", s, "config.json")
                     for s in os.listdir(os.path.join(folder, "snapshots"))]
    except OSError:
        return None
    found = [s for s in snapshots if os.path.isfile(s)]
    return max(found, key=os.path.getmtime) if found else None


def trusted_config(path: str) -> None:
    """Refuse a config another account owns or can change (a shared HF_HOME, a 1777 folder): what
    it says decides the estimate, and its folder is where code would be loaded from."""
    if not os.path.exists(path):
        return  # the read says it is missing
    why = load_problem(path)
    if why is not None:
        raise InputError(refusal("the model's config", path, why,
                                 "use a config in a folder of yours (a copy of it beside the job)"),
                         field="fit.model")


def model_text(model: str, base: str) -> str:
    """What identifies the model for the cache: its config's text, or the factory's name."""
    path = config_file(model, base)
    if path is None:
        return model
    trusted_config(path)
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        if model.count("/") == 1 and not os.path.exists(path):
            raise InputError(
                f"{model!r} is neither a config.json or folder beside the job nor a model in the "
                f"local Hugging Face cache ({hub_cache()}); fit never downloads (huggingface-cli "
                f"download {model} config.json fetches the config alone)", field="fit.model"
            ) from None
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
          layers: int | None = None, argv: tuple[str, ...] = ()) -> Any:
    """The torch module (its parameters in ``dtype``); ``layers``: a Hugging Face model built
    with that many layers in place of its config's; ``argv``: the job's script and args, which a
    factory reads as ``sys.argv`` while it runs."""
    path = config_file(model, base)
    if path is None:
        return _from_factory(model, base, dtype, argv)
    try:
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise InputError("a Hugging Face config needs transformers where fit runs "
                         "(pip install transformers)", field="fit.model") from None
    trusted_config(path)
    try:
        with open(path, encoding="utf-8") as f:
            _check_sizes(json.load(f), path)
        # never code from the config's folder (an auto_map), and never a question on the terminal
        config = AutoConfig.from_pretrained(os.path.dirname(path) or ".", local_files_only=True,
                                            trust_remote_code=False)
    except (OSError, ValueError) as exc:
        if "custom code" in str(exc):
            raise InputError(f"{path} asks for custom code (auto_map) to build its model: fit "
                             "never runs code from a config's folder; name a factory of yours "
                             "instead (fit.model: module:function)", field="fit.model") from None
        raise InputError(f"{path} is not a Hugging Face config: {' '.join(str(exc).split())}",
                         field="fit.model") from None
    config._attn_implementation = "sdpa" if flash_attention else "eager"
    if layers is not None:
        config.num_hidden_layers = layers
    config.use_cache = False
    try:
        return AutoModelForCausalLM.from_config(config, dtype=dtype, trust_remote_code=False)
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as exc:
        raise InputError(f"cannot build a model from {path}: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}", field="fit.model") from None


# A config's sizes that must be whole numbers above 0 where given (hidden_size: 0 divided by zero
# after 35 s of building, issue 61), and the most each may be.
_SIZES = {"hidden_size": 1 << 20, "intermediate_size": 1 << 22, "num_hidden_layers": 10_000,
          "num_attention_heads": 1 << 14, "num_key_value_heads": 1 << 14, "vocab_size": 1 << 24,
          "head_dim": 1 << 16, "max_position_embeddings": 1 << 30}


def _check_sizes(config: Any, path: str) -> None:
    if not isinstance(config, dict):
        raise InputError(f"{path} is not a Hugging Face config: expected a JSON object, got "
                         f"{type(config).__name__}", field="fit.model")
    for key, most in _SIZES.items():
        value = config.get(key)
        if value is None:
            continue
        if type(value) is not int or not 0 < value <= most:
            raise InputError(f"{path}: {key}: expected a whole number from 1 to {most}; got "
                             f"{str(value)[:30]}", field="fit.model")


def _from_factory(model: str, base: str, dtype: Any, argv: tuple[str, ...] = ()) -> Any:
    name, _, function = model.partition(FACTORY_SEP)
    why = import_problem(name, base)
    if why is not None:
        raise InputError(refusal("the model factory's module", name, why,
                                 "keep the factory in a folder of yours that only you can write"),
                         field="fit.model")
    if base not in sys.path:
        sys.path.insert(0, base)
    try:
        factory = getattr(importlib.import_module(name), function)
    except (ImportError, AttributeError) as exc:
        raise InputError(f"cannot call the model factory {model}: {exc}",
                         field="fit.model") from None
    if not callable(factory):
        raise InputError(f"{model} is a {type(factory).__name__}, not a function that returns "
                         "the model", field="fit.model")
    saved_argv = sys.argv
    if argv:
        sys.argv = list(argv)  # a factory that parses the command line sees the job's args
    try:
        made = factory()
    except SystemExit as exc:
        raise InputError(f"the model factory {model} exited (SystemExit {exc.code!r}) instead of "
                         "returning the model", field="fit.model") from None
    except Exception as exc:  # noqa: BLE001 - the user's code: any failure is theirs, named
        where = _user_frame(exc)
        raise InputError(f"the model factory {model} raised {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:300]}{where}", field="fit.model") from None
    finally:
        sys.argv = saved_argv
    from torch import nn

    if not isinstance(made, nn.Module):
        raise InputError(f"the model factory {model} returned a {type(made).__name__}, expected "
                         "a torch.nn.Module", field="fit.model")
    _cast(made, dtype)
    return made


def _user_frame(exc: BaseException) -> str:
    """`` (at FILE:LINE)`` of the innermost frame of the traceback outside fsdp-orch and torch."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/fsdp_orch/" not in f.filename and "/torch/" not in f.filename]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _cast(module: Any, dtype: Any) -> None:
    """``module.to(dtype)``, parameter by parameter: under FakeTensorMode ``Module.to`` cannot
    swap a fake parameter for its cast (torch 2.13: "Couldn't swap Embedding.weight")."""
    from torch import nn

    for owner in module.modules():
        for name, p in owner.named_parameters(recurse=False):
            if p.is_floating_point() and p.dtype != dtype:
                owner._parameters[name] = nn.Parameter(p.detach().to(dtype),
                                                       requires_grad=p.requires_grad)
        for name, b in owner.named_buffers(recurse=False):
            if b.is_floating_point() and b.dtype != dtype:
                owner._buffers[name] = b.to(dtype)


__all__ = ["build", "config_file", "layer_count", "model_text"]
