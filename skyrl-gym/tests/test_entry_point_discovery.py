"""Envs declared by installed packages (entry-point group `skyrl_gym.envs`) are found by `make`.

The test installs a package the way pip leaves it on disk — the module plus a `*.dist-info` folder
with `entry_points.txt` — on a fresh interpreter's path, and never calls `register` itself.
"""

import json
import subprocess
import sys
import textwrap

ENV_MODULE = textwrap.dedent("""
    from skyrl_gym.envs.base_text_env import BaseTextEnv


    class PluginEnv(BaseTextEnv):
        def __init__(self, env_config=None, extras={}):
            super().__init__()
            self.word = extras["word"]

        def step(self, action):
            return {"observations": [], "reward": float(action == self.word), "done": True, "metadata": {}}
    """)

CHECK = textwrap.dedent("""
    import json, sys
    import skyrl_gym

    assert "plugin_env" not in skyrl_gym.registry  # nothing registered it explicitly
    env = skyrl_gym.make("plugin_env", env_config=None, extras={"word": "hello"})
    env.init([{"role": "user", "content": "say hello"}])
    out = env.step("hello")
    json.dump({"reward": out["reward"], "class": type(env).__name__,
               "listed": "plugin_env: skyrl_plugin_pkg.env:PluginEnv" in skyrl_gym.pprint_registry(False)}, sys.stdout)
    """)


def install_plugin_package(site_dir):
    package = site_dir / "skyrl_plugin_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(ENV_MODULE)
    dist_info = site_dir / "skyrl_plugin_pkg-0.1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: skyrl-plugin-pkg\nVersion: 0.1.0\n")
    (dist_info / "entry_points.txt").write_text("[skyrl_gym.envs]\nplugin_env = skyrl_plugin_pkg.env:PluginEnv\n")


def run_fresh_interpreter(code, site_dir):
    env = {"PYTHONPATH": str(site_dir), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_make_finds_an_env_declared_by_an_installed_package(tmp_path):
    install_plugin_package(tmp_path)
    result = run_fresh_interpreter(CHECK, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"reward": 1.0, "class": "PluginEnv", "listed": True}


def test_unknown_id_still_fails_after_discovery(tmp_path):
    install_plugin_package(tmp_path)
    code = "import skyrl_gym\ntry:\n    skyrl_gym.make('plugin_envv')\nexcept skyrl_gym.error.Error as e:\n    print(e)"
    result = run_fresh_interpreter(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Did you mean 'plugin_env'?" in result.stdout


def test_explicit_registration_takes_precedence_over_the_entry_point(tmp_path):
    install_plugin_package(tmp_path)
    code = textwrap.dedent("""
        import skyrl_gym
        from skyrl_gym.envs.base_text_env import BaseTextEnv

        class Mine(BaseTextEnv):
            def __init__(self, env_config=None, extras={}):
                super().__init__()

        skyrl_gym.register("plugin_env", entry_point=Mine)
        skyrl_gym.load_entry_point_envs()
        print(type(skyrl_gym.make("plugin_env")).__name__)
        """)
    result = run_fresh_interpreter(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Mine"
