"""FLOPs per token by a named formula (rlprof.model_flops), checked against the models' real parameters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rlprof.model_flops import dense_parameters, per_token  # noqa: E402


def test_dense_counts_the_parameters_of_the_matrix_products_only():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                                torch.nn.GRU(32, 8), torch.nn.Linear(8, 4))
    matrices = 16 * 32 + (3 * 8 * 32 + 3 * 8 * 8) + 8 * 4  # no embedding, bias or norm
    assert dense_parameters(model) == matrices
    train, forward = per_token(model, train=True), per_token(model, train=False)
    assert (train.flops(10), forward.flops(10)) == (6 * matrices * 10, 2 * matrices * 10)
    assert train.formula.startswith("6N (dense, train") and forward.formula.startswith("2N (dense, forward")


def test_the_decoder_formula_counts_a_real_llamas_matrices_and_causal_attention():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))  # q k v o, MLP, LM head
    found = per_token(model, train=True)
    assert found.parameters == linear
    assert per_token(config, train=True) == found  # the config alone says as much (an FSDP shard's model too)
    # 6·L·H·d_head per sequence's length squared: QKᵀ and AV, half of them under the causal mask, x3 to train
    assert found.flops(0, [8]) == 6 * 2 * 4 * 16 * 64
    assert "decoder" in found.formula and "causal attention" in found.formula


def test_a_model_with_nothing_to_count_has_no_formula():
    assert per_token(object(), train=True) is None
    assert per_token(torch.nn.ReLU(), train=True) is None
