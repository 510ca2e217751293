"""Every loss a job logged, for the report (fsdp_orch.record.loss_points): the step a printed line
names, the supervisor's loss log (batched, private, thinned), and the page drawing each point. The
event log keeps one progress event per 5 s: a 200-step demo drew 4 points where its console
printed 20."""

from __future__ import annotations

import os
import re

from fsdp_orch.observe.console_loss import LossReader, printed_step
from fsdp_orch.record import loss_points
from fsdp_orch.record.loss_points import LOSS_FILE, LossLog, read_points


def test_the_step_a_loss_line_names():
    assert printed_step("step=120 loss=2.310000") == 120
    assert printed_step("iter 100: loss 4.2345, time 12.34ms") == 100  # nanoGPT
    assert printed_step("step 40: train loss 2.3456, val loss 2.4567") == 40
    assert printed_step("Epoch 0, global step 50: 'train_loss' reached 0.44346") == 50
    assert printed_step('{"step": 7, "loss": 1.5}') == 7
    assert printed_step("{'loss': 2.3456, 'grad_norm': 1.2, 'epoch': 0.5}") is None  # the Trainer
    assert printed_step("max_steps=300 loss=1.0") is None
    assert printed_step("steps 30 loss 1.0") is None


def test_the_reader_gives_each_loss_with_its_step():
    reader = LossReader()
    text = "".join(f"[default0]:step={s} loss={3 - s / 10:.4f}\n" for s in range(1, 4))
    assert reader.feed_points(text, final=True) == [(2.9, "print", 0, 1), (2.8, "print", 0, 2),
                                                    (2.7, "print", 0, 3)]


def test_the_log_is_private_batched_and_read_back(tmp_path):
    now = [0.0]
    log = LossLog(str(tmp_path), lambda: now[0])
    log.point(0, 1, 2.5, "print")
    log.point(0, 1, 2.5, "print")  # the same point twice in a row: once
    log.point(0, 2, float("nan"), "print")  # not a loss to draw
    log.flush()
    assert not (tmp_path / LOSS_FILE).exists()  # at most one write per FLUSH_EVERY_S
    now[0] += loss_points.FLUSH_EVERY_S
    log.point(0, 2, 2.4, "print")
    log.flush()
    assert os.stat(tmp_path / LOSS_FILE).st_mode & 0o777 == 0o600
    log.point(1, 2, 2.45, "runtime")
    log.point(1, 3, 2.3, "runtime")
    log.flush(final=True)
    with open(tmp_path / LOSS_FILE, "a") as f:
        f.write('{"attempt": 1, "step": 4, "loss": tru\n["odd"]\n')  # torn or odd: skipped
    assert read_points(str(tmp_path)) == {0: [(1, 2.5), (2, 2.4)], 1: [(2, 2.45), (3, 2.3)]}
    assert read_points(str(tmp_path / "nowhere")) == {}


def test_printed_losses_win_over_the_heartbeats_samples(tmp_path):
    log = LossLog(str(tmp_path), lambda: 0.0)
    log.point(0, 3, 2.0, "runtime")  # sampled before the console's first line was read
    for step in range(1, 6):
        log.point(0, step, 3.0 - step / 10, "print")
    log.flush(final=True)
    assert [s for s, _ in read_points(str(tmp_path))[0]] == [1, 2, 3, 4, 5]


def test_a_long_run_is_thinned_not_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(loss_points, "POINTS_KEPT", 10)
    log = LossLog(str(tmp_path), lambda: 0.0)
    for step in range(1, 71):
        log.point(0, step, 1.0 / step, "print")
    log.flush(final=True)
    steps = [s for s, _ in read_points(str(tmp_path))[0]]
    assert steps[:10] == list(range(1, 11))  # all of the first 10
    assert steps[10:20] == list(range(11, 31, 2))  # every second of the next 20
    assert steps[20:] == list(range(31, 71, 4))  # every fourth of the next 40
    assert len([line for line in (tmp_path / LOSS_FILE).read_text().splitlines()]) == 30


def test_the_page_draws_every_logged_point_over_the_progress_events():
    from fsdp_orch.record import event_types
    from fsdp_orch.record.fold import fold
    from fsdp_orch.report.page import render

    events = [event_types.Submitted(at=1.0, job="j1", name="demo", cluster="local",
                                    run_dir="/runs/j1", spec_json="{}"),
              event_types.AttemptStarted(at=2.0, attempt=0),
              event_types.Progress(at=3.0, step=5, loss=2.5, progress_at=3.0),
              event_types.Progress(at=8.0, step=20, loss=1.9, progress_at=8.0)]
    status = fold(events, "j1")
    logged = {0: [(step, 3.0 - step / 20) for step in range(1, 21)]}
    page = render(status, events, logged)
    drawn = re.findall(r'class="loss-point" data-attempt="0" data-step="(\d+)" '
                       r'data-loss="([^"]+)"', page)
    assert [(int(s), float(v)) for s, v in drawn] == logged[0]
    assert len(re.findall(r'class="loss-point"', render(status, events))) == 2  # events alone
    long_run = render(status, events, {0: [(s, 1.0 / s) for s in range(1, 2001)]})
    assert 'class="loss-line"' in long_run and 'class="loss-point"' not in long_run
    assert len(long_run) < 200_000, len(long_run)
