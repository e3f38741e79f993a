import pytest

from skyrl_gym.envs import registration


@pytest.fixture
def clean_registry():
    """Restore the global env registry after a test that registers ids."""
    saved = dict(registration.registry)
    saved_loaded = registration._entry_points_loaded
    yield registration.registry
    registration.registry.clear()
    registration.registry.update(saved)
    registration._entry_points_loaded = saved_loaded
