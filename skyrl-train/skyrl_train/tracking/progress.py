"""Progress bar for the trainer's steps; the console backend prints its lines above it (``tqdm.write``)."""

from __future__ import annotations

from tqdm import tqdm


def step_progress(total: int, *, initial: int = 0, desc: str = "train") -> tqdm:
    """A bar over ``total`` steps starting at ``initial`` (the resumed global step); call ``.update(1)`` per step."""
    return tqdm(total=total, initial=initial, desc=desc, unit="step", dynamic_ncols=True)
