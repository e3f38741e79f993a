# Sourced by the CPU examples: the shared recipe for GRPO with LoRA on the default CPU model
# (SmolLM2-135M-Instruct; trainer.device and trainer.bf16 are left to decide: fp32 on the CPU, which is ~4x faster than
# bf16 on CPUs without AMX, and bf16 on a GPU, which it uses when there is one): 4 prompts x 4 samples per
# step, one optimizer step per batch, no KL, eval before training, training forwards packed without padding (less
# compute and memory, same results) in micro-batches of 2 sequences (with packing the prompt prefix they share runs
# once per mini-batch, so small micro-batches cost little time and keep the update's activations small).
# Each example adds its data, env and lengths.
# shellcheck shell=bash
CPU_LORA_GRPO_OVERRIDES=(
    trainer.policy.model.path=smollm2-135m-instruct
    trainer.gradient_checkpointing=false
    trainer.policy.model.lora.rank=32
    trainer.policy.model.lora.alpha=64
    trainer.policy.optimizer_config.lr=2e-4
    trainer.algorithm.advantage_estimator=grpo
    trainer.algorithm.use_kl_loss=false
    trainer.epochs=1
    trainer.train_batch_size=4
    trainer.policy_mini_batch_size=4
    trainer.micro_train_batch_size_per_gpu=2
    trainer.micro_forward_batch_size_per_gpu=16
    trainer.use_sample_packing=true
    trainer.eval_before_train=true
    generator.n_samples_per_prompt=4
    trainer.max_ckpts_to_keep=1
    "trainer.logger=[console,jsonl,tensorboard]"
)

# Sourced by the tool-calling examples (MCP, tau-bench) too: short agent turns, each ending at a call's closing tag.
CPU_TOOL_CALL_OVERRIDES=(
    generator.max_num_seqs=16
    generator.max_turns=3
    generator.sampling_params.max_generate_length=64
    generator.sampling_params.temperature=0.7
    generator.eval_sampling_params.max_generate_length=64
    "generator.sampling_params.stop=['</tool_call>']"
    "generator.eval_sampling_params.stop=['</tool_call>']"
)

# Sourced by examples that run with ENGINE=vllm: the vLLM engine on vLLM's CPU build (skyrl-train/docs/vllm.md). Not
# colocated (the CPU build has no sleep mode), fp32 like the trainer, and an explicit KV-cache size (on the CPU build
# gpu_memory_utilization is a fraction of the machine's RAM).
CPU_VLLM_OVERRIDES=(
    generator.backend=vllm
    trainer.placement.colocate_all=false
    generator.model_dtype=float32
    +generator.engine_init_kwargs.kv_cache_memory_bytes=1073741824
    +generator.engine_init_kwargs.max_model_len=4096
)
