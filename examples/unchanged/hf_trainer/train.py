"""Causal LM training with the Hugging Face Trainer, in the shape of transformers' run_clm.py.

A small GPT-2 is built from a config (nothing is downloaded) and trained on synthetic token ids.
Launch it the way run_clm.py is launched:

    torchrun --nproc-per-node 2 train.py --output_dir out --max_steps 300 --save_steps 50 \
        --use_cpu --report_to none --log_level info --logging_steps 10

Resume with ``--resume_from_checkpoint out/checkpoint-N``.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import transformers
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """The model's size and the synthetic data set's shape."""

    n_layer: int = field(default=2, metadata={"help": "Number of transformer blocks."})
    n_embd: int = field(default=64, metadata={"help": "Hidden size."})
    n_head: int = field(default=2, metadata={"help": "Attention heads."})
    vocab_size: int = field(default=256, metadata={"help": "Vocabulary size."})
    seq_len: int = field(default=32, metadata={"help": "Tokens per sample."})
    num_samples: int = field(default=4096, metadata={"help": "Samples in the synthetic data set."})
    token_seed: int = field(default=1234, metadata={"help": "Seed of the synthetic token ids."})


class SyntheticTokens(Dataset):
    """Seeded token sequences that count up from a random start by a random stride (1-4), so
    there is something to learn; the labels are the inputs (the model shifts them)."""

    def __init__(self, num_samples: int, seq_len: int, vocab_size: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, vocab_size, (num_samples, 1), generator=g)
        stride = torch.randint(1, 5, (num_samples, 1), generator=g)
        self.input_ids = (start + stride * torch.arange(seq_len)) % vocab_size

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = self.input_ids[i]
        return {"input_ids": ids, "labels": ids.clone()}


def main() -> None:
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.warning(
        f"Process rank: {training_args.process_index}, device: {training_args.device}, "
        f"n_gpu: {training_args.n_gpu}, distributed training: {training_args.parallel_mode.value}"
    )

    set_seed(training_args.seed)
    config = GPT2Config(
        vocab_size=model_args.vocab_size,
        n_positions=model_args.seq_len,
        n_embd=model_args.n_embd,
        n_layer=model_args.n_layer,
        n_head=model_args.n_head,
    )
    model = GPT2LMHeadModel(config)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Training new model from scratch - Total size={n_params / 2**20:.2f}M params")

    train_dataset = SyntheticTokens(
        model_args.num_samples, model_args.seq_len, model_args.vocab_size, model_args.token_seed
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset)

    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model()
    metrics = train_result.metrics
    metrics["train_samples"] = len(train_dataset)
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("train", metrics)
    trainer.save_state()

    if dist.is_initialized():
        dist.barrier()
        # torch 2.13 + gloo: a collective issued during backward holds a Python object that gloo's
        # worker thread must release with the GIL. Give it the GIL before the interpreter exits, or
        # the process can abort at exit ("terminate called without an active exception").
        time.sleep(0.5)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
