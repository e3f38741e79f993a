"""Console backend: one compact line per step with the key metrics, printed above a progress bar."""

from skyrl_train.tracking import Tracking, step_progress

METRICS = {
    "timing/step": 12.3456,
    "reward/avg_pass_at_4": 0.5,
    "reward/avg_raw_reward": 0.3125,
    "policy/policy_kl": 0.00123456,
    "generate/avg_num_tokens": 87.5,
    "timing/generate": 8.0,
    "env/last_error": "timeout",
}


def test_the_line_shows_key_metrics_in_a_fixed_order_and_counts_the_rest(capsys):
    with Tracking("proj", "run", "console") as tracker:
        tracker.log(METRICS, step=3)
    assert capsys.readouterr().out == (
        "step 3 | reward/avg_raw_reward=0.3125 | reward/avg_pass_at_4=0.5 | policy/policy_kl=0.001235"
        " | generate/avg_num_tokens=87.5 | timing/step=12.35 | +2 more\n"
    )


def test_lines_print_intact_while_a_progress_bar_is_open(capsys):
    with Tracking("proj", "run", "console") as tracker, step_progress(total=5, initial=2) as bar:
        tracker.log({"reward/avg_raw_reward": 1.0}, step=3)
        bar.update(1)
        assert bar.n == 3
    captured = capsys.readouterr()
    assert captured.out == "step 3 | reward/avg_raw_reward=1\n"
    assert "3/5" in captured.err
