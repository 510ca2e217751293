"""The training loss as unchanged scripts print it on their console. Pure functions of text (no
files, no clock): a line in, ``(loss, source)`` or None out, ``source`` naming the format:

- ``hf_trainer``: the Hugging Face Trainer's log dicts, ``{'loss': 2.3456, 'grad_norm': ...,
  'epoch': 0.5}`` (newer versions print the values as strings, ``'loss': '2.346'``, or as
  ``np.float64(2.3456)``).
- ``lightning``: Lightning's progress bars (TQDM: ``Epoch 0: 47%|...| 30/64 [..., v_num=0,
  train_loss_step=0.553]``; Rich: ``... v_num: 0.000 train_loss: 0.202``, which off a terminal
  is drawn once, at the end, with a key and its value on two lines when the bar is narrow) and
  ModelCheckpoint's ``Epoch 0, global step 50: 'train_loss' reached 0.44346 (best ...)``.
- ``print``: plain prints, ``loss 2.3456``, ``loss: 2.3456``, ``iter 100: loss 2.3456, time
  12.34ms`` (nanoGPT), ``step 100: train loss 2.3456, val loss 2.4567``, ``lm loss: 7.8E+00``,
  a JSON or dict line with a ``"loss"`` key, any other tqdm bar's ``loss=`` postfix.

Which number is the training loss: the key is ``loss`` alone or with one of ``train``,
``training``, ``lm``, ``total``, ``avg``, ``mean`` before it (``train_loss``, ``train/loss``,
``Train Loss``), optionally ``_step`` after it (Lightning's per-step value when it logs both).
Never a loss of evaluation (``val``, ``valid``, ``validation``, ``eval``, ``test``, ``dev``), a
part of one (``aux_loss``, ``kl loss``), an epoch's mean (``train_loss_epoch``), ``loss scale``, or
the averages a run prints at its end (the Trainer's ``'train_loss'`` summary dict and its
``train_loss = 4.5512`` metrics table): those are not the latest training loss. A line that
holds many progress-bar updates separated by carriage returns gives its last.
"""

from __future__ import annotations

import re

HF_TRAINER = "hf_trainer"
LIGHTNING = "lightning"
PRINT = "print"

_TRAINING_PREFIXES = frozenset({"train", "training", "lm", "total", "avg", "mean"})
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
# A value as printed: bare, quoted, or wrapped (``tensor(2.3, grad_fn=...)``, ``np.float64(2.3)``).
_VALUE = rf"(?:(?:np\.)?float\d*\(|tensor\()?['\"]?(?P<value>{_NUMBER})(?![\w.])"
# ``{'loss': ...}`` / ``{"loss": ...}``: a dict or JSON line with the exact key loss.
_DICT = re.compile(rf"[{{,]\s*['\"]loss['\"]\s*:\s*{_VALUE}", re.IGNORECASE)
_HF_MARK = re.compile(r"['\"]epoch['\"]\s*:")  # the Trainer adds the epoch to every log dict
# key, then ``:``, ``=`` (at most one space before it: not a padded metrics table), or spaces.
_KEY_VALUE = re.compile(
    r"(?<![\w/.-])(?P<key>(?:[A-Za-z]+[ _/.-])?loss(?:_step)?)(?![\w/.-])"
    rf"(?:\s*:\s*| ?=\s*|\s+){_VALUE}",
    re.IGNORECASE)
_CHECKPOINT_LINE = re.compile(rf"'(?P<key>[\w/.-]*loss[\w]*)' reached {_VALUE}", re.IGNORECASE)
# Lightning's bars: its v_num, or a bar described "Epoch N" (TQDM) or "Epoch N/M" (Rich).
_LIGHTNING_BAR = re.compile(r"v_num[=:]|^\s*Epoch \d+(?:/-?\d+)?[: ].*(?:it/s|s/it)")
_KEY_ALONE = re.compile(r"^\s*(?P<key>(?:[A-Za-z]+[ _/.-])?loss(?:_step)?)\s*:\s*$", re.IGNORECASE)
_VALUE_ALONE = re.compile(rf"^\s*(?P<value>{_NUMBER})\s*$", re.IGNORECASE)
# torchrun's per-line prefix in a node's console log (``--tee``): ``[default3]:``.
_RANK_PREFIX = re.compile(r"\[default(\d+)\]:")
_BREAK = re.compile(r"[\r\n]")
_INDENT = " " * 8  # a Rich bar's metrics wrapped under it are indented to the metrics column
CARRY_LIMIT = 16_384  # an unfinished piece longer than this keeps only its end
# The step a loss line names: ``step=12``, ``step 12:``, ``iter 100:``, ``global step 50``,
# ``'step': 12``; not ``max_steps=300`` or ``steps``.
_STEP = re.compile(r"(?<![\w/.-])(?:global[ _]step|step|iter(?:ation)?)['\"]?(?:\s*[:=]\s*|\s+)"
                   r"(?P<step>\d+)(?![\w.])", re.IGNORECASE)


def mentions_loss(text: str) -> bool:
    """The cheap test every line passes first: no "loss" in it, nothing to parse."""
    return "loss" in text or "Loss" in text or "LOSS" in text


def is_training_key(key: str) -> bool:
    """``loss``, ``train_loss``, ``Train Loss``, ``train/loss``, ``lm loss``, ``train_loss_step``;
    not ``val_loss``, ``eval_loss``, ``aux_loss``, ``train_loss_epoch``."""
    words = re.split(r"[ _/.-]", key.lower())
    if words[-1] == "step":
        words.pop()
    if not words or words[-1] != "loss":
        return False
    return len(words) == 1 or (len(words) == 2 and words[0] in _TRAINING_PREFIXES)


def parse_loss(line: str) -> tuple[float, str] | None:
    """The training loss a console line shows, and its format; the last of a progress bar's
    carriage-return updates that shows one."""
    if not mentions_loss(line):
        return None
    for update in reversed(line.split("\r")):
        found = _parse_update(update)
        if found is not None:
            return found
    return None


def _parse_update(text: str) -> tuple[float, str] | None:
    if not mentions_loss(text):
        return None
    m = _DICT.search(text)
    if m is not None:
        return _number(m), HF_TRAINER if _HF_MARK.search(text) else PRINT
    m = _CHECKPOINT_LINE.search(text)
    if m is not None and is_training_key(m.group("key")):
        return _number(m), LIGHTNING
    for m in _KEY_VALUE.finditer(text):
        if is_training_key(m.group("key")):
            return _number(m), LIGHTNING if _LIGHTNING_BAR.search(text) else PRINT
    return None


def _number(m: re.Match[str]) -> float:
    return float(m.group("value"))


def printed_step(line: str) -> int | None:
    """The step a console line names beside its loss (``step=12 loss=2.3``, nanoGPT's
    ``iter 100: loss ...``, Lightning's ``global step 50``); None when it names none (the
    Trainer's log dicts: its step is the rank's at the time the line was read)."""
    m = _STEP.search(line)
    return int(m.group("step")) if m is not None else None


def rank_segments(line: str) -> list[tuple[int | None, str]]:
    """A node console line cut at torchrun's ``[defaultN]:`` prefixes into (local rank, text); the
    text before any prefix has rank None."""
    parts = _RANK_PREFIX.split(line)
    out: list[tuple[int | None, str]] = [(None, parts[0])] if parts[0] else []
    out += [(int(parts[i]), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]
    return out


class LossReader:
    """One log as it grows: the text it gained, in chunks, in; the training losses it shows out.
    Lines and carriage-return updates count once whole (an unfinished one waits for the next
    chunk), so a progress bar that ends its line only when an epoch ends is read as it goes. A
    Rich bar's metrics wrapped onto the lines under it are Lightning's, and a key on one line with
    its value on the next is read as one."""

    def __init__(self) -> None:
        self.carry = ""  # the unfinished piece
        self.pending: str | None = None  # a training-loss key whose value is on the next line
        self.in_bar = False  # the last piece was a Lightning bar or its indented continuation

    def feed(self, text: str, final: bool = False) -> list[tuple[float, str, int | None]]:
        """(loss, source, torchrun's local rank prefix or None) for each loss in the whole pieces
        of the text so far, in order; ``final``: the log ended, its last piece is whole."""
        return [found[:3] for found in self.feed_points(text, final)]

    def feed_points(self, text: str,
                    final: bool = False) -> list[tuple[float, str, int | None, int | None]]:
        """``feed``'s, each with the step its line names (``printed_step``), else None."""
        text = self.carry + text
        if self.pending is None and not mentions_loss(text):
            self.carry = "" if final else _unfinished(text)
            return []
        pieces = _BREAK.split(text)
        self.carry = "" if final else pieces.pop()[-CARRY_LIMIT:]
        found: list[tuple[float, str, int | None, int | None]] = []
        for piece in pieces:
            for rank, segment in rank_segments(piece) if "[default" in piece else [(None, piece)]:
                hit = self._segment(segment)
                if hit is not None:
                    found.append((*hit, rank, printed_step(segment)))
        return found

    def _segment(self, text: str) -> tuple[float, str] | None:
        continued = self.in_bar and text.startswith(_INDENT)
        if text.strip():
            self.in_bar = continued or _LIGHTNING_BAR.search(text) is not None
        if self.pending is not None and text.strip():
            key, self.pending = self.pending, None
            m = _VALUE_ALONE.match(text)
            if m is not None and is_training_key(key):
                return float(m.group("value")), LIGHTNING
        if not mentions_loss(text):
            return None
        found = _parse_update(text)
        if found is None:
            m = _KEY_ALONE.match(text)
            self.pending = m.group("key") if m is not None else None
        elif continued:
            found = (found[0], LIGHTNING)
        return found


def _unfinished(text: str) -> str:
    cut = max(text.rfind("\n"), text.rfind("\r"))
    return text[cut + 1:][-CARRY_LIMIT:]


__all__ = ["HF_TRAINER", "LIGHTNING", "PRINT", "LossReader", "is_training_key", "mentions_loss",
           "parse_loss", "printed_step", "rank_segments"]
