"""One settings schema: the config file's keys, every command's flags and the daemon's ``complete``
parameters all come from the settings dataclasses, and the names README.md documents keep working."""

from __future__ import annotations

import dataclasses

import pytest

from specd.cli import build_parser
from specd.cli.flags import daemon_config, engine_argv, engine_config
from specd.config import ConfigError, engine_config as read_engine_config
from specd.daemon import protocol as rpc
from specd.daemon.config import DaemonConfig, daemon_config as read_daemon_config
from specd.engine.config import EngineConfig, PromptWindows
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET
from specd.models.modes import DRAFT_QUANTS, TARGET_QUANTS
from specd.models.registry import PUBLISHED
from specd.requests import CompletionRequest, RequestError
from specd.schema import entries, flag_names

# what README.md documents: config keys and flags users depend on
README_ENGINE_KEYS = {"target": "t", "draft": "d", "target_quant": "int4", "draft_quant": "int8", "k": 3,
                      "max_len": 2048, "max_prefix_tokens": 512, "max_suffix_tokens": 16}
README_DAEMON_KEYS = {"socket": "/tmp/me/specd.sock", "max_message_bytes": 4096, "drain_timeout_s": 2.5,
                      "reuse": False}
README_ENGINE_FLAGS = ["--target", "t", "--draft", "none", "--target-quant", "fp8", "--draft-quant", "bf16",
                       "--target-backend", "ort", "--draft-backend", "torch", "--draft-head-vocab", "0",
                       "--drafter", "both", "--k", "5", "--tree", "on", "--tree-width", "2", "--device", "cpu",
                       "--threads", "2", "--max-len", "1024", "--max-prefix-tokens", "100",
                       "--max-suffix-tokens", "10"]


def test_defaults_come_from_one_place() -> None:
    c = EngineConfig()
    assert (c.target, c.draft) == (DEFAULT_TARGET, DEFAULT_DRAFT)
    assert DEFAULT_TARGET in PUBLISHED and DEFAULT_DRAFT in PUBLISHED  # `specd models pull` fetches the defaults
    assert c.target_quant in TARGET_QUANTS and c.draft_quant in DRAFT_QUANTS and c.k == "auto"
    assert read_engine_config({}, {}) == c and read_daemon_config({}, {}) == DaemonConfig()


def test_every_setting_is_a_config_key_and_a_flag() -> None:
    names = {e.name for e in entries(EngineConfig)}
    assert {f.name for f in dataclasses.fields(PromptWindows)} <= names  # nested: flat keys
    assert set(flag_names(EngineConfig)) == names
    # config-file only: the write buffer bound, and the remote server's API key (a key on a command
    # line shows in ps; it comes from the environment or the config file)
    assert set(flag_names(DaemonConfig)) == {e.name for e in entries(DaemonConfig)} - {"max_write_buffer_bytes",
                                                                                      "remote_api_key"}


def test_readme_config_keys_still_read() -> None:
    c = read_engine_config(README_ENGINE_KEYS, {})
    assert (c.target, c.draft, c.target_quant, c.draft_quant, c.k, c.max_len) == ("t", "d", "int4", "int8", 3, 2048)
    assert (c.windows.max_prefix_tokens, c.windows.max_suffix_tokens) == (512, 16)
    d = read_daemon_config(README_DAEMON_KEYS, {})
    assert (str(d.socket), d.max_message_bytes, d.drain_timeout_s, d.reuse) == ("/tmp/me/specd.sock", 4096, 2.5, False)


@pytest.mark.parametrize("command", [["serve"], ["complete", "--prefix", "x"], ["lsp"], ["models", "info"],
                                     ["bench"]])
def test_readme_engine_flags_reach_the_config(command) -> None:
    args = build_parser().parse_args([*command, *README_ENGINE_FLAGS, "--config", "/dev/null"])
    c = engine_config(args)
    assert (c.target, c.draft, c.target_quant, c.draft_quant, c.target_backend, c.draft_backend) == \
        ("t", None, "fp8", "bf16", "ort", "torch")
    assert (c.draft_head_vocab, c.drafter, c.k, c.tree, c.tree_width, c.threads, c.max_len) == \
        (0, "both", 5, "on", 2, 2, 1024)
    assert (c.windows.max_prefix_tokens, c.windows.max_suffix_tokens) == (100, 10)


def test_readme_daemon_flags_reach_the_config() -> None:
    args = build_parser().parse_args(["serve", "--socket", "/tmp/me/s.sock", "--drain-timeout", "5", "--no-reuse",
                                      "--max-message-bytes", "100", "--config", "/dev/null"])
    d = daemon_config(args)
    assert (str(d.socket), d.drain_timeout_s, d.reuse, d.max_message_bytes) == ("/tmp/me/s.sock", 5.0, False, 100)


def test_complete_flags_build_the_request() -> None:
    args = build_parser().parse_args(["complete", "--prefix", "x", "--max-tokens", "7", "--temperature", "0.5",
                                      "--top-p", "0.9", "--top-k", "3", "--seed", "1", "--mode", "target",
                                      "--stop", "a", "--stop", "b", "--json", "--no-daemon"])
    assert (args.max_tokens, args.temperature, args.top_p, args.top_k, args.seed, args.mode, args.stop) == \
        (7, 0.5, 0.9, 3, 1, "target", ["a", "b"])


def test_the_lsp_passes_its_engine_flags_to_the_daemon_it_starts() -> None:
    parser = build_parser()
    lsp = parser.parse_args(["lsp", *README_ENGINE_FLAGS, "--draft-min-prob", "0.25", "--config", "/dev/null"])
    serve = parser.parse_args(["serve", *engine_argv(lsp)])
    assert engine_config(serve) == engine_config(lsp)


@pytest.mark.parametrize("table, message", [
    ({"colour": "red"}, "engine.colour: unknown setting"),
    ({"max_len": "big"}, "engine.max_len: wrong type str"),
    ({"k": "fast"}, 'engine.k: an integer or "auto"'),
    ({"k": 40}, "engine.k: must be in 0..32"),
    ({"target_quant": "int3"}, "engine.target_quant: must be one of auto, int8, fp8, int4, bf16, fp32"),
    ({"max_suffix_tokens": 0}, "engine.max_suffix_tokens: must be a positive integer"),
    ({"mid_line_suffix_tokens": -1}, "engine.mid_line_suffix_tokens: must be >= 0"),
    ({"tree": "maybe"}, "engine.tree: must be one of on, off"),
])
def test_bad_engine_settings_are_named(table, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        read_engine_config(table, {})


def test_bad_flag_values_are_refused_by_argparse(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--k", "fast"])
    assert "expected an integer or 'auto'" in capsys.readouterr().err


def test_the_daemon_takes_every_request_field() -> None:
    fields = {f.name for f in dataclasses.fields(CompletionRequest)}
    assert fields | {"stream", "session"} == set(rpc._COMPLETE_TYPES)
    p = rpc.parse_complete({"prefix": "x", "tree": True, "line_budget_ms": 250, "k": 2, "stop": "\n"})
    assert (p.request.tree, p.request.line_budget_ms, p.request.k, p.request.stop) == (True, 250, 2, ("\n",))
    with pytest.raises(rpc.RpcError) as e:
        rpc.parse_complete({"prefix": "x", "tree": "yes"})
    assert e.value.data == {"field": "tree"} and "a boolean or null" in e.value.message


@pytest.mark.parametrize("bad, field, message", [
    (dict(temperature=-1), "temperature", "temperature must be in [0, 100] (0 = greedy), got -1.0"),
    (dict(temperature=101.0), "temperature", "temperature must be in [0, 100] (0 = greedy)"),
    (dict(top_p=0.0), "top_p", "top_p must be in (0, 1]"),
    (dict(top_k=-1), "top_k", "top_k must be"),
    (dict(k=33), "k", "must be an integer in 0..32"),
    (dict(tree="on"), "tree", "must be true or false"),
])
def test_requests_are_checked_without_the_engine(bad, field, message) -> None:
    with pytest.raises(RequestError) as e:
        CompletionRequest("x", **bad).validate(4096)
    assert e.value.field == field and message in str(e.value)
