"""Prompt datasets (upstream SkyRL's row format), a resumable prompt loader, and batch-tensor conversion."""

from skyrl_train.dataset.dataloader import PromptDataLoader
from skyrl_train.dataset.dataset import PromptDataset, PromptItem, templated_prompt_lengths
from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
from skyrl_train.dataset.sources import DataSourceError, load_rows
from skyrl_train.dataset.validation import DatasetValidationError, RowProblem

__all__ = [
    "DataSourceError",
    "DatasetValidationError",
    "PromptDataLoader",
    "PromptDataset",
    "PromptItem",
    "RowProblem",
    "convert_prompts_responses_to_batch_tensors",
    "load_rows",
    "templated_prompt_lengths",
]
