"""Evaluate a model without training: `python -m skyrl_train.entrypoints.main_generate key=value ...`.

Takes the training config (same `--config` presets and overrides, same validation). `trainer.policy.model.path` is the model to
evaluate: any HF folder or id, e.g. a run's export `<export_path>/global_step_N/policy` (LoRA merged) or the
default alias; `data.val_data` is the eval set. It runs the env preflight, then one eval (upstream's
`EvalOnlyEntrypoint`: `eval_sampling_params`, `eval_n_samples_per_prompt`; with `generator.run_engines_locally=false`
the remote servers' model is evaluated instead and nothing is loaded here; with `generator.backend=vllm` vLLM engines
load it), logs the `eval/*` metrics to the
trackers, writes the dumps to `<export_path>/dumped_evals/eval_only/` and, with S3 on, uploads them to
`s3://{eval_bucket}/evals/{run_name}/eval_only/`. `skyrl-analyze-evals <export_path>` reads them like training's.
Exit status: 0, 2 for an invalid config, 1 when the preflight stops the run.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from skyrl_train.dataset import PromptDataLoader, PromptDataset
from skyrl_train.entrypoints.main_base import BasePPOExp, run_cli
from skyrl_train.evaluate import evaluate
from skyrl_train.models import load_causal_lm

logger = logging.getLogger(__name__)

EVAL_ONLY_DIR = "eval_only"
"""Dump folder name under `<export_path>/dumped_evals/` (upstream's)."""


class EvalOnlyEntrypoint(BasePPOExp):
    """`BasePPOExp` without training: no train data, no workers, one eval. Its `get_*` hooks apply as in training."""

    def get_eval_dataset(self) -> PromptDataset:
        if not self.cfg.data.val_data:
            raise ValueError("data.val_data is empty: there is nothing to evaluate")
        return PromptDataset(self.cfg.data.val_data, self.tokenizer, self.cfg.trainer.max_prompt_length)

    def run(self) -> dict[str, float]:
        """Run the eval once; returns its metrics. S3 uploads are flushed before it returns."""
        try:
            return self._evaluate()
        finally:
            if self.uploader is not None:
                self.uploader.close()

    def _evaluate(self) -> dict[str, float]:
        t = self.cfg.trainer
        tokenizer = self.tokenizer
        dataset = self.eval_dataset
        self.preflight(None, dataset)
        if self.cfg.generator.run_engines_locally and self.cfg.generator.backend == "vllm":
            engine = self.make_vllm_engines(None, tokenizer)  # they load the model path themselves
        elif self.cfg.generator.run_engines_locally:
            self.log_device()
            # no training here: loaded straight in the dtype the engine decodes in, so it holds no second copy
            dtype = self.strategy.precision.engine_cast or self.strategy.dtype
            model = load_causal_lm(t.policy.model.path, dtype, self.strategy.device)
            engine = self.make_inference_engine(model, tokenizer)
        else:  # the servers' model, as they serve it
            engine = self.make_remote_engines(tokenizer)
        generator = self.get_generator(self.cfg, tokenizer, engine)
        dump_dir = self.export_path / "dumped_evals" / EVAL_ONLY_DIR if t.dump_eval_results else None
        loader = PromptDataLoader.for_eval(dataset, t.eval_batch_size)

        async def evaluate_then_teardown() -> dict[str, float]:
            try:
                return await evaluate(loader, generator, self.cfg, None, tokenizer, dump_dir)
            finally:
                await engine.teardown()

        metrics = asyncio.run(evaluate_then_teardown())
        with self.get_tracker() as tracker:
            tracker.log(metrics, step=0)
        uploads = self.get_eval_dump_uploader()
        if dump_dir is not None and uploads is not None:
            uploads.upload(dump_dir, None)
        return metrics


def main(argv: list[str] | None = None) -> int:
    """Load and validate the config from `argv` overrides (default: sys.argv[1:]), then evaluate."""
    return run_cli(argv, __doc__, lambda cfg: EvalOnlyEntrypoint(cfg).run())


if __name__ == "__main__":
    sys.exit(main())
