"""tau-bench (tau2) customer-service domains as an RL environment: `TauBenchEnv` (env id ``tau_bench``), the
in-process toolkits over per-episode DB copies, the episode as tau2 messages and its reward from tau2's own
evaluators, the user simulators, and the data converter (``python -m skyrl_integrations.tau_bench.convert_data``).

Importing the package does not load the tau2 domain data; `get_domain` does, once per process.
"""

from skyrl_integrations.tau_bench.config import TauBenchEnvConfig
from skyrl_integrations.tau_bench.domains import DOMAINS, Domain, get_domain
from skyrl_integrations.tau_bench.env import TauBenchEnv
from skyrl_integrations.tau_bench.reward import GroundTruth, RewardResult, compute_reward
from skyrl_integrations.tau_bench.toolkit import EpisodeToolkit
from skyrl_integrations.tau_bench.trajectory import Trajectory
from skyrl_integrations.tau_bench.users import LLMUser, LLMUserConfig, ScriptedUser, UserSimulatorError

__all__ = [
    "DOMAINS",
    "Domain",
    "EpisodeToolkit",
    "GroundTruth",
    "LLMUser",
    "LLMUserConfig",
    "RewardResult",
    "ScriptedUser",
    "TauBenchEnv",
    "TauBenchEnvConfig",
    "Trajectory",
    "UserSimulatorError",
    "compute_reward",
    "get_domain",
]
