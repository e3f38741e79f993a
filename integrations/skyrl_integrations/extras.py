"""Optional dependencies. The package itself needs only skyrl-gym (no torch, no Ray); a feature that imports more
fails with an error naming the pip extra that installs it:

- ``train``: skyrl-train, whose dataset reader (the trainer's own row reading) ``skyrl-validate-data``, the rule
  baseline and the demonstrations use;
- ``analysis``: matplotlib for ``skyrl-analyze-evals --html`` plots, boto3 for dumps read from S3.
"""

from __future__ import annotations


def missing_extra(exc: ModuleNotFoundError, extra: str, feature: str) -> ModuleNotFoundError:
    """The error to raise (``from exc``) when `feature` cannot import an optional module: it names the module and
    the extra, ``pip install 'skyrl-integrations-toolfork[<extra>]'``."""
    return ModuleNotFoundError(
        f"{feature} needs the {extra!r} extra (module {exc.name!r} is not installed): "
        f"pip install 'skyrl-integrations-toolfork[{extra}]'",
        name=exc.name,
    )
