"""Cluster sizing from a model's HF `config.json`: per-GPU memory, checkpoint and disk size, and the placement,
engine and batch settings that fit 8xH200 and 8xB200 nodes.

    .venv/bin/python tasks/sizing/sizing.py qwen3-8b qwen3-14b qwen3-32b --nodes 1 2 --markdown
    .venv/bin/python tasks/sizing/sizing.py path/to/config.json --seq-len 20480 --lora-rank 32

A model is a `config.json` path or the name of one shipped in `model_configs/` next to this file (only the shape
fields are read; nothing is downloaded). The arithmetic assumes the cluster path of the design: FSDP2 full sharding
of the policy over every GPU of every node, bf16 compute with fp32 master weights, AdamW, colocated inference
engines (training state is offloaded while the engines generate, as upstream's colocate_all does):

- parameters: embeddings, lm_head (unless tied), per layer q/k/v/o, gated MLP, norms (q/k norms for qwen3);
- training state per GPU: full fine-tuning 16 bytes/param / world (fp32 weights 4, fp32 grads 4, Adam m and v 8:
  the same 16 bytes/param as ZeRO's mixed-precision Adam); LoRA: bf16 base 2 bytes/param / world plus 16 bytes per
  adapter param; a ref model (KL on) bf16 2 bytes/param / world;
- activations per GPU for one micro-batch of `micro x seq_len` tokens with gradient checkpointing: the checkpointed
  layer inputs (L x tokens x hidden, bf16), one layer's recompute working set, and fp32 logits with their gradient;
- KV cache: 2 (K and V) x layers x kv_heads x head_dim x 2 bytes per token, split over tensor parallelism;
- checkpoint: full fine-tuning 12 bytes/param (fp32 weights + Adam m, v), LoRA 12 bytes per adapter param; disk per
  node: `keep_local + 1` checkpoints (the newest kept one plus the one being written) + an HF export (bf16) + the
  downloaded model (bf16) + a fixed allowance for the OS, CUDA, the venv and vLLM.

These are estimates of the dominant terms (allocator fragmentation and CUDA graphs are covered by headroom factors,
not modelled); the table in tasks/README.md comes from this script.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
CONFIGS_DIR = Path(__file__).resolve().parent / "model_configs"
# Total memory per GPU as nvidia-smi reports it.
GPU_MEMORY_BYTES = {"H200": 143771 * 1024**2, "B200": 183359 * 1024**2}
GPUS_PER_NODE = 8
TRAIN_HEADROOM = 0.9  # fraction of GPU memory the training phase may plan for (allocator, NCCL buffers)
ENGINE_OVERHEAD_BYTES = 4 * GIB  # per GPU: vLLM activations, sampler and CUDA context besides weights and KV
DISK_BASE_BYTES = 100 * 1000**3  # OS, CUDA libraries, the venv with vLLM, pip cache, data and logs
MAX_MICRO_BATCH = 16


class SizingError(ValueError):
    """A model config or setting the sizing cannot use; the message names the file or key."""


@dataclass(frozen=True)
class ModelShape:
    """The `config.json` fields the arithmetic needs."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    qk_norm: bool
    attention_bias: bool

    @classmethod
    def from_config(cls, config: dict, name: str, source: str | None = None) -> ModelShape:
        """The shape of `config` (a parsed config.json), shown as `name`; errors name `source` (default: `name`)."""
        required = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        missing = [key for key in required if key not in config]
        if missing:
            raise SizingError(f"{source or name}: lacks {', '.join(missing)}")
        heads = config["num_attention_heads"]
        return cls(
            name=name,
            hidden_size=config["hidden_size"],
            intermediate_size=config["intermediate_size"],
            num_layers=config["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            vocab_size=config["vocab_size"],
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=config.get("model_type") == "qwen3",
            attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )

    @property
    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer: q, k, v, o, gate, up, down."""
        h, f, q, kv = self.hidden_size, self.intermediate_size, self.num_heads * self.head_dim, self.kv_width
        return [(h, q), (h, kv), (h, kv), (q, h), (h, f), (h, f), (f, h)]

    @property
    def kv_width(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        weights = sum(i * o for i, o in self.linear_shapes)
        biases = self.num_heads * self.head_dim + 2 * self.kv_width if self.attention_bias else 0
        norms = 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)
        return weights + biases + norms

    @property
    def embedding_params(self) -> int:
        """Input embeddings plus the lm_head when it is not tied to them."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @property
    def params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params + self.hidden_size  # + final norm

    def lora_params(self, rank: int) -> int:
        """Adapter parameters with LoRA on every linear layer of every decoder layer (peft's all-linear)."""
        return self.num_layers * rank * sum(i + o for i, o in self.linear_shapes)

    def kv_bytes_per_token(self, tensor_parallel: int = 1) -> int:
        """bf16 K and V of one token on one GPU of an engine with this tensor parallelism."""
        kv_heads_per_gpu = max(1, self.num_kv_heads // tensor_parallel)
        return 2 * self.num_layers * kv_heads_per_gpu * self.head_dim * 2


@dataclass(frozen=True)
class RunSettings:
    """The task settings that drive memory: lengths, batch, LoRA, KL, engine memory share, checkpoint rotation."""

    seq_len: int = 17408  # generator.max_input_length + max_generate_length of tasks/grpo.yaml
    train_batch_size: int = 64
    n_samples_per_prompt: int = 8
    lora_rank: int = 0
    use_ref: bool = True
    gpu_memory_utilization: float = 0.7
    keep_local: int = 1


def training_state_bytes(model: ModelShape, settings: RunSettings, world: int) -> int:
    """Weights, gradients and optimizer state (and the ref model) on one GPU under FSDP2 full sharding."""
    if settings.lora_rank:
        states = 2 * model.params + 16 * model.lora_params(settings.lora_rank)
    else:
        states = 16 * model.params
    ref = 2 * model.params if settings.use_ref else 0
    gathered = 2 * 2 * model.layer_params  # one layer unsharded in bf16, plus the prefetched next one
    return math.ceil((states + ref) / world) + gathered


def activation_bytes(model: ModelShape, tokens: int) -> int:
    """Peak activations of one micro-batch of `tokens` tokens with gradient checkpointing (bf16; fp32 logits)."""
    h, f = model.hidden_size, model.intermediate_size
    checkpoints = model.num_layers * tokens * h * 2
    layer_working = tokens * (4 * h + 2 * model.kv_width + model.num_heads * model.head_dim + 3 * f) * 2
    logits = tokens * model.vocab_size * 4 * 2  # fp32 logits and their gradient
    return checkpoints + layer_working + logits


def checkpoint_bytes(model: ModelShape, settings: RunSettings) -> int:
    """One checkpoint (all ranks): fp32 weights and Adam m, v of the trainable parameters."""
    trainable = model.lora_params(settings.lora_rank) if settings.lora_rank else model.params
    return 12 * trainable


def disk_bytes_per_node(model: ModelShape, settings: RunSettings, num_nodes: int = 1) -> int:
    """Disk one node needs: its share of `keep_local + 1` checkpoints, an HF export, the model download, the base."""
    checkpoints = (settings.keep_local + 1) * math.ceil(checkpoint_bytes(model, settings) / num_nodes)
    return checkpoints + 2 * model.params + 2 * model.params + DISK_BASE_BYTES


@dataclass(frozen=True)
class Plan:
    """What fits one model on `num_nodes` x 8 GPUs of one type."""

    model: str
    gpu: str
    num_nodes: int
    micro_train_batch_size_per_gpu: int
    micro_forward_batch_size_per_gpu: int
    train_bytes_per_gpu: int
    engine_tp: int
    num_inference_engines: int
    kv_tokens_per_engine: int
    max_num_seqs: int
    checkpoint_bytes: int
    disk_bytes_per_node: int

    @property
    def fits(self) -> bool:
        return self.micro_train_batch_size_per_gpu > 0 and self.max_num_seqs > 0

    def overrides(self) -> list[str]:
        """Config overrides for this plan (strategy=fsdp2, backend=vllm)."""
        return [
            "trainer.strategy=fsdp2",
            f"trainer.placement.policy_num_nodes={self.num_nodes}",
            f"trainer.placement.policy_num_gpus_per_node={GPUS_PER_NODE}",
            f"trainer.micro_train_batch_size_per_gpu={self.micro_train_batch_size_per_gpu}",
            f"trainer.micro_forward_batch_size_per_gpu={self.micro_forward_batch_size_per_gpu}",
            "generator.backend=vllm",
            f"generator.num_inference_engines={self.num_inference_engines}",
            f"generator.inference_engine_tensor_parallel_size={self.engine_tp}",
            f"generator.max_num_seqs={self.max_num_seqs}",
        ]


def _largest_micro_batch(model: ModelShape, settings: RunSettings, budget: int, states: int, scale: int = 1) -> int:
    """Largest power-of-two micro-batch (<= MAX_MICRO_BATCH) whose activations fit beside `states`; 0 if none."""
    best, micro = 0, 1
    while micro <= MAX_MICRO_BATCH:
        if states + activation_bytes(model, micro * settings.seq_len) // scale <= budget:
            best = micro
        micro *= 2
    return best


def engine_tensor_parallel(model: ModelShape, gpu_bytes: int, settings: RunSettings) -> int:
    """Smallest TP (within a node, dividing the heads) whose bf16 weight shard leaves half the engine budget to KV."""
    budget = settings.gpu_memory_utilization * gpu_bytes
    for tp in (1, 2, 4, 8):
        heads_split = model.num_heads % tp == 0 and (model.num_kv_heads % tp == 0 or tp % model.num_kv_heads == 0)
        if heads_split and 2 * model.params / tp <= budget / 2:
            return tp
    raise SizingError(f"{model.name}: bf16 weights do not fit one node's engines even with TP=8")


def plan(model: ModelShape, gpu: str, num_nodes: int, settings: RunSettings) -> Plan:
    if gpu not in GPU_MEMORY_BYTES:
        raise SizingError(f"unknown GPU {gpu!r}; known: {', '.join(GPU_MEMORY_BYTES)}")
    gpu_bytes = GPU_MEMORY_BYTES[gpu]
    world = num_nodes * GPUS_PER_NODE
    budget = int(TRAIN_HEADROOM * gpu_bytes)
    states = training_state_bytes(model, settings, world)
    micro = _largest_micro_batch(model, settings, budget, states)
    # Forward-only passes (logprobs) keep no checkpoints and no logits gradient: about half the activations.
    forward_micro = _largest_micro_batch(model, settings, budget, states, scale=2)
    tp = engine_tensor_parallel(model, gpu_bytes, settings)
    engines = world // tp
    kv_budget = settings.gpu_memory_utilization * gpu_bytes - 2 * model.params / tp - ENGINE_OVERHEAD_BYTES
    kv_tokens = int(max(0, kv_budget) // model.kv_bytes_per_token(tp))
    trajectories_per_engine = math.ceil(settings.train_batch_size * settings.n_samples_per_prompt / engines)
    return Plan(
        model=model.name,
        gpu=gpu,
        num_nodes=num_nodes,
        micro_train_batch_size_per_gpu=micro,
        micro_forward_batch_size_per_gpu=forward_micro,
        train_bytes_per_gpu=states + activation_bytes(model, max(micro, 1) * settings.seq_len),
        engine_tp=tp,
        num_inference_engines=engines,
        kv_tokens_per_engine=kv_tokens,
        max_num_seqs=min(trajectories_per_engine, kv_tokens // settings.seq_len),
        checkpoint_bytes=checkpoint_bytes(model, settings),
        disk_bytes_per_node=disk_bytes_per_node(model, settings, num_nodes),
    )


def _shipped_config(spec: str) -> Path | None:
    """The model_configs/ file named `spec` (`qwen3-8b`) or holding HF id `spec` (`Qwen/Qwen3-8B`), if any."""
    by_name = CONFIGS_DIR / f"{spec.lower()}.json"
    if by_name.is_file():
        return by_name
    for path in sorted(CONFIGS_DIR.glob("*.json")):
        if json.loads(path.read_text()).get("_name_or_path", "").lower() == spec.lower():
            return path
    return None


def load_model(spec: str) -> ModelShape:
    """A `config.json` path, or a shipped config by file name (`qwen3-8b`) or HF id (`Qwen/Qwen3-8B`)."""
    path = Path(spec) if Path(spec).is_file() else _shipped_config(spec)
    if path is None:
        known = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.json")))
        raise SizingError(f"{spec}: not a config.json path nor a shipped config ({known})")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SizingError(f"{path}: not valid JSON ({e})") from None
    return ModelShape.from_config(config, config.get("_name_or_path") or path.stem, source=str(path))


COLUMNS = (
    "model",
    "params",
    "GPU",
    "nodes",
    "train GiB/GPU",
    "micro train/fwd",
    "engines x TP",
    "KV tokens/engine",
    "max_num_seqs",
    "ckpt GB",
    "disk GB/node",
)


def table_rows(models: list[ModelShape], nodes: list[int], settings: RunSettings) -> list[tuple[str, ...]]:
    rows = []
    for model in models:
        for gpu in GPU_MEMORY_BYTES:
            for n in nodes:
                p = plan(model, gpu, n, settings)
                rows.append(
                    (
                        model.name,
                        f"{model.params / 1e9:.2f}B",
                        gpu,
                        str(n),
                        f"{p.train_bytes_per_gpu / GIB:.1f}",
                        f"{p.micro_train_batch_size_per_gpu}/{p.micro_forward_batch_size_per_gpu}",
                        f"{p.num_inference_engines} x {p.engine_tp}",
                        f"{p.kv_tokens_per_engine:,}",
                        str(p.max_num_seqs),
                        f"{p.checkpoint_bytes / 1e9:.0f}",
                        f"{p.disk_bytes_per_node / 1e9:.0f}",
                    )
                )
    return rows


def format_table(rows: list[tuple[str, ...]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    return (
        "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in [COLUMNS, *rows])
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="config.json paths or shipped names (qwen3-8b, qwen3-14b, ...)")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2], help="node counts to plan for (8 GPUs each)")
    defaults = RunSettings()
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len, help="max tokens of one trajectory")
    parser.add_argument("--train-batch-size", type=int, default=defaults.train_batch_size)
    parser.add_argument("--n-samples-per-prompt", type=int, default=defaults.n_samples_per_prompt)
    parser.add_argument("--lora-rank", type=int, default=defaults.lora_rank, help="0 = full fine-tuning")
    parser.add_argument("--no-ref", action="store_true", help="no ref model (no KL term)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=defaults.gpu_memory_utilization)
    parser.add_argument("--keep-local", type=int, default=defaults.keep_local, help="trainer.s3.keep_local")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--overrides", action="store_true", help="also print each plan's config overrides")
    args = parser.parse_args(argv)
    settings = RunSettings(
        seq_len=args.seq_len,
        train_batch_size=args.train_batch_size,
        n_samples_per_prompt=args.n_samples_per_prompt,
        lora_rank=args.lora_rank,
        use_ref=not args.no_ref,
        gpu_memory_utilization=args.gpu_memory_utilization,
        keep_local=args.keep_local,
    )
    try:
        models = [load_model(spec) for spec in args.models]
        print(format_table(table_rows(models, args.nodes, settings), args.markdown), end="")
        if args.overrides:
            for model in models:
                for gpu in GPU_MEMORY_BYTES:
                    for n in args.nodes:
                        p = plan(model, gpu, n, settings)
                        body = " ".join(p.overrides()) if p.fits else "does not fit (no micro-batch or no engine slot)"
                        print(f"\n# {model.name} on {n} x 8 {gpu}\n{body}")
    except SizingError as e:
        print(f"sizing: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
