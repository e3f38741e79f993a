"""OpenAI-compatible serving of any model (`python -m skyrl_train.serve`) or of the trainer's live policy
(`generator.enable_http_endpoint=true`): `/v1/chat/completions`, `/v1/completions`, `/v1/models`, `/health`.

`create_app` builds the FastAPI app over any `InferenceEngineInterface`, behind `AccessPolicy` (who may call, see
`access`) and `ServeLimits` (how much a request may ask); `BackgroundServer` runs an app on a thread;
`PolicyEndpoint` is the trainer's endpoint (see `endpoint` for how it shares the engine and weights).
FastAPI and uvicorn are imported with this package, so import it only where serving is wanted.
"""

from skyrl_train.serve.access import AccessPolicy
from skyrl_train.serve.app import create_app
from skyrl_train.serve.endpoint import BackgroundServer, PolicyEndpoint
from skyrl_train.serve.gate import ServingBusy, ServingGate, ServingStopped
from skyrl_train.serve.limits import ServeLimits
from skyrl_train.serve.protocol import OpenAIError
from skyrl_train.serve.serving import OpenAIServing, ToolCallParser, context_length

__all__ = [
    "AccessPolicy",
    "BackgroundServer",
    "OpenAIError",
    "OpenAIServing",
    "PolicyEndpoint",
    "ServeLimits",
    "ServingBusy",
    "ServingGate",
    "ServingStopped",
    "ToolCallParser",
    "context_length",
    "create_app",
]
