"""The `hf` backend: transformers models served in-process, the CPU default (also on a GPU).

- engine.py: `HFInferenceEngine` (the engine interface; a scheduler thread; weight updates; sleep / wake);
- batcher.py: `ContinuousBatcher`, continuous batching of the concurrent agent loops' requests;
- prefill_split.py: which prompts of a prefill group share a forward (on the CPU, short uncached tails apart from long);
- kv_buffer.py: the running batch's left-padded KV, rows joining and leaving between decode steps;
- prefix_cache.py: the prefix KV cache, keyed by the module's `WeightVersion`;
- prefix_attention.py: decode attention that reads a prefix shared by every row once per step;
- sampling.py: logits processing and sampling for rows with different sampling parameters;
- lora_merge.py: decoding with a LoRA adapter folded into copies of the base weights;
- decode_weights.py: the weights decoding uses while the engine is busy (LoRA folded, another dtype, few-row linears);
- few_row_linear.py: float32 CPU linear layers taking decode-size inputs as ``(W @ xᵀ)ᵀ``.
"""

from skyrl_train.inference_engines.hf.batcher import EngineStats
from skyrl_train.inference_engines.hf.engine import HFInferenceEngine

__all__ = ["EngineStats", "HFInferenceEngine"]
