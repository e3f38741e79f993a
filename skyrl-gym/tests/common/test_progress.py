"""`Progress`: a tqdm bar on a terminal, periodic log lines elsewhere."""

import logging

from skyrl_gym.common.progress import Progress


def test_without_a_terminal_it_logs_at_most_every_interval_with_the_eta_and_once_at_the_end(caplog):
    now = [0.0]
    log = logging.getLogger("progress-test")
    with caplog.at_level(logging.INFO, logger="progress-test"):
        progress = Progress(
            5, "convert", unit="stage", logger=log, terminal=False, interval_s=10.0, clock=lambda: now[0]
        )
        for t in (2.0, 12.0, 14.0, 24.0, 26.0):
            now[0] = t
            progress.advance()
        progress.close()
    assert [r.getMessage() for r in caplog.records] == [
        "convert: 2/5 stages done (12 s, ETA 18 s)",
        "convert: 4/5 stages done (24 s, ETA 6 s)",
        "convert: 5/5 stages done (26 s)",
    ]


def test_on_a_terminal_it_draws_a_bar_with_tokens_per_second_and_logs_nothing(capsys, caplog):
    now = [0.0]
    with caplog.at_level(logging.INFO), Progress(2, "generate", terminal=True, clock=lambda: now[0]) as progress:
        now[0] = 2.0
        progress.advance(tokens=30)
        now[0] = 4.0
        progress.advance(tokens=10)
    bar = capsys.readouterr().err
    assert "generate: 100%" in bar and "2/2" in bar and "10.0 tokens/s" in bar
    assert caplog.records == []
