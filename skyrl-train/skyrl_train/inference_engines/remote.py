"""`RemoteInferenceEngine`: one vLLM or OpenAI-compatible server (`python -m skyrl_train.serve` included) as an engine.

Generation goes through `POST /v1/completions` with token-id prompts (token-in) and vLLM's extensions
`return_token_ids` (token-out), `include_stop_str_in_output`, `top_k`, `min_p`, `repetition_penalty`, and `logprobs:
0` for each sampled token's logprob. The response text is decoded here from the returned token ids, exactly as the
hf engine does it. A server that returns no `token_ids` (text only) still works: its text is re-tokenised, which can
differ from what the model sampled, so the first such response logs an error, every such response is flagged
(`InferenceEngineOutput.retokenized`, counted as `generate/retokenized_turns`) and its logprobs are dropped.

Each response reports the weight version that generated it: the server's own (`weight_version` on each choice, as
our server sends it), else the version last synced to this server by this process.

Retries: a request that cannot reach the server (connection refused or dropped, timeout, 502/503/504) is retried
`max_retries` times with doubling backoff; then the engine raises `EngineUnavailableError`, which takes it out of
service in an `InferenceEngineClient`. Other errors (a 4xx naming a bad field, a 500 from the model) are raised as is.

Control calls use the routes of upstream SkyRL's server wrapper (see `skyrl_train.serve.control`); a server without
them (404: also ours when started without `--enable-control`) gets an error saying so.

Credentials: `api_key` goes as `Authorization: Bearer` with generation requests (a server started with `--api-key`
needs it), `control_token` with control calls (`--control-token`). A CUDA IPC weight update is refused here: its
handles never leave the job (`types.weight_sync_requests`), so a remote engine gets the weights by broadcast or as
a LoRA folder.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import httpx

from skyrl_gym.common.stop_reasons import StopReason
from skyrl_train.inference_engines.base import (
    InferenceEngineInput,
    InferenceEngineInterface,
    InferenceEngineOutput,
    SamplingParams,
)
from skyrl_train.inference_engines.client import EngineUnavailableError

if TYPE_CHECKING:
    from skyrl_train.types.weight_sync_init_info import WeightSyncInitInfo
    from skyrl_train.types.weight_sync_requests import WeightUpdateRequest

__all__ = ["RemoteInferenceEngine", "server_url"]

logger = logging.getLogger(__name__)

_RETRY_STATUS = frozenset({502, 503, 504})
_CONNECT_TIMEOUT_S = 10.0


def server_url(address: str) -> str:
    """`host:port` (the config's form) or a full URL -> the server's base URL without a trailing slash or `/v1`."""
    url = address if "://" in address else f"http://{address}"
    return url.rstrip("/").removesuffix("/v1")


class RemoteInferenceEngine(InferenceEngineInterface):
    """The server at `url` (see the module docstring).

    Args:
        url: `host:port` or `http://host:port`.
        model_name: the `model` value requests name (the server's served model name).
        tokenizer: the policy's tokenizer (chat templates for `prompts`, decoding token ids, re-tokenising text).
        max_retries, retry_backoff_s: bounded retries of unreachable requests (first wait `retry_backoff_s`).
        request_timeout_s: most seconds one generation request may take (None: no limit; the generator's
            trajectory timeout still applies).
        tp_size, pp_size, dp_size: the server's parallelism (its ranks in the weight-update group).
        api_key: sent with generation requests (`--api-key` of our server, vLLM's `--api-key`); None sends none.
        control_token: sent with control calls (our server's `--control-token`); None sends none.
    """

    def __init__(
        self,
        url: str,
        model_name: str,
        tokenizer,
        *,
        max_retries: int = 3,
        retry_backoff_s: float = 0.5,
        request_timeout_s: float | None = None,
        tp_size: int = 1,
        pp_size: int = 1,
        dp_size: int = 1,
        api_key: str | None = None,
        control_token: str | None = None,
    ):
        self.url = server_url(url)
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self._parallel = (tp_size, pp_size, dp_size)
        self._http = httpx.AsyncClient(
            base_url=self.url, timeout=httpx.Timeout(request_timeout_s, connect=_CONNECT_TIMEOUT_S)
        )
        self.weight_version: int | None = None
        """The version last synced to this server by this process (None before the first sync)."""
        self.retokenized_responses = 0
        """Responses whose token ids were re-encoded from text (the server returned no token ids)."""
        self._warned: set[str] = set()
        self.api_key = api_key
        self.control_token = control_token

    def tp_size(self) -> int:
        return self._parallel[0]

    def pp_size(self) -> int:
        return self._parallel[1]

    def dp_size(self) -> int:
        return self._parallel[2]

    # -- generation -----------------------------------------------------------------------------------------------

    async def generate(self, input_batch: InferenceEngineInput) -> InferenceEngineOutput:
        params = input_batch.get("sampling_params") or SamplingParams()
        prompts = self._prompt_token_ids(input_batch)
        body = completion_body(self.model_name, prompts, params)
        response = await self._post("/v1/completions", body, headers=_bearer(self.api_key))
        choices = sorted(response["choices"], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise RuntimeError(f"{self.url} answered {len(choices)} choices for {len(prompts)} prompts")
        ids, logprobs, retokenized = [], [], []
        for choice in choices:
            token_ids = choice.get("token_ids")
            retokenized.append(token_ids is None)
            if token_ids is None:
                self._warn_retokenized()
                token_ids = self.tokenizer.encode(choice["text"], add_special_tokens=False)
            ids.append(list(token_ids))
            logprobs.append(None if retokenized[-1] else _token_logprobs(choice, len(token_ids)))
        if params.logprobs is None:
            logprobs = None
        elif None in logprobs:
            if not any(retokenized):
                self._warn_once(
                    "no_logprobs", "%s returned no logprob for every sampled token: rollout logprobs are dropped"
                )
            logprobs = None
        return InferenceEngineOutput(
            responses=[
                self._text(i, c["text"], params.stop, r) for i, c, r in zip(ids, choices, retokenized, strict=True)
            ],
            response_ids=ids,
            stop_reasons=[_stop_reason(c.get("finish_reason")) for c in choices],
            response_logprobs=logprobs,
            weight_versions=[c.get("weight_version", self.weight_version) for c in choices],
            retokenized=retokenized,
        )

    def _prompt_token_ids(self, input_batch: InferenceEngineInput) -> list[list[int]]:
        token_ids, conversations = input_batch.get("prompt_token_ids"), input_batch.get("prompts")
        if (token_ids is None) == (conversations is None):
            raise ValueError("exactly one of prompt_token_ids and prompts must be given")
        if token_ids is not None:
            return [list(ids) for ids in token_ids]
        return [
            list(
                self.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=True)[
                    "input_ids"
                ]
            )
            for c in conversations
        ]

    def _text(self, token_ids: list[int], server_text: str, stop: list[str] | None, retokenized: bool) -> str:
        """The response text as the hf engine gives it: decoded from the sampled ids (special tokens skipped),
        ending at the stop string that ended it, if any."""
        if retokenized:
            return server_text
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        ends = [text.find(s) + len(s) for s in stop or [] if s in text]
        return text[: min(ends)] if ends else text

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, self.url)

    def _warn_retokenized(self) -> None:
        if self.retokenized_responses == 0:
            logger.error(
                "%s returns text without token ids: its responses are RE-TOKENISED, which can differ from the tokens "
                "the model sampled (training on them is not token-in/token-out) and drops their logprobs; use a "
                "server with token-id output (vLLM >= 0.10.2, python -m skyrl_train.serve). Counted per step as "
                "generate/retokenized_turns.",
                self.url,
            )
        self.retokenized_responses += 1

    # -- control --------------------------------------------------------------------------------------------------

    async def sleep(self) -> None:
        await self._control("/sleep")

    async def wake_up(self, tags: list[str] | None = None) -> None:
        await self._control("/wake_up", {"tags": tags} if tags else None)

    async def reset_prefix_cache(self) -> None:
        await self._control("/reset_prefix_cache")

    async def init_weight_update_communicator(self, info: WeightSyncInitInfo) -> None:
        await self._control("/init_weight_update_communicator", info.to_json(), timeout=info.timeout_s + 30)

    async def update_named_weights(self, request: WeightUpdateRequest) -> None:
        from skyrl_train.types.weight_sync_requests import NO_JSON_FORM, CudaIpcWeightUpdateRequest

        if isinstance(request, CudaIpcWeightUpdateRequest):
            raise ValueError(f"{self.url} is a remote engine: {NO_JSON_FORM}")
        await self._control("/update_weights", request.to_json(), timeout=None)
        self.weight_version = request.weight_version

    async def destroy_weights_update_group(self) -> None:
        await self._control("/destroy_weights_update_group")

    async def teardown(self) -> None:
        await self._http.aclose()

    async def _control(self, route: str, body: dict[str, Any] | None = None, timeout: float | None = 60.0) -> None:
        try:
            await self._post(route, body or {}, timeout=timeout, headers=_bearer(self.control_token))
        except httpx.HTTPStatusError as error:
            if error.response.status_code == 404:
                raise RuntimeError(
                    f"{self.url} has no {route} route: weight sync and engine control need a server with SkyRL's "
                    "control routes (python -m skyrl_train.serve --enable-control, or vLLM behind SkyRL's server "
                    "wrapper)"
                ) from error
            if error.response.status_code in (401, 403):
                raise RuntimeError(
                    f"{self.url}{route} refused the control call ({error.response.status_code}): set "
                    "generator.remote_inference_engine_control_token to the server's --control-token"
                ) from error
            raise

    # -- HTTP -----------------------------------------------------------------------------------------------------

    async def _post(self, route: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """POST with bounded retries of unreachable attempts; raises `EngineUnavailableError` when they run out."""
        wait = self.retry_backoff_s
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._http.post(route, json=body, **kwargs)
            except httpx.TransportError as error:  # refused, dropped, timed out
                failure = f"{type(error).__name__}: {error}"
            else:
                if response.status_code not in _RETRY_STATUS:
                    if response.is_error:
                        raise httpx.HTTPStatusError(
                            f"{self.url}{route} answered {response.status_code}: {response.text[:500]}",
                            request=response.request,
                            response=response,
                        )
                    return response.json()
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
            if attempt < self.max_retries:
                logger.warning(
                    "%s%s: %s; retry %d/%d in %.1f s", self.url, route, failure, attempt + 1, self.max_retries, wait
                )
                await asyncio.sleep(wait)
                wait *= 2
        raise EngineUnavailableError(f"{self.url} unreachable after {self.max_retries + 1} attempts ({failure})")


def completion_body(model: str, prompts: list[list[int]], params: SamplingParams) -> dict[str, Any]:
    """The `/v1/completions` body of one call: OpenAI's fields plus vLLM's extensions (see the module docstring)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompts,
        "max_tokens": params.max_generate_length,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k,
        "min_p": params.min_p,
        "repetition_penalty": params.repetition_penalty,
        "return_token_ids": True,
        "include_stop_str_in_output": True,
    }
    if params.logprobs is not None:
        body["logprobs"] = 0
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    if params.additional_kwargs.get("ignore_eos"):
        body["ignore_eos"] = True
    return body


def _bearer(secret: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"} if secret else {}


def _token_logprobs(choice: dict[str, Any], n: int) -> list[float] | None:
    """The choice's logprob of each of its `n` sampled tokens (OpenAI's `logprobs.token_logprobs`), or None."""
    values = (choice.get("logprobs") or {}).get("token_logprobs")
    return [float(v) for v in values] if values is not None and len(values) == n else None


def _stop_reason(finish_reason: str | None) -> str:
    if finish_reason == "length":
        return StopReason.LENGTH
    if finish_reason == "abort":
        return StopReason.ABORT
    return StopReason.STOP
