"""The remote backend's settings: ``--backend`` parsed strictly, the API key kept out of sight,
the settings declared once (flag and ``[daemon]`` key alike), the prompt split for ``/infill``."""

from __future__ import annotations

import argparse
import re

import pytest

from specd.cli.flags import add_daemon_flags
from specd.daemon.config import daemon_config
from specd.remote.config import RemoteConfig, Secret
from specd.remote.http import error_message
from specd.remote.spec import parse_backend
from specd.schema import ConfigError, flag_values
from specd.daemon.config import DaemonConfig


def test_backend_specs_parse_into_driver_and_base_url() -> None:
    assert parse_backend("local") is None
    s = parse_backend("openai:https://gpu.example:8443/v1/")
    assert (s.driver, s.url, s.host, s.port, s.base_path, s.https) == (
        "openai", "https://gpu.example:8443/v1", "gpu.example", 8443, "/v1", True)
    s = parse_backend("llama-server:http://10.0.0.5:8012")
    assert (s.driver, s.port, s.base_path) == ("llama-server", 8012, "")


@pytest.mark.parametrize("text", ["", "openai", "tgi:http://h:1", "openai:ws://h:1", "openai:http://h:1/v1?x=1",
                                  "openai:http://user:pw@h:1/v1", "openai:http://h:port/v1"])
def test_bad_backend_specs_are_refused_naming_the_problem(text: str) -> None:
    with pytest.raises(ConfigError, match=r"daemon\.backend: .*backend"):
        daemon_config({"backend": text}, {})


def test_the_flag_and_the_config_key_are_one_setting() -> None:
    p = argparse.ArgumentParser()
    add_daemon_flags(p)
    args = p.parse_args(["--backend", "openai:http://h:1/v1", "--remote-model", "qwen", "--remote-timeout", "5"])
    from_flags = daemon_config({}, flag_values(args, DaemonConfig)).remote
    from_file = daemon_config({"backend": "openai:http://h:1/v1", "remote_model": "qwen", "remote_timeout_s": 5}, {}).remote
    assert from_flags == from_file and from_flags.remote_timeout_s == 5.0
    assert not re.search(r"--remote-api-key(?!-env)", p.format_help())  # a key on a command line shows in ps


def test_the_api_key_comes_from_the_environment_first_and_never_shows(monkeypatch) -> None:
    config = daemon_config({"backend": "openai:http://h:1/v1", "remote_api_key": "from-file"}, {})
    monkeypatch.delenv("SPECD_REMOTE_API_KEY", raising=False)
    assert config.remote.api_key() == "from-file"
    monkeypatch.setenv("SPECD_REMOTE_API_KEY", "from-env")
    assert config.remote.api_key() == "from-env"
    assert "from-file" not in repr(config) and "from-file" not in str(config.remote.remote_api_key)
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")


def test_error_bodies_give_the_servers_message() -> None:
    assert error_message('{"error": {"message": "model not found", "type": "x"}}') == "model not found"
    assert error_message('{"detail": "Not authenticated"}') == "Not authenticated"
    assert error_message('{"object": "error", "message": "suffix is not supported"}') == "suffix is not supported"
    assert error_message("<html>502 Bad Gateway</html>") == "<html>502 Bad Gateway</html>"


def test_remote_config_defaults_to_local() -> None:
    assert RemoteConfig().spec is None and daemon_config({}, {}).remote.backend == "local"


def test_the_readme_shared_server_config_reads() -> None:
    """The ``[daemon]`` example in the README's "Shared server" section is a valid config."""
    import tomllib
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Shared server", 1)[1]
    block = section.split("```toml\n", 1)[1].split("```", 1)[0]
    remote = daemon_config(tomllib.loads(block)["daemon"], {}).remote
    assert remote.spec is not None and remote.spec.driver == "openai" and remote.remote_model == "qwen-coder"


def test_the_deadline_is_one_setting_with_a_flag_and_zero_turns_it_off() -> None:
    p = argparse.ArgumentParser()
    add_daemon_flags(p)
    from_flags = daemon_config({}, flag_values(p.parse_args(["--remote-deadline", "12.5"]), DaemonConfig)).remote
    from_file = daemon_config({"remote_deadline_s": 12.5}, {}).remote
    assert from_flags == from_file and from_file.remote_deadline_s == 12.5
    assert RemoteConfig().remote_deadline_s == 60.0 and daemon_config({"remote_deadline_s": 0}, {}).remote.remote_deadline_s == 0
    with pytest.raises(ConfigError, match=r"remote_deadline_s: must be >= 0"):
        daemon_config({"remote_deadline_s": -1}, {})
