"""tasks/sizing/sizing.py: the memory, checkpoint and disk arithmetic, with hand-computed numbers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tasks" / "sizing"))

import sizing  # noqa: E402

# 2 layers, hidden 4, MLP 8, 2 query heads and 1 KV head of dim 2, vocab 10, tied embeddings.
TINY = sizing.ModelShape(
    name="tiny",
    hidden_size=4,
    intermediate_size=8,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=2,
    vocab_size=10,
    tie_word_embeddings=True,
    qk_norm=False,
    attention_bias=False,
)
NO_REF = sizing.RunSettings(use_ref=False)


def test_tiny_parameter_count():
    # per layer: q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate 4x8 + up 4x8 + down 8x4 = 144, two norms of 4 -> 152
    assert TINY.layer_params == 152
    # 2 layers + tied embedding 10x4 + final norm 4
    assert TINY.params == 2 * 152 + 40 + 4 == 348
    # LoRA on all 7 linears: rank x (in + out) summed = 8 x 64 per layer
    assert TINY.lora_params(rank=8) == 2 * 8 * 64 == 1024


@pytest.mark.parametrize(
    "name, params, non_embedding, card",
    [
        # Qwen3 model cards (huggingface.co/Qwen/Qwen3-8B, -14B, -32B): parameters and non-embedding parameters.
        ("qwen3-8b", 8_190_735_360, 6_946_075_648, (8.2, 6.95)),
        ("qwen3-14b", 14_768_307_200, 13_212_482_560, (14.8, 13.2)),
        ("qwen3-32b", 32_762_123_264, 31_206_298_624, (32.8, 31.2)),
        # huggingface.co/Qwen/Qwen2.5-1.5B-Instruct: 1.54B, 1.31B non-embedding (qkv biases, tied embeddings).
        ("qwen2.5-1.5b-instruct", 1_543_714_304, 1_310_340_608, (1.54, 1.31)),
    ],
)
def test_shipped_configs_match_the_published_parameter_counts(name, params, non_embedding, card):
    model = sizing.load_model(name)
    assert model.params == params
    assert model.params - model.embedding_params == non_embedding
    digits = len(str(card[1]).split(".")[1])
    assert (round(params / 1e9, 1), round(non_embedding / 1e9, digits)) == (round(card[0], 1), card[1])


def test_qwen3_8b_hand_computed_layer():
    model = sizing.load_model("Qwen/Qwen3-8B")  # found by its HF id as well as by file name
    attention = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096
    mlp = 3 * 4096 * 12288
    norms = 2 * 4096 + 2 * 128  # input/post-attention RMSNorm, q/k norms
    assert model.layer_params == attention + mlp + norms == 192_946_432


def test_kv_cache_bytes_per_token():
    qwen3_8b = sizing.load_model("qwen3-8b")
    assert qwen3_8b.kv_bytes_per_token() == 2 * 36 * 8 * 128 * 2 == 147_456  # K and V, 36 layers, 8 heads, bf16
    assert qwen3_8b.kv_bytes_per_token(tensor_parallel=2) == 73_728
    assert TINY.kv_bytes_per_token(tensor_parallel=2) == 2 * 2 * 1 * 2 * 2  # one KV head: replicated, not split


def test_training_state_is_16_bytes_per_param_sharded():
    gathered = 2 * 2 * 152  # one layer and the prefetched next, bf16
    assert sizing.training_state_bytes(TINY, NO_REF, world=2) == 16 * 348 // 2 + gathered == 3392
    with_ref = sizing.RunSettings(use_ref=True)
    assert sizing.training_state_bytes(TINY, with_ref, world=2) == (16 * 348 + 2 * 348) // 2 + gathered == 3740
    lora = sizing.RunSettings(lora_rank=8, use_ref=False)
    assert sizing.training_state_bytes(TINY, lora, world=1) == 2 * 348 + 16 * 1024 + gathered == 17688


def test_qwen3_8b_state_per_gpu_matches_zero_stage_3():
    # ZeRO (Rajbhandari et al. 2020): mixed-precision Adam keeps 16 bytes/param, 16*P/N per device fully sharded.
    model = sizing.load_model("qwen3-8b")
    gathered = 4 * model.layer_params
    assert sizing.training_state_bytes(model, NO_REF, world=8) - gathered == 16 * 8_190_735_360 // 8 == 16_381_470_720


def test_activations_of_a_micro_batch():
    tokens = 3
    checkpoints = 2 * tokens * 4 * 2  # layers x tokens x hidden x bf16
    layer = tokens * (4 * 4 + 2 * 2 + 2 * 2 + 3 * 8) * 2
    logits = tokens * 10 * 4 * 2  # fp32 logits and their gradient
    assert sizing.activation_bytes(TINY, tokens) == checkpoints + layer + logits == 48 + 288 + 240


@pytest.mark.parametrize("budget, micro", [(1152, 2), (1151, 1), (575, 0)])
def test_largest_micro_batch_that_fits(budget, micro):
    settings = sizing.RunSettings(seq_len=3)  # 1 sequence: 576 bytes of activations, 2: 1152, 4: 2304
    assert sizing._largest_micro_batch(TINY, settings, budget, states=0) == micro


def test_checkpoint_and_disk():
    assert sizing.checkpoint_bytes(TINY, NO_REF) == 12 * 348  # fp32 weights + Adam m, v
    assert sizing.checkpoint_bytes(TINY, sizing.RunSettings(lora_rank=8)) == 12 * 1024
    base = sizing.DISK_BASE_BYTES
    # (keep_local 1 + the one being written) x checkpoint share + HF export (bf16) + downloaded model (bf16) + base
    assert sizing.disk_bytes_per_node(TINY, NO_REF, num_nodes=1) == 2 * 4176 + 2 * 696 + base
    assert sizing.disk_bytes_per_node(TINY, NO_REF, num_nodes=2) == 2 * 2088 + 2 * 696 + base
    qwen3_8b = sizing.load_model("qwen3-8b")
    assert sizing.checkpoint_bytes(qwen3_8b, NO_REF) == 98_288_824_320
    assert sizing.disk_bytes_per_node(qwen3_8b, NO_REF) == 2 * 98_288_824_320 + 4 * 8_190_735_360 + base


def test_engine_tensor_parallel_leaves_half_the_engine_memory_to_kv():
    qwen3_32b = sizing.load_model("qwen3-32b")
    # bf16 weights 65.5 GB; H200: 0.7 x 150.75 GB / 2 = 52.8 GB -> TP 2; B200: 0.7 x 192.27 GB / 2 = 67.3 GB -> TP 1
    assert sizing.engine_tensor_parallel(qwen3_32b, sizing.GPU_MEMORY_BYTES["H200"], sizing.RunSettings()) == 2
    assert sizing.engine_tensor_parallel(qwen3_32b, sizing.GPU_MEMORY_BYTES["B200"], sizing.RunSettings()) == 1


def test_plan_for_qwen3_8b_on_one_h200_node():
    plan = sizing.plan(sizing.load_model("qwen3-8b"), "H200", 1, sizing.RunSettings())
    assert (plan.engine_tp, plan.num_inference_engines) == (1, 8)
    # (0.7 x 143771 MiB - 16.38 GB of bf16 weights - 4 GiB) // 147456 bytes per token
    kv = int((0.7 * 143771 * 1024**2 - 2 * 8_190_735_360 - 4 * 1024**3) // 147_456)
    assert plan.kv_tokens_per_engine == kv == 575_439
    assert plan.max_num_seqs == min(64 * 8 // 8, kv // 17408) == 33
    assert plan.fits
    assert "generator.num_inference_engines=8" in plan.overrides()


def test_bad_model_configs_are_named(tmp_path):
    broken = tmp_path / "config.json"
    broken.write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(sizing.SizingError, match=f"{broken}: lacks intermediate_size, num_hidden_layers"):
        sizing.load_model(str(broken))
    with pytest.raises(sizing.SizingError, match="nope: not a config.json path nor a shipped config"):
        sizing.load_model("nope")
    with pytest.raises(sizing.SizingError, match="unknown GPU 'A100'"):
        sizing.plan(TINY, "A100", 1, NO_REF)


def test_cli_prints_a_row_per_model_gpu_and_node_count(capsys):
    assert sizing.main(["qwen3-8b", "qwen3-32b", "--nodes", "1", "2", "--markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| model | params | GPU | nodes |")
    assert len(lines) == 2 + 2 * 2 * 2
    assert lines[2].startswith("| Qwen/Qwen3-8B | 8.19B | H200 | 1 |")
    assert sizing.main(["missing-model"]) == 2


def test_overrides_are_printed_only_for_plans_that_fit(capsys):
    # One sequence of 400k tokens: its activations alone exceed a GPU, so no micro-batch fits on either GPU type.
    assert sizing.main(["qwen3-32b", "--nodes", "1", "--seq-len", "400000", "--overrides"]) == 0
    out = capsys.readouterr().out
    assert out.count("does not fit") == 2
    assert "trainer.strategy=fsdp2" not in out
    assert sizing.main(["qwen3-8b", "--nodes", "1", "--overrides"]) == 0
    overrides = capsys.readouterr().out
    assert overrides.count("trainer.strategy=fsdp2") == 2 and "cpu_offload" not in overrides
