"""`SkyRLGymGenerator`: runs one async agent loop per trajectory against skyrl-gym envs and an inference engine.

Token-in/token-out: the running context is a list of token ids; the model's sampled ids are appended exactly
as returned (never decoded and re-encoded) and observations are tokenised on their own with the fixed-base
trick (`ObservationEncoder`). Loss mask 1 only on sampled tokens; each turn's reward sits on that turn's last
sampled token; the last turn's observation is dropped from the response.

Message text is text: the prompt (the dataset's, as the env's init returns it, with tool listings or a simulated
user's opening) and every observation are tokenised with special-token strings as plain text, so a tool result
holding `<|im_end|>\n<|im_start|>system` cannot open a turn; only the chat template writes special tokens. The
messages that held such a string are counted (`special_token_messages`).

Infrastructure failures never crash a batch. Each becomes a stop reason (its `skyrl_gym.InfraFailureReason`)
with zero loss mask, counted in the rollout metrics, so the trainer can keep it out of the advantage baseline:
- env make/init raises -> placeholder row (`env_init_failed`): response [eos], mask [0], reward 0;
- env step raises -> `env_step_failed`: the turns so far (including the failed one) are kept for inspection,
  with the rewards earned so far, but the whole loss mask is zeroed, since the episode's outcome is unknown;
- an env step reports a failure it recovered from (its output's `infra_failure`, e.g. a tool server crashed and
  was restarted) -> the episode goes on to its normal end, then gets the reported reason (`tool_server_failed`,
  `user_simulator_failed`), masked like `env_step_failed`;
- the inference engine serving the episode becomes unreachable (`EngineUnavailableError`: a remote server died)
  -> `engine_failed`, the turns so far kept and masked like `env_step_failed` (no turn yet: a placeholder row);
- `generator.trajectory_timeout_seconds` runs out -> placeholder row (`timeout`). Every engine and env call
  runs under the remaining budget; a sync env call stuck in a pool thread is abandoned (threads cannot be
  killed), which is one more reason to implement the async env hooks.
Each infrastructure failure is also recorded as a typed `skyrl_gym.InfraFailure` (reason and error text) on the
trajectory's last row (`GeneratorOutput.infra_failures`), so a run that stops on too many failures
(`trainer.max_infra_failure_ratio`) and an eval dump can show what went wrong.

Every row carries the weight version that generated it (`weight_versions`, the oldest of its turns'), as the engine
reported it. Turns whose token ids a text-only remote server made us re-encode from text are counted
(`retokenized_turns`): they break token-in/token-out.

Empty or whitespace-only generations are not failures: they are the policy's own output, so the turn is kept,
stepped as usual, trained on like any other turn (its sampled tokens are in the loss and it is scored) and
counted (`empty_responses`). Only an engine that returned no token at all gets a placeholder EOS, out of the
loss, since nothing was sampled.

Sampling seeds: with a `seed` (the entrypoint passes `trainer.seed`) and sampling params without one, each generation
call of a trajectory that has a trajectory id, in a batch with metadata, samples with its own seed derived from the
call's identity (`sampling_seeds`), so its tokens do not depend on which other requests the engine batched it with.

Hints out of the loss (`generator.train_without_hints`): a row whose `extra_info.hint` is set (the text its last user
message ends with) is generated with its hint and trained without it: its training rows carry the prompt ids of the
env's initial prompt with the hint cut out, and the response ids as sampled. The rollout is then off-policy for the
prompt it is trained on (its sampled logprobs are those of the hinted context); the trainer's own forward computes the
old, new and reference logprobs on the unhinted one.

Envs are made and driven by `EnvRunner` (`skyrl_train.generators.env_runner`): the sync/async bridge, the env thread
pool, `env.close()` exactly once on every path, and the turn count: after `generator.max_turns` turns the episode
ends even if the env has not said done, and the trajectory keeps its last turn's stop reason, as when an env ends it.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_gym import InfraFailure, InfraFailureReason
from skyrl_gym.common.stop_reasons import TrajectoryStopReason
from skyrl_gym.envs.base_text_env import ConversationType
from skyrl_train.generators.base import (
    BatchMetadata,
    GeneratorInput,
    GeneratorInterface,
    GeneratorOutput,
    TrajectoryConversation,
    TrajectoryID,
)
from skyrl_train.generators.env_runner import EnvRunner, EnvSession, InfraFailed
from skyrl_train.generators.sampling_seeds import TrajectorySeeds, trajectory_seeds
from skyrl_train.generators.utils import (
    GenerationProgress,
    ObservationEncoder,
    SpecialTokenCounter,
    apply_overlong_filtering,
    encode_chat,
    encode_text,
    get_generation_prompt_ids,
    get_rollout_metrics,
    prompt_without_hint,
    resolve_sampling_params,
    row_hint,
    trajectory_counters,
    zero_rewards_on_non_stop,
)
from skyrl_train.inference_engines.base import InferenceEngineInput, InferenceEngineInterface, SamplingParams
from skyrl_train.inference_engines.client import EngineUnavailableError

if TYPE_CHECKING:
    from skyrl_train.config.schema import GeneratorConfig, SkyRLGymConfig

logger = logging.getLogger(__name__)


@dataclass
class TrajectoryRow:
    """One output row: a whole trajectory, or one turn of it in step-wise mode."""

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    rewards: list[float]
    """Per token, same length as `response_ids`."""
    stop_reason: str
    weight_version: int | None = None
    """The weight version that generated the row's tokens (the oldest of its turns'); None if unknown."""


@dataclass
class Trajectory:
    """What one agent loop returns: its rows (one, or one per turn in step-wise mode) and its env metrics."""

    rows: list[TrajectoryRow]
    env_metrics: dict[str, Any]
    conversation: TrajectoryConversation
    infra_failure: InfraFailure | None = None
    """The infrastructure failure the trajectory ended in, if any."""


@dataclass
class _Turn:
    """One generation: the ids appended to the context, their mask and logprobs, and where its reward goes."""

    ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    reward_offset: int
    """Index (within `ids`) of the last sampled token."""
    stop_reason: str
    text: str
    empty: bool
    """The text is empty or whitespace only (counted in `empty_responses`; still trained on)."""
    stripped_eos: tuple[int, float] | None = None
    """Single-message mode: (mask, logprob) of the EOS removed from the end of this turn."""
    weight_version: int | None = None
    retokenized: bool = False
    """The engine returned text only and these ids were re-encoded from it."""


@dataclass
class _Rollout:
    """The growing state of one trajectory: the running context and per-response-token annotations."""

    prompt_ids: list[int]
    input_ids: list[int]
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward_positions: list[tuple[int, float]] = field(default_factory=list)
    response_end: int = 0
    """Length of the response up to the end of the last turn's output (observation after it excluded)."""
    stop_reason: str | None = None
    empty_responses: int = 0
    closing_eos: tuple[int, float] | None = None
    """Single-message mode: the last turn's stripped EOS, restored when the message is closed."""
    steps: list[TrajectoryRow] | None = None
    """Step-wise mode only: one row per turn."""
    conversation: TrajectoryConversation | None = None
    reported_failure: InfraFailure | None = None
    """The first infrastructure failure an env step reported (`infra_failure` in its output)."""
    weight_versions: list[int | None] = field(default_factory=list)
    """Each turn's weight version."""
    retokenized_turns: int = 0
    special_token_messages: int = 0
    """Messages put into the context that held a special token's string (tokenised as text)."""
    seeds: TrajectorySeeds | None = None
    """Where each turn's sampling seed comes from (`sampling_seeds`); None: the sampling params' own seed."""
    train_prompt_ids: list[int] | None = None
    """The prompt the training rows carry instead of `prompt_ids` (`generator.train_without_hints`: without the hint)."""

    @property
    def training_prompt_ids(self) -> list[int]:
        """The prompt of the training rows: `train_prompt_ids` if set, else `prompt_ids`."""
        return self.prompt_ids if self.train_prompt_ids is None else self.train_prompt_ids

    def training_context(self) -> list[int]:
        """The running context as the training rows carry it: `input_ids` with `training_prompt_ids` as its prompt."""
        return self.training_prompt_ids + self.input_ids[len(self.prompt_ids) :]

    @property
    def response_length(self) -> int:
        return len(self.input_ids) - len(self.prompt_ids)

    def sampling_params_of_next_turn(self, sampling_params: SamplingParams) -> SamplingParams:
        """`sampling_params`, with the next turn's derived seed when the trajectory has `seeds`."""
        if self.seeds is None:
            return sampling_params
        turns_so_far = len(self.weight_versions)  # one entry per turn added
        return sampling_params.replace(seed=self.seeds.for_turn(turns_so_far))

    def add_turn(self, turn: _Turn, reward: float) -> None:
        if self.steps is not None:
            rewards = [0.0] * len(turn.ids)
            rewards[turn.reward_offset] = reward
            self.steps.append(
                TrajectoryRow(
                    self.training_context(),
                    turn.ids,
                    turn.loss_mask,
                    turn.logprobs,
                    rewards,
                    turn.stop_reason,
                    turn.weight_version,
                )
            )
        self.reward_positions.append((self.response_length + turn.reward_offset, reward))
        self.input_ids += turn.ids
        self.loss_mask += turn.loss_mask
        self.logprobs += turn.logprobs
        self.response_end = self.response_length
        self.stop_reason = turn.stop_reason
        self.empty_responses += turn.empty
        self.closing_eos = turn.stripped_eos
        self.weight_versions.append(turn.weight_version)
        self.retokenized_turns += turn.retokenized
        self.conversation.response.append({"role": "assistant", "content": turn.text})

    def add_observation(self, obs_ids: list[int]) -> None:
        self.input_ids += obs_ids
        self.loss_mask += [0] * len(obs_ids)
        self.logprobs += [0.0] * len(obs_ids)


class SkyRLGymGenerator(GeneratorInterface):
    """The default generator: multi-turn agent loops over skyrl-gym envs, token-in/token-out.

    `generator_cfg` is the `generator` config section and `skyrl_gym_cfg` is `environment.skyrl_gym` (whose
    per-env blocks become each env's `env_config`). `seed` (`trainer.seed`) seeds the requests whose sampling
    params have no seed of their own (`sampling_seeds`); None leaves them to the engine's RNG.
    """

    def __init__(
        self,
        generator_cfg: GeneratorConfig,
        skyrl_gym_cfg: SkyRLGymConfig,
        inference_engine_client: InferenceEngineInterface,
        tokenizer,
        *,
        seed: int | None = None,
    ):
        _validate_generator_cfg(generator_cfg)
        self.cfg = generator_cfg
        self.seed = seed
        self.inference_engine_client = inference_engine_client
        self.tokenizer = tokenizer
        self.eos_token_id: int = tokenizer.eos_token_id
        self.multi_turn: bool = generator_cfg.use_conversation_multi_turn
        self.step_wise: bool = generator_cfg.step_wise_trajectories
        self.max_input_length: int = generator_cfg.max_input_length
        self.max_turns: int = generator_cfg.max_turns
        self.append_eos_after_stop: bool = generator_cfg.append_eos_token_after_stop_str_in_multi_turn
        self.inject_context_status: bool = generator_cfg.inject_context_status
        self.truncated_turn_ends_trajectory: bool = generator_cfg.truncated_turn_ends_trajectory
        self.train_without_hints: bool = generator_cfg.train_without_hints
        self.trajectory_timeout: float | None = generator_cfg.trajectory_timeout_seconds or None
        self.default_sampling_params = resolve_sampling_params(generator_cfg.sampling_params)
        self._template_kwargs: dict[str, Any] = dict(generator_cfg.chat_template_kwargs)
        self._obs_encoder = ObservationEncoder(tokenizer, **self._template_kwargs)
        self._special_tokens = SpecialTokenCounter(tokenizer)
        self.generation_prompt_ids = get_generation_prompt_ids(tokenizer, **self._template_kwargs)
        self.env_runner = EnvRunner(skyrl_gym_cfg, generator_cfg.max_turns)
        self._warned_postprocessed_action = False

    # ------------------------------------------------------------------------------------------ batch

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        prompts = input_batch["prompts"]
        env_classes = input_batch["env_classes"]
        env_extras = input_batch.get("env_extras") or [{} for _ in prompts]
        trajectory_ids = input_batch.get("trajectory_ids") or [None] * len(prompts)
        sampling_params = input_batch.get("sampling_params")
        sampling_params = (
            self.default_sampling_params if sampling_params is None else resolve_sampling_params(sampling_params)
        )
        seeds = trajectory_seeds(self.seed, sampling_params, trajectory_ids, input_batch.get("batch_metadata"))
        tasks = [
            asyncio.ensure_future(
                self.agent_loop(prompt, env_class, extras, sampling_params, trajectory_id, seeds=trajectory_seed)
            )
            for prompt, env_class, extras, trajectory_id, trajectory_seed in zip(
                prompts, env_classes, env_extras, trajectory_ids, seeds, strict=True
            )
        ]
        progress = GenerationProgress(len(tasks), _progress_label(input_batch.get("batch_metadata")), _sampled_tokens)
        for task in tasks:
            task.add_done_callback(progress.finished_one)
        try:
            trajectories = await asyncio.gather(*tasks)
        except BaseException:
            # Let the siblings close their envs before the error propagates.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return self._build_output(trajectories, env_classes, trajectory_ids, sampling_params.logprobs is not None)

    def _build_output(
        self,
        trajectories: list[Trajectory],
        env_classes: list[str],
        trajectory_ids: list[TrajectoryID | None],
        keep_logprobs: bool,
    ) -> GeneratorOutput:
        rows, is_last_step, env_metrics, row_env_classes, row_trajectory_ids, conversations = [], [], [], [], [], []
        infra_failures = []
        for trajectory, env_class, trajectory_id in zip(trajectories, env_classes, trajectory_ids, strict=True):
            for i, row in enumerate(trajectory.rows):
                last = i == len(trajectory.rows) - 1
                rows.append(row)
                is_last_step.append(last)
                env_metrics.append(trajectory.env_metrics if last else {})
                conversations.append(trajectory.conversation if last else None)
                infra_failures.append(trajectory.infra_failure if last else None)
                row_env_classes.append(env_class)
                row_trajectory_ids.append(trajectory_id)
        stop_reasons = [row.stop_reason for row in rows]
        response_ids = [row.response_ids for row in rows]
        weight_versions = [row.weight_version for row in rows]
        metrics = get_rollout_metrics(
            response_ids, stop_reasons, row_env_classes, env_metrics, is_last_step, weight_versions
        )
        rewards = [row.rewards for row in rows]
        if self.cfg.batched:  # upstream's batched mode: one reward per (single-turn) response
            rewards = [float(sum(reward)) for reward in rewards]
        loss_masks = [row.loss_mask for row in rows]
        if self.cfg.zero_reward_on_non_stop:
            rewards = zero_rewards_on_non_stop(rewards, stop_reasons)
        if self.cfg.apply_overlong_filtering:
            loss_masks = apply_overlong_filtering(loss_masks, stop_reasons)
        return GeneratorOutput(
            prompt_token_ids=[row.prompt_ids for row in rows],
            response_ids=response_ids,
            rewards=rewards,
            loss_masks=loss_masks,
            stop_reasons=stop_reasons,
            rollout_metrics=metrics,
            rollout_logprobs=[row.logprobs for row in rows] if keep_logprobs else None,
            trajectory_ids=row_trajectory_ids if any(tid is not None for tid in trajectory_ids) else None,
            is_last_step=is_last_step if self.step_wise else None,
            env_metrics=env_metrics,
            conversations=conversations,
            weight_versions=weight_versions,
            infra_failures=infra_failures,
        )

    # ------------------------------------------------------------------------------------- agent loop

    async def agent_loop(
        self,
        prompt: ConversationType,
        env_class: str,
        env_extras: dict[str, Any] | None,
        sampling_params: SamplingParams,
        trajectory_id: TrajectoryID | None = None,
        *,
        seeds: TrajectorySeeds | None = None,
    ) -> Trajectory:
        """Run one trajectory to completion; never raises for env failures or timeouts (see module doc). With
        `seeds` (`sampling_seeds`), each turn samples with its own derived seed."""
        session_id = trajectory_id.to_string() if trajectory_id is not None else None
        deadline = (
            None if self.trajectory_timeout is None else asyncio.get_running_loop().time() + self.trajectory_timeout
        )
        budget = asyncio.timeout_at(deadline)
        session = rollout = None
        try:
            async with budget:
                session = self.env_runner.open(env_class, env_extras)
                init_prompt, _ = await session.init(copy.deepcopy(prompt))
                prompt_ids = self._encode_prompt(init_prompt)
                rollout = _Rollout(
                    prompt_ids,
                    list(prompt_ids),
                    steps=[] if self.step_wise else None,
                    conversation=TrajectoryConversation(list(init_prompt)),
                    seeds=seeds,
                    train_prompt_ids=self._train_prompt_ids(init_prompt, env_extras),
                    special_token_messages=self._special_tokens.count(init_prompt),
                )
                await self._run_turns(session, rollout, sampling_params, session_id)
            return self._finish(rollout, session.env.get_metrics(), rollout.reported_failure)
        except InfraFailed as failed:
            failure = failed.failure
            logger.warning("trajectory %s (%s): %s", session_id, env_class, failure.reason.value, exc_info=True)
            if rollout is not None and failure.reason in _MID_EPISODE_FAILURES:
                return self._finish(rollout, {}, failure)
            return self._placeholder(prompt, None, failure)
        except TimeoutError:
            if not budget.expired():
                raise
            logger.warning("trajectory %s (%s) timed out after %ss", session_id, env_class, self.trajectory_timeout)
            error = f"timed out after generator.trajectory_timeout_seconds={self.trajectory_timeout}"
            return self._placeholder(prompt, rollout, InfraFailure(InfraFailureReason.TIMEOUT, error))
        finally:
            if session is not None:
                await session.close()

    def _train_prompt_ids(self, init_prompt: ConversationType, env_extras: dict[str, Any] | None) -> list[int] | None:
        """With `train_without_hints`, the ids of `init_prompt` without the row's `extra_info.hint`; else None."""
        hint = row_hint(env_extras) if self.train_without_hints else None
        if hint is None:
            return None
        return self._encode_prompt(prompt_without_hint(init_prompt, hint))

    def _encode_prompt(self, messages: ConversationType) -> list[int]:
        """Prompt ids with the generation prompt; message text is tokenised as text (see the module doc)."""
        return encode_chat(self.tokenizer, messages, True, content_as_text=True, **self._template_kwargs)

    async def _run_turns(
        self, session: EnvSession, rollout: _Rollout, sampling_params: SamplingParams, session_id: str | None
    ) -> None:
        """Generate / step until the env is done (or the runner ends the episode at `generator.max_turns`), the
        running context exceeds `max_input_length`, or (with `truncated_turn_ends_trajectory`) a turn is cut by the
        per-turn token limit."""
        while True:
            if len(rollout.input_ids) > self.max_input_length:
                rollout.stop_reason = TrajectoryStopReason.LENGTH
                return
            turn = await self._generate_turn(rollout, sampling_params, session_id)
            if self.truncated_turn_ends_trajectory and turn.stop_reason == TrajectoryStopReason.LENGTH:
                rollout.add_turn(turn, 0.0)  # the env never sees the cut text; the trajectory's stop reason is length
                return
            try:
                step = await session.step(turn.text)
            except InfraFailed:
                rollout.add_turn(turn, 0.0)
                raise
            if step.get("postprocessed_action") is not None:
                turn = self._replace_action(turn, step["postprocessed_action"])
            done = bool(step["done"])
            reported = step.get("infra_failure")
            if reported is not None and rollout.reported_failure is None:
                logger.warning("trajectory %s: env reported an infrastructure failure: %s", session_id, reported)
                rollout.reported_failure = reported
            observations = step.get("observations") or []
            if observations and self.inject_context_status:
                observations = self._with_context_status(observations, rollout, turn, session.turns)
            rollout.add_turn(turn, float(step.get("reward") or 0.0))
            rollout.conversation.response += observations
            if done:
                return
            rollout.special_token_messages += self._special_tokens.count(observations)
            rollout.add_observation(self._observation_ids(observations))

    async def _generate_turn(self, rollout: _Rollout, sampling_params: SamplingParams, session_id: str | None) -> _Turn:
        try:
            output = await self.inference_engine_client.generate(
                InferenceEngineInput(
                    prompt_token_ids=[list(rollout.input_ids)],
                    sampling_params=rollout.sampling_params_of_next_turn(sampling_params),
                    session_ids=None if session_id is None else [session_id],
                )
            )
        except EngineUnavailableError as error:
            raise InfraFailed(InfraFailure.from_exception(InfraFailureReason.ENGINE_FAILED, error)) from error
        text = output["responses"][0]
        ids = list(output["response_ids"][0])
        logprobs = output.get("response_logprobs")
        logprobs = list(logprobs[0]) if logprobs else [0.0] * len(ids)
        turn = self._make_turn(text, ids, logprobs, output["stop_reasons"][0], sampling_params.stop)
        turn.weight_version = (output.get("weight_versions") or [None])[0]
        turn.retokenized = bool((output.get("retokenized") or [False])[0])
        return turn

    def _make_turn(self, text: str, ids: list[int], logprobs: list[float], stop_reason: str, stop) -> _Turn:
        """Annotate sampled ids: mask 1 on every sampled token; EOS handling per conversation mode."""
        empty = not text.strip()
        if not ids:  # an engine returning nothing is treated as an (empty) EOS so every turn has a token
            return _Turn([self.eos_token_id], [0], [0.0], 0, stop_reason, text, empty=True)
        mask = [1] * len(ids)
        stripped_eos = None
        if not self.multi_turn:
            # One growing assistant message: the turn's EOS is dropped (restored after the last turn). A turn
            # that is nothing but EOS keeps it, so every turn has a token to carry its reward.
            if ids[-1] == self.eos_token_id and len(ids) > 1:
                stripped_eos = (mask[-1], logprobs[-1])
                ids, mask, logprobs = ids[:-1], mask[:-1], logprobs[:-1]
        elif (
            stop and self.append_eos_after_stop and ids[-1] != self.eos_token_id and any(text.endswith(s) for s in stop)
        ):
            # Ended on a stop string: close the turn as the chat template would; the EOS was not sampled.
            return _Turn(
                ids + [self.eos_token_id], mask + [0], logprobs + [0.0], len(ids) - 1, stop_reason, text, empty
            )
        return _Turn(ids, mask, logprobs, len(ids) - 1, stop_reason, text, empty, stripped_eos)

    def _replace_action(self, turn: _Turn, action: str) -> _Turn:
        """The env rewrote the action (upstream `postprocessed_action`). Its tokens were not sampled, so
        they are kept in the context but out of the loss."""
        if not self._warned_postprocessed_action:
            logger.warning("env returned postprocessed_action: re-encoding it breaks token-in/token-out")
            self._warned_postprocessed_action = True
        ids = self.tokenizer.encode(action, add_special_tokens=False)
        if turn.ids[-1] == self.eos_token_id or not ids:
            ids.append(self.eos_token_id)
        return _Turn(ids, [0] * len(ids), [0.0] * len(ids), len(ids) - 1, turn.stop_reason, action, turn.empty)

    def _with_context_status(
        self, observations: ConversationType, rollout: _Rollout, turn: _Turn, turn_number: int
    ) -> list:
        """`generator.inject_context_status`: tell the model how full its context is, on the last observation."""
        used = len(rollout.input_ids) + len(turn.ids)
        status = (
            f"\n[Context: {used}/{self.max_input_length} tokens ({100 * used // self.max_input_length}%), "
            f"Turn {turn_number}/{self.max_turns}]"
        )
        last = dict(observations[-1], content=observations[-1]["content"] + status)
        return [*observations[:-1], last]

    def _observation_ids(self, observations: ConversationType) -> list[int]:
        """Tokens appended after a turn that did not end the episode (the final observation is never used)."""
        if not self.multi_turn:
            return [t for m in observations for t in encode_text(self.tokenizer, m["content"])]
        if not observations:
            return list(self.generation_prompt_ids)
        return self._obs_encoder.encode(observations, add_generation_prompt=True)

    # -------------------------------------------------------------------------------------- results

    def _finish(
        self, rollout: _Rollout, env_metrics: dict[str, Any], failure: InfraFailure | None = None
    ) -> Trajectory:
        """Cut the response after the last turn's output, place rewards, and package the row(s). With an
        infrastructure `failure`, the trajectory's stop reason is its reason and the whole loss mask is zeroed."""
        masked = failure is not None
        if masked:
            rollout.stop_reason = failure.reason.value
        if not rollout.reward_positions:  # no turn ran (context already too long)
            return self._placeholder_from_ids(
                rollout.prompt_ids, rollout.stop_reason, env_metrics, rollout.conversation, failure
            )
        metrics = {
            **env_metrics,
            **trajectory_counters(
                rollout.stop_reason, rollout.empty_responses, rollout.retokenized_turns, rollout.special_token_messages
            ),
        }
        if rollout.steps is not None:
            rollout.steps[-1].stop_reason = rollout.stop_reason
            if masked:
                for step in rollout.steps:
                    step.loss_mask = [0] * len(step.loss_mask)
            return Trajectory(rollout.steps, metrics, rollout.conversation, failure)
        end = rollout.response_end
        start = len(rollout.prompt_ids)
        response = rollout.input_ids[start : start + end]
        loss_mask, logprobs = rollout.loss_mask[:end], rollout.logprobs[:end]
        rewards = [0.0] * end
        for position, reward in rollout.reward_positions:
            rewards[position] = reward
        if not self.multi_turn and rollout.stop_reason != TrajectoryStopReason.LENGTH:
            response, loss_mask, logprobs, rewards = self._close_single_message(
                rollout, response, loss_mask, logprobs, rewards
            )
        if masked:
            loss_mask = [0] * len(loss_mask)
        row = TrajectoryRow(
            rollout.training_prompt_ids,
            response,
            loss_mask,
            logprobs,
            rewards,
            rollout.stop_reason,
            _oldest(rollout.weight_versions),
        )
        return Trajectory([row], metrics, rollout.conversation, failure)

    def _close_single_message(self, rollout, response, loss_mask, logprobs, rewards):
        """Single-message mode: end the one assistant message with EOS and move the final reward onto it.
        If the last turn sampled that EOS (and it was stripped), it gets back its mask and logprob."""
        if response[-1] == self.eos_token_id:
            return response, loss_mask, logprobs, rewards
        mask, logprob = rollout.closing_eos or (0, 0.0)
        last_position, last_reward = rollout.reward_positions[-1]
        rewards[last_position] = 0.0
        return response + [self.eos_token_id], loss_mask + [mask], logprobs + [logprob], rewards + [last_reward]

    def _placeholder(self, prompt: ConversationType, rollout: _Rollout | None, failure: InfraFailure) -> Trajectory:
        prompt_ids = rollout.prompt_ids if rollout is not None else self._encode_prompt(prompt)
        conversation = rollout.conversation if rollout is not None else TrajectoryConversation(list(prompt))
        return self._placeholder_from_ids(prompt_ids, failure.reason.value, {}, conversation, failure)

    def _placeholder_from_ids(
        self,
        prompt_ids: list[int],
        stop_reason: str,
        env_metrics: dict[str, Any],
        conversation: TrajectoryConversation,
        failure: InfraFailure | None = None,
    ) -> Trajectory:
        """A one-token row ([eos], mask 0, reward 0) that keeps the batch's shapes valid and its reward format.
        `conversation` keeps what happened before the failure, for inspection."""
        row = TrajectoryRow(prompt_ids, [self.eos_token_id], [0], [0.0], [0.0], stop_reason)
        return Trajectory([row], {**env_metrics, **trajectory_counters(stop_reason, 0)}, conversation, failure)


_MID_EPISODE_FAILURES = frozenset({InfraFailureReason.ENV_STEP_FAILED, InfraFailureReason.ENGINE_FAILED})
"""Failures after which the turns so far are kept (masked) for inspection."""


def _oldest(versions: list[int | None]) -> int | None:
    """The oldest of the turns' weight versions (None if any turn's is unknown)."""
    return None if not versions or None in versions else min(versions)


def _sampled_tokens(trajectory: Trajectory) -> int:
    """Tokens the policy sampled in a trajectory (loss-masked ones; observations are not sampled)."""
    return sum(sum(row.loss_mask) for row in trajectory.rows)


def _progress_label(metadata: BatchMetadata | None) -> str:
    if metadata is None:
        return "generate"
    return f"generate ({metadata.training_phase}, step {metadata.global_step})"


def _validate_generator_cfg(cfg: GeneratorConfig) -> None:
    """Reject configurations this generator does not implement, naming the key."""
    if cfg.chat_template.name_or_path is not None:
        raise NotImplementedError(
            "generator.chat_template: custom chat templates (the re-tokenising path) are not supported; "
            "set generator.chat_template.name_or_path=null to use the tokenizer's own template"
        )
    if cfg.step_wise_trajectories and not cfg.use_conversation_multi_turn:
        raise ValueError("generator.step_wise_trajectories=true requires generator.use_conversation_multi_turn=true")
