"""A tiny causal LM, its tokenizer and a text data set, built offline for TRL's ``sft.py`` (nothing
is fetched from a model hub):

    python make_tiny.py tiny      # tiny/model (Llama, 2 layers of 32) and tiny/data/train.jsonl

``sft.py --model_name_or_path tiny/model --dataset_name tiny/data`` then trains as it would on a
hub model and data set. The texts count up by a stride, so there is something to learn."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<unk>", "<s>", "</s>"]


def texts(count: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start, stride = rng.randrange(100), rng.randrange(1, 5)
        out.append(" ".join(f"n{(start + stride * i) % 100}" for i in range(rng.randrange(8, 24))))
    return out


def main(folder: str) -> None:
    root = Path(folder)
    vocab = {token: i for i, token in enumerate(SPECIAL + [f"n{i}" for i in range(100)])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                        unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=128, pad_token_id=0, bos_token_id=2,
                         eos_token_id=3, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    with open(data / "train.jsonl", "w") as f:
        for text in texts(512):
            f.write(json.dumps({"text": text}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny")
