"""PromptDataset: concatenation, extras, uids, templated-length filtering, collate."""

from __future__ import annotations

import logging

import pytest

from skyrl_gym.envs.gsm8k.synthetic_data import generate_dataset, write_dataset
from skyrl_train.dataset import PromptDataset, templated_prompt_lengths


def _contents(dataset: PromptDataset) -> list[str]:
    return [dataset[i][0][-1]["content"] for i in range(len(dataset))]


def test_files_of_all_formats_are_concatenated_in_order(three_files):
    dataset = PromptDataset(three_files, tokenizer=None, max_prompt_length=None)
    assert _contents(dataset) == ["a0", "a1", "b0", "c0", "c1"]


def test_uids_number_rows_across_files(three_files):
    dataset = PromptDataset(three_files, tokenizer=None, max_prompt_length=None)
    assert [dataset[i][3] for i in range(len(dataset))] == ["0", "1", "2", "3", "4"]


def test_single_path_string_is_accepted(files):
    dataset = PromptDataset(files.jsonl("d.jsonl", [files.row("q")]), tokenizer=None, max_prompt_length=None)
    assert _contents(dataset) == ["q"]


def test_getitem_returns_messages_env_class_extras_uid(files):
    row = {
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        "env_class": "sql",
        "data_source": "spider",
        "reward_spec": {"method": "rule", "ground_truth": "SELECT 1"},
        "extra_info": {"split": "train", "index": 7},
        "db_id": "concert_singer",
        "data": {"tables": ["a", "b"]},
    }
    dataset = PromptDataset([files.parquet("d.parquet", [row])], tokenizer=None, max_prompt_length=None)
    assert dataset[0] == (
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        "sql",
        {
            "data_source": "spider",
            "reward_spec": {"method": "rule", "ground_truth": "SELECT 1"},
            "extra_info": {"split": "train", "index": 7},
            "db_id": "concert_singer",
            "data": {"tables": ["a", "b"]},
        },
        "0",
    )


def test_row_without_env_class_gets_none(files):
    dataset = PromptDataset([files.jsonl("d.jsonl", [files.row("q")])], tokenizer=None, max_prompt_length=None)
    assert dataset[0] == ([{"role": "user", "content": "q"}], None, {}, "0")


def test_custom_prompt_and_env_class_keys_are_not_in_extras(files):
    path = files.jsonl("d.jsonl", [{"messages": [{"role": "user", "content": "q"}], "env": "gsm8k", "prompt": "raw"}])
    dataset = PromptDataset([path], tokenizer=None, max_prompt_length=None, prompt_key="messages", env_class_key="env")
    assert dataset[0] == ([{"role": "user", "content": "q"}], "gsm8k", {"prompt": "raw"}, "0")


def test_mutating_a_returned_item_does_not_change_the_dataset(files):
    path = files.jsonl("d.jsonl", [files.row("q", extra_info={"k": 1})])
    dataset = PromptDataset([path], tokenizer=None, max_prompt_length=None)
    messages, _, extras, _ = dataset[0]
    messages.append({"role": "assistant", "content": "a"})
    extras["extra_info"]["k"] = 2
    extras["max_turns"] = 5
    assert dataset[0] == ([{"role": "user", "content": "q"}], None, {"extra_info": {"k": 1}}, "0")


def test_negative_index_gives_the_positive_uid(three_files):
    dataset = PromptDataset(three_files, tokenizer=None, max_prompt_length=None)
    assert dataset[-1][3] == "4"


def test_templated_length_of_a_tiny_prompt(tiny_tokenizer):
    # SmolLM2's template, tokens written out:
    # <|im_start|> system \n Be " brief" . <|im_end|> \n     -> 8
    # <|im_start|> user \n Hi <|im_end|> \n                   -> 6
    # <|im_start|> ass istant \n   (generation prompt)         -> 4
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert templated_prompt_lengths(tiny_tokenizer, [prompt]) == [18]


def test_prompt_without_system_message_counts_the_default_system_prompt(tiny_tokenizer):
    # SmolLM2's template inserts "You are a helpful AI assistant named SmolLM, trained by Hugging Face" (16 tokens
    # of text + 5 of framing = 21), then user "Hi" (6) and the generation prompt (4).
    assert templated_prompt_lengths(tiny_tokenizer, [[{"role": "user", "content": "Hi"}]]) == [31]


def _brief(content: str) -> dict:
    return {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": content}]}


def test_prompt_exactly_at_max_prompt_length_is_kept(files, tiny_tokenizer):
    dataset = PromptDataset([files.jsonl("d.jsonl", [_brief("Hi")])], tiny_tokenizer, max_prompt_length=18)
    assert len(dataset) == 1


def test_prompt_one_token_over_max_prompt_length_is_dropped(files, tiny_tokenizer):
    dataset = PromptDataset([files.jsonl("d.jsonl", [_brief("Hi")])], tiny_tokenizer, max_prompt_length=17)
    assert len(dataset) == 0


def test_filtering_logs_count_and_first_dropped_row_ids(files, tiny_tokenizer, caplog):
    long = "Hi " * 40
    rows = [_brief("Hi"), _brief(long)] + [_brief(long)] * 6
    path = files.jsonl("d.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="skyrl_train.dataset.dataset"):
        PromptDataset([path], tiny_tokenizer, max_prompt_length=18)
    assert caplog.messages == [
        f"{path}: dropped 7 of 8 rows whose templated prompt is longer than max_prompt_length=18 tokens: "
        f"{path}:1, {path}:2, {path}:3, {path}:4, {path}:5 (first 5)"
    ]


def test_uids_are_positions_after_filtering(files, tiny_tokenizer):
    path = files.jsonl("d.jsonl", [_brief("Hi"), _brief("Hi " * 40), _brief("Hi")])
    dataset = PromptDataset([path], tiny_tokenizer, max_prompt_length=18)
    assert [dataset[i][3] for i in range(len(dataset))] == ["0", "1"]


def test_collate_fn_builds_lists_per_field(files):
    path = files.jsonl("d.jsonl", [files.row("x", env_class="gsm8k", data_source="s"), files.row("y")])
    dataset = PromptDataset([path], tokenizer=None, max_prompt_length=None)
    assert PromptDataset.collate_fn([dataset[1], dataset[0]]) == {
        "prompt": [[{"role": "user", "content": "y"}], [{"role": "user", "content": "x"}]],
        "env_class": [None, "gsm8k"],
        "env_extras": [{}, {"data_source": "s"}],
        "uid": ["1", "0"],
    }


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_synthetic_arithmetic_rows_round_trip_exactly(tmp_path, tiny_tokenizer, fmt):
    splits = generate_dataset(train_size=6, val_size=0, few_shot=2)
    (path,) = [p for p in write_dataset(splits, tmp_path, fmt) if p.stem == "train"]
    dataset = PromptDataset([str(path)], tiny_tokenizer, max_prompt_length=4096)
    expected = [
        (row["prompt"], row["env_class"], {k: v for k, v in row.items() if k not in ("prompt", "env_class")}, str(i))
        for i, row in enumerate(splits["train"])
    ]
    assert [dataset[i] for i in range(len(dataset))] == expected


def test_prompt_rejected_by_the_chat_template_names_file_and_row(files):
    class RejectingTokenizer:
        def apply_chat_template(self, messages, **kwargs):
            if messages[0]["content"] == "bad":
                raise RuntimeError("Conversation roles must alternate")
            return "ok"

    path = files.jsonl("d.jsonl", [files.row("fine"), files.row("bad")])
    with pytest.raises(ValueError, match="d.jsonl: row 1: the chat template rejects this prompt: Conversation roles"):
        PromptDataset([path], RejectingTokenizer(), max_prompt_length=10)
