"""A not-implemented key stops `main_base` with exit status 2, naming the key, before any tokenizer or model loads."""

import subprocess
import sys
import time

# Runs `python -m skyrl_train.entrypoints.main_base ARGS` with transformers' loaders replaced by a tripwire that
# exits 99, so a refusal that came only after loading would show up as status 99.
_TRIPWIRE_MAIN = """
import runpy, sys
import transformers

def tripwire(*args, **kwargs):
    print("TRIPWIRE: from_pretrained called", file=sys.stderr)
    raise SystemExit(99)

transformers.AutoModelForCausalLM.from_pretrained = tripwire
transformers.AutoTokenizer.from_pretrained = tripwire
sys.argv = ["main_base", *sys.argv[1:]]
runpy.run_module("skyrl_train.entrypoints.main_base", run_name="__main__", alter_sys=True)
"""


def run_main_base(*overrides: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", _TRIPWIRE_MAIN, *overrides], capture_output=True, text=True, timeout=120
    )
    return result, time.perf_counter() - start


def test_refused_keys_are_named_before_anything_loads():
    result, seconds = run_main_base(
        "trainer.placement.policy_num_gpus_per_node=2",
        "trainer.policy.fsdp_config.cpu_offload=true",
        "generator.inference_engine_expert_parallel_size=2",
    )
    print(f"main_base with refused keys exited {result.returncode} after {seconds:.1f} s (imports included)")
    assert result.returncode == 2, result.stderr
    assert "TRIPWIRE" not in result.stderr
    assert (
        "trainer.placement.policy_num_gpus_per_node=2 has no effect in this config: it applies only with "
        "trainer.strategy=fsdp2" in result.stderr
    )
    assert "trainer.policy.fsdp_config.cpu_offload=True is not implemented in this fork" in result.stderr
    assert "generator.inference_engine_expert_parallel_size=2 is not implemented in this fork" in result.stderr


def test_the_tripwire_fires_when_a_valid_config_reaches_loading(tmp_path):
    result, _ = run_main_base(f"trainer.export_path={tmp_path}", f"trainer.ckpt_path={tmp_path}")
    assert result.returncode == 99, result.stderr
    assert "TRIPWIRE: from_pretrained called" in result.stderr
