"""What a console line says of a run's health beside its loss (``console_loss``): the grad norm it
logs, and a checkpoint the fsdp_orch runtime set aside because it would not load. Pure functions of
text.

- The grad norm: the Hugging Face Trainer's log dicts, ``{'loss': 0.0, 'grad_norm': nan, ...}``
  (its ``logging_nan_inf_filter``, on by default, hides a NaN *loss*, never the grad norm), and
  plain ``grad_norm=1.2`` / ``grad norm: 1.2`` prints (Megatron-LM's iteration lines).
- A checkpoint the runtime could not load as it restored, and moved aside before restoring an
  earlier one: ``[fsdp-orch] warning: checkpoint PATH would not load (WHY): moved to DEST and kept;
  restored EARLIER instead`` (``runtime.ckpt_restore.set_aside_unloadable``).
"""

from __future__ import annotations

import re

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf(?:inity)?"
_GRAD_NORM = re.compile(
    r"(?<![\w/.-])['\"]?grad[ _]norm['\"]?\s*[:=]\s*(?:(?:np\.)?float\d*\(|tensor\()?['\"]?"
    rf"(?P<value>{_NUMBER})(?![\w.])", re.IGNORECASE)
_SET_ASIDE = re.compile(r"\[fsdp-orch\] warning: checkpoint (?P<src>.+?) would not load "
                       r"\((?P<why>.*)\): moved to (?P<dst>.+?) and kept")


def parse_grad_norm(line: str) -> float | None:
    """The grad norm a line logs (the last of a progress bar's carriage-return updates that shows
    one), or None."""
    if "norm" not in line:
        return None
    for update in reversed(line.split("\r")):
        m = _GRAD_NORM.search(update)
        if m is not None:
            return float(m.group("value"))
    return None


def runtime_set_aside(line: str) -> tuple[str, str, str] | None:
    """(the checkpoint, why it would not load, where it was moved) of the runtime's warning, or
    None."""
    if "would not load" not in line:
        return None
    m = _SET_ASIDE.search(line)
    return None if m is None else (m.group("src"), m.group("why"), m.group("dst"))


__all__ = ["parse_grad_norm", "runtime_set_aside"]
