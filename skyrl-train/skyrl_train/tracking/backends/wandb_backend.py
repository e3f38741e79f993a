"""W&B backend. Works with no API key and no network: it then runs offline and says so.

Mode rule (`choose_wandb_mode`): an explicit ``WANDB_MODE`` is obeyed; with no ``WANDB_MODE`` the run is online
if an API key is configured (``WANDB_API_KEY`` or a ``wandb login`` netrc entry) and offline otherwise. An
explicit online mode without a key raises instead of letting wandb prompt for a login. Offline runs land in
``<output_dir>/wandb/offline-run-*`` and upload later with ``wandb sync <that folder>``.

Each step is sent with ``run.log(..., step=step, commit=True)`` to wandb's service process (``wandb-core``),
which writes the run file on a timer (15 s by default). We shorten that timer to `FLUSH_INTERVAL_S`, so a
killed job loses at most the last second of W&B data; ``wandb-core`` also outlives a SIGKILLed trainer long
enough to write what it already holds. ``metrics.jsonl`` (fsync per step) stays the exact record. Strings are
dropped (W&B is a numeric backend here); NaN/inf are sent as they are.

Resume: the run id is chosen here, kept in every checkpoint (`state`, in ``trainer_state.pt``) and, for a run resumed
from a checkpoint, passed back (`resume`) to ``wandb.init(id=..., resume="allow")``, so the resumed run logs into the
same W&B run (offline: a new ``offline-run-*-<id>`` folder that ``wandb sync`` merges into it). ``wandb.init`` runs at
the first `log`, once the trainer knows whether it resumes.
"""

from __future__ import annotations

import logging
import netrc
import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import wandb

from skyrl_train.tracking.backends import Backend
from skyrl_train.tracking.values import StepMetrics

logger = logging.getLogger(__name__)

_ONLINE_MODES = ("online", "run", "shared")
_DEFAULT_HOST = "https://api.wandb.ai"
FLUSH_INTERVAL_S = 1.0
# A private wandb setting; skipped on wandb versions that do not have it.
_FLUSH_SETTING = "x_transaction_log_flush_interval"


def has_wandb_key(environ: Mapping[str, str]) -> bool:
    """Whether an API key is configured, without reading it: ``WANDB_API_KEY`` or a netrc entry for the host."""
    if environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(environ.get("WANDB_BASE_URL") or _DEFAULT_HOST).hostname
    path = os.path.expanduser(environ.get("NETRC") or os.path.join(environ.get("HOME") or "~", ".netrc"))
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def choose_wandb_mode(environ: Mapping[str, str]) -> str | None:
    """The mode to force on ``wandb.init``: ``"offline"``, or None to leave it to wandb (``WANDB_MODE`` / online).

    Raises RuntimeError for an explicit online mode with no key configured.
    """
    mode = (environ.get("WANDB_MODE") or "").strip().lower()
    if mode:
        if mode in _ONLINE_MODES and not has_wandb_key(environ):
            raise RuntimeError(
                f"WANDB_MODE={mode} but no W&B API key is configured; set WANDB_API_KEY (or run `wandb login`), "
                "or use WANDB_MODE=offline"
            )
        return None
    return None if has_wandb_key(environ) else "offline"


class WandbBackend(Backend):
    def __init__(self, project_name: str, run_name: str, output_dir: Path, config: dict[str, Any] | None) -> None:
        self._mode = choose_wandb_mode(os.environ)
        output_dir.mkdir(parents=True, exist_ok=True)
        if self._mode == "offline":
            logger.warning(
                "W&B: no API key configured and WANDB_MODE not set, so logging OFFLINE to %s/wandb; "
                "upload later with `wandb sync <run folder>`",
                output_dir,
            )
        self._init_args = dict(project=project_name, name=run_name, config=config, dir=str(output_dir))
        self.run_id = uuid.uuid4().hex[:8]
        self._resumed = False
        self._run = None
        self.run_dir: Path | None = None
        """The run's local folder (``<output_dir>/wandb/<offline-run|run>-<time>-<id>``), once it started."""

    def state(self) -> dict[str, str]:
        return {"run_id": self.run_id}

    def resume(self, state: Mapping[str, str]) -> None:
        if self._run is not None:
            raise RuntimeError("the W&B run already started: resume() must come before the first log()")
        self.run_id, self._resumed = state["run_id"], True
        logger.info("W&B: resuming run %s", self.run_id)

    def _started(self):
        if self._run is None:
            flush = {_FLUSH_SETTING: FLUSH_INTERVAL_S} if _FLUSH_SETTING in wandb.Settings.model_fields else {}
            self._run = wandb.init(
                **self._init_args,
                id=self.run_id,
                resume="allow" if self._resumed else None,
                mode=self._mode,
                settings=wandb.Settings(**flush),
            )
            self.run_dir = Path(self._run.dir).parent
        return self._run

    def log(self, step: int, metrics: StepMetrics) -> None:
        self._started().log(dict(metrics.scalars), step=step, commit=True)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
