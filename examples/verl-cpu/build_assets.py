"""Build everything the CPU harness trains on, offline, into one directory.

    python examples/verl-cpu/build_assets.py DIR

writes
    DIR/model/       a random Qwen2 (2 layers, hidden 64) with a byte-level BPE tokenizer
    DIR/data/train.parquet, DIR/data/val.parquet   synthetic rows in verl's gsm8k schema
Nothing is downloaded. The output is deterministic for a given --seed.
"""

from __future__ import annotations

import argparse
import json
import os
import random

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
# a ChatML template, which verl's dataset applies to each prompt
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
NAMES = ["Ann", "Bob", "Cid", "Dee", "Eve", "Fay", "Gus", "Hal"]
ITEMS = ["apples", "books", "coins", "pens", "cards", "shells"]


def make_problem(rng: random.Random) -> tuple[str, int, str]:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 9)
    question = f"{name} has {a} {item} and buys {b} more, then gives away {c}. How many {item} does {name} have?"
    answer = a + b - c
    solution = f"{name} has {a} + {b} = {a + b} {item}. Then {a + b} - {c} = {answer}.\n#### {answer}"
    return question, answer, solution


def build_tokenizer(out_dir: str, corpus: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        bos_token=None,
        unk_token=None,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.padding_side = "left"
    hf_tok.save_pretrained(out_dir)
    return hf_tok


def build_model(out_dir: str, tokenizer, seed: int):
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    vocab = len(tokenizer)
    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out_dir, safe_serialization=True)


def build_data(out_dir: str, rng: random.Random, n_train: int, n_val: int):
    import pandas as pd

    for split, n in (("train", n_train), ("test", n_val)):
        rows = []
        for i in range(n):
            question, answer, solution = make_problem(rng)
            rows.append(
                {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(answer)},
                    "extra_info": {"split": split, "index": i, "answer": solution, "question": question},
                }
            )
        name = "train.parquet" if split == "train" else "val.parquet"
        pd.DataFrame(rows).to_parquet(os.path.join(out_dir, name))


def build(out: str, seed: int = 0, vocab_size: int = 512, n_train: int = 64, n_val: int = 16) -> dict:
    model_dir, data_dir = os.path.join(out, "model"), os.path.join(out, "data")
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(data_dir, exist_ok=True)
    rng = random.Random(seed)
    corpus = []
    for _ in range(2000):
        question, _, solution = make_problem(rng)
        corpus += [f"{question} {INSTRUCTION}", solution]
    tokenizer = build_tokenizer(model_dir, corpus, vocab_size)
    build_model(model_dir, tokenizer, seed)
    build_data(data_dir, random.Random(seed + 1), n_train, n_val)
    info = {
        "model": model_dir,
        "train": os.path.join(data_dir, "train.parquet"),
        "val": os.path.join(data_dir, "val.parquet"),
        "vocab_size": len(tokenizer),
        "seed": seed,
    }
    with open(os.path.join(out, "assets.json"), "w") as f:
        json.dump(info, f, indent=2)
    return info


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--train-rows", type=int, default=64)
    p.add_argument("--val-rows", type=int, default=16)
    a = p.parse_args(argv)
    print(json.dumps(build(a.out, a.seed, a.vocab_size, a.train_rows, a.val_rows), indent=2))


if __name__ == "__main__":
    main()
