"""Push HF exports to the Hugging Face Hub (``trainer.push_to_hub``, ``trainer.hub_model_id``).

`check_hub_access` runs before the model loads, so a run that cannot push stops at once instead of after training:
huggingface_hub's offline mode (``HF_HUB_OFFLINE=1``), no token (``HF_TOKEN`` or ``hf auth login``), an unreachable
Hub (``HF_ENDPOINT``, default https://huggingface.co) or a repo the token cannot create are each refused with the
reason. The checks are huggingface_hub's own: its offline flag, then a ``whoami`` call and ``create_repo`` against the
endpoint it is configured with.
"""

from __future__ import annotations

import logging
from pathlib import Path

__all__ = ["HubPushError", "check_hub_access", "push_folder"]

logger = logging.getLogger(__name__)


class HubPushError(RuntimeError):
    """The Hub cannot take a push now; the message names the repo, the key and the reason."""


def check_hub_access(repo_id: str) -> str:
    """Make sure `repo_id` exists on the Hub and this machine can push to it; returns who pushes, for the log.

    Raises:
        HubPushError: offline mode, no token, Hub unreachable, or the repo cannot be created.
    """
    from huggingface_hub import HfApi, constants

    where = f"trainer.push_to_hub=true cannot push to {repo_id!r} on {constants.ENDPOINT}"
    if constants.HF_HUB_OFFLINE:
        raise HubPushError(
            f"{where}: huggingface_hub is in offline mode (HF_HUB_OFFLINE is set); unset it on a machine that reaches "
            "the Hub, or set trainer.push_to_hub=false and upload the export later"
        )
    api = HfApi()
    try:
        user = api.whoami()["name"]
        api.create_repo(repo_id, exist_ok=True)
    except Exception as exc:  # no token, no network, a refused login or repo: all end in the same refusal
        raise HubPushError(f"{where}: {type(exc).__name__}: {exc}") from exc
    return f"{repo_id} as {user}"


def push_folder(folder: str | Path, repo_id: str, commit_message: str) -> None:
    """Upload `folder` to the model repo `repo_id` as one commit.

    Raises:
        HubPushError: the upload failed (the folder stays on disk).
    """
    from huggingface_hub import HfApi, constants

    try:
        HfApi().upload_folder(repo_id=repo_id, folder_path=str(folder), commit_message=commit_message)
    except Exception as exc:  # the export is on disk either way: say where, and why the push failed
        raise HubPushError(f"could not push {folder} to {repo_id!r}: {type(exc).__name__}: {exc}") from exc
    logger.info("pushed %s to %s/%s (%s)", folder, constants.ENDPOINT, repo_id, commit_message)
