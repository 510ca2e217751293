"""The training loss read from what unchanged scripts print (``observe.console_loss``), on their
real output (tests/fixtures/console_loss/README.md says how each was captured), and the log follower
keeping the latest one, from the log nearest rank 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_orch.observe.console_loss import (
    HF_TRAINER,
    LIGHTNING,
    PRINT,
    LossReader,
    is_training_key,
    parse_loss,
    rank_segments,
)
from fsdp_orch.observe.file_tail import FileTail
from fsdp_orch.supervise.logfollow import LogFollower

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "console_loss"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def read_all(text: str, chunk: int | None = None) -> list[tuple[float, str, int | None]]:
    """Every loss a reader finds in ``text``, fed whole or in chunks of ``chunk`` characters."""
    reader = LossReader()
    if chunk is None:
        return reader.feed(text, final=True)
    found = []
    for at in range(0, len(text), chunk):
        found += reader.feed(text[at:at + chunk])
    return found + reader.feed("", final=True)


# --- the real scripts' output ---------------------------------------------------------------------


def test_the_hf_trainers_log_dicts_give_each_logged_loss_and_not_the_runs_average() -> None:
    found = read_all(fixture("hf_trainer.rank0.stdout.log"))
    assert [(loss, source) for loss, source, _ in found] == [
        (5.318, HF_TRAINER), (4.905, HF_TRAINER), (4.566, HF_TRAINER), (4.318, HF_TRAINER),
        # not the summary's 'train_loss': '4.551', nor 4.5512
        (4.142, HF_TRAINER), (4.059, HF_TRAINER)]


def test_the_hf_trainers_progress_bar_and_warnings_hold_no_loss() -> None:
    text = fixture("hf_trainer.rank0.stderr.log")
    assert "\r" in text and "loss_type=None" in text
    assert read_all(text) == []


def test_a_node_console_gives_rank_0s_log_dicts_beside_the_bar_updates() -> None:
    found = read_all(fixture("hf_trainer.console-node-0.log"))
    assert [loss for loss, _, _ in found] == [5.318, 4.905, 4.566, 4.318, 4.142, 4.059]
    assert {(source, rank) for _, source, rank in found} == {(HF_TRAINER, 0)}


def test_lightnings_tqdm_bar_gives_its_latest_step_loss_from_one_long_line() -> None:
    text = fixture("lightning_tqdm.rank0.stdout.log")
    assert text.count("\n") == 2 and text.count("\r") > 40  # the whole run on one line
    found = read_all(text)
    assert {source for _, source, _ in found} == {LIGHTNING}
    assert [loss for loss, _, _ in found][:4] == [0.686, 0.686, 0.619, 0.619]
    assert found[-1][0] == 0.202  # train_loss_step, not train_loss_epoch=0.188
    assert parse_loss(text.split("\n")[0]) == (0.202, LIGHTNING)  # the line's last update


def test_lightnings_tqdm_bar_is_read_as_it_grows_not_when_its_line_ends() -> None:
    text = fixture("lightning_tqdm.rank0.stdout.log")
    reader = LossReader()
    half = text[: len(text) // 2]
    found = reader.feed(half)
    assert found and found[-1][0] in (0.32, 0.341, 0.312, 0.328)  # epoch 1, before the line ends
    assert read_all(text, chunk=37) == read_all(text)  # chunks cut anywhere: the same losses


def test_lightnings_model_checkpoint_lines_give_the_monitored_training_loss() -> None:
    found = read_all(fixture("lightning_tqdm.rank0.stderr.log"))
    assert [(loss, source) for loss, source, _ in found] == [
        (0.44346, LIGHTNING), (0.23984, LIGHTNING), (0.20218, LIGHTNING)]


def test_lightnings_rich_bar_drawn_once_with_the_value_under_its_key() -> None:
    found = read_all(fixture("lightning_rich.rank0.stdout.log"))
    # not the epoch's 0.188
    assert [(loss, source) for loss, source, _ in found] == [(0.202, LIGHTNING)]


def test_lightnings_default_bar_with_the_loss_on_it_gives_it_once_the_bar_is_drawn() -> None:
    found = read_all(fixture("lightning_prog_bar.rank0.stdout.log"))
    # wrapped under the bar
    assert [(loss, source) for loss, source, _ in found] == [(0.24, LIGHTNING)]


def test_the_lightning_example_as_it_is_prints_no_loss() -> None:
    assert read_all(fixture("lightning_unchanged.console-node-0.log")) == []


def test_the_nanogpt_shaped_example_prints_its_loss() -> None:
    found = read_all(fixture("single_file.console-node-0.log"))
    assert [(loss, source, rank) for loss, source, rank in found][-1] == (1.364, PRINT, 0)
    assert len(found) == 6


def test_nanogpts_train_py_gives_the_iteration_losses_and_the_evaluations_train_loss() -> None:
    found = read_all(fixture("nanogpt.train.log"))
    losses = [loss for loss, _, _ in found]
    # step 0: train loss (not val loss 4.2029), iter 0, iter 1
    assert losses[:3] == [4.1894, 4.1959, 4.1936]
    assert 4.2029 not in losses and 4.2065 not in losses  # val loss
    assert losses[-1] == 4.1984 and {source for _, source, _ in found} == {PRINT}


# --- lines ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("line", "expected"), [
    ("iter 10: loss 3.2145, time 12.34ms, mfu 1.23%", (3.2145, PRINT)),  # nanoGPT, exactly
    ("step 100: train loss 2.3456, val loss 2.4567", (2.3456, PRINT)),
    ("step 5: val loss 2.4567, train loss 2.3456", (2.3456, PRINT)),
    ("step 3/100 loss 2.0000 (3.1 steps/s)", (2.0, PRINT)),
    ("loss: 2.3456", (2.3456, PRINT)),
    ("loss = 2.5", (2.5, PRINT)),
    ("Train Epoch: 1 \tLoss: 0.123456", (0.123456, PRINT)),  # the PyTorch FSDP MNIST tutorial
    # Megatron
    (" iteration 100/ 1000 | lm loss: 7.891234E+00 | loss scale: 1.0 |", (7.891234, PRINT)),
    ("loss: tensor(2.3456, grad_fn=<NllLossBackward0>)", (2.3456, PRINT)),
    ('{"step": 3, "loss": 1.25}', (1.25, PRINT)),
    ("train/loss=0.5 lr=1e-4", (0.5, PRINT)),
    ("{'loss': 2.3456, 'grad_norm': 1.02, 'learning_rate': 5e-05, 'epoch': 0.5}",
     (2.3456, HF_TRAINER)),
    ("{'loss': '2.346', 'grad_norm': '1.02', 'learning_rate': '5e-05', 'epoch': '0.5'}",
     (2.346, HF_TRAINER)),
    ("{'loss': np.float64(2.3456), 'grad_norm': np.float64(1.0), 'epoch': 0.5}",
     (2.3456, HF_TRAINER)),
    ("Epoch 1:  50%|█████     | 32/64 [00:01<00:01, 20.00it/s, loss=2.35, v_num=0]",
     (2.35, LIGHTNING)),
    ("Epoch 0: 100%|██████████| 64/64 [00:01<00:00, 49.84it/s, v_num=0, train_loss_step=0.421, "
     "train_loss_epoch=0.534]", (0.421, LIGHTNING)),
    ("Epoch 2/9 ━━━━━━━━ 22/64 0:00:01 • 0:00:02 20.00it/s v_num: 0.000 train_loss: 0.693",
     (0.693, LIGHTNING)),
    ("Epoch 0, global step 50: 'train_loss' reached 0.44346 (best 0.44346), saving model to 'x'",
     (0.44346, LIGHTNING)),
    # a plain script's tqdm
    ("100%|██████████| 10/10 [00:01<00:00,  9.50it/s, loss=2.3]", (2.3, PRINT)),
    ("\r 10%|█ | 1/10 [loss=3.0]\r 20%|██ | 2/10 [loss=2.9]\r 30%|███ | 3/10 [00:01]",
     (2.9, PRINT)),
])
def test_a_line_gives_its_training_loss_and_format(line: str, expected: tuple[float, str]) -> None:
    assert parse_loss(line) == expected


@pytest.mark.parametrize("line", [
    "val_loss=0.52",
    "{'eval_loss': 2.1, 'eval_runtime': 0.3, 'epoch': 1.0}",
    "Validation DataLoader 0: 100%|██████████| 8/8 [00:00<00:00, val_loss=0.512]",
    "Epoch 0, global step 50: 'val_loss' reached 0.44346 (best 0.44346)",
    "{'train_runtime': '8.395', 'train_samples_per_second': '114.4', 'train_loss': '4.551', "
    "'epoch': '0.2344'}",
    # the Trainer's end-of-run metrics table: the run's mean
    "  train_loss               =     4.5512",
    "`loss_type=None` was set in the config but it is unrecognized. Using the default loss: "
    "`ForCausalLMLoss`.",
    "| loss scale: 65536.0 |",
    "aux_loss 0.03 kl loss 0.1 test loss 2.0 dev_loss 2.1 valid loss 2.2",
    "train_loss_epoch=0.534",
    "lossy compression 3.0",
    "no loss here",
    "step 7 done",
])
def test_a_line_without_a_training_loss_gives_none(line: str) -> None:
    assert parse_loss(line) is None


def test_a_loss_that_diverged_is_read_as_printed() -> None:
    found = parse_loss("iter 7: loss nan, time 3.0ms")
    # NaN: the record keeps None
    assert found is not None and found[0] != found[0] and found[1] == PRINT


@pytest.mark.parametrize(("key", "training"), [
    ("loss", True), ("Loss", True), ("train_loss", True), ("Train Loss", True),
    ("train/loss", True),
    ("lm loss", True), ("train_loss_step", True), ("total_loss", True),
    ("val_loss", False), ("eval_loss", False), ("validation loss", False), ("aux_loss", False),
    ("train_loss_epoch", False), ("loss_scale", False), ("my_train_loss", False),
])
def test_which_keys_name_the_training_loss(key: str, training: bool) -> None:
    assert is_training_key(key) is training


def test_torchruns_prefixes_cut_a_console_line_by_rank() -> None:
    line = "[default0]: 17%|█▋ | 10/60 [00:01<00:05][default1]:{'loss': '5.3', 'epoch': '0.1'}"
    assert rank_segments(line) == [
        (0, " 17%|█▋ | 10/60 [00:01<00:05]"), (1, "{'loss': '5.3', 'epoch': '0.1'}")]
    assert rank_segments("plain") == [(None, "plain")]


# --- the follower: the latest loss, from the log nearest rank 0 -----------------------------------


def rank_log(root: Path, node: int, local_rank: int, text: str, name: str = "stdout.log") -> Path:
    folder = root / f"node-{node}" / "job-a0_x" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with path.open("a", encoding="utf-8") as f:
        f.write(text)
    return path


def test_the_follower_keeps_rank_0s_latest_loss_over_the_console_and_other_ranks(
        tmp_path: Path) -> None:
    follower = LogFollower(FileTail(tmp_path).chunks)
    (tmp_path / "console-node-0.log").write_text("[default1]:step 1 loss 9.0\n")
    follower.poll()
    assert follower.loss == (9.0, PRINT)  # only another rank's so far
    (tmp_path / "console-node-0.log").write_text("[default1]:step 1 loss 9.0\n"
                                                 "[default0]:step 1 loss 8.0\n")
    follower.poll()
    assert follower.loss == (8.0, PRINT)
    rank_log(tmp_path, 0, 0, "iter 2: loss 7.0000\n")
    rank_log(tmp_path, 0, 1, "iter 2: loss 6.0000\n")
    rank_log(tmp_path, 1, 0, "iter 2: loss 5.0000\n")
    follower.poll()
    assert follower.loss == (7.0, PRINT)  # rank 0's own file wins from now on
    with (tmp_path / "console-node-0.log").open("a") as f:
        f.write("[default0]:iter 3: loss 4.0\n")
    rank_log(tmp_path, 0, 1, "iter 3: loss 3.0\n")
    follower.poll()
    assert follower.loss == (7.0, PRINT)
    rank_log(tmp_path, 0, 0, "{'loss': 2.5, 'epoch': 0.1}\n")
    follower.poll()
    assert follower.loss == (2.5, HF_TRAINER)


@pytest.mark.parametrize(("first", "then", "final", "expected"), [
    # a bar's update counts once the next begins, long before the bar's line ends
    ("\rEpoch 0:  10%|█ | 10/100 [00:01<00:09, 10.0it/s, v_num=0, train_loss=0.9]",
     "\rEpoch 0:  20%|██ | 20/100 [00:02<00:08, 10.0it/s, v_num=0, train_loss=0.8]\r", False,
     (0.8, LIGHTNING)),
    # a log that ended without a newline: its last line counts at the end
    ("iter 9: loss 1.5", "", True, (1.5, PRINT)),
])
def test_the_follower_reads_an_unfinished_piece_once_it_is_whole(
        tmp_path: Path, first: str, then: str, final: bool, expected: tuple[float, str]) -> None:
    follower = LogFollower(FileTail(tmp_path).chunks)
    rank_log(tmp_path, 0, 0, first)
    follower.poll()
    assert follower.loss is None  # it may not be whole yet
    rank_log(tmp_path, 0, 0, then)
    follower.poll(final=final)
    assert follower.loss == expected
