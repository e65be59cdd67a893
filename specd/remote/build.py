"""Wiring: a :class:`RemoteBackend` from the settings (``specd serve --backend DRIVER:URL``)."""

from __future__ import annotations

from typing import Callable

from specd.engine.config import PromptWindows
from specd.remote.backend import RemoteBackend
from specd.remote.config import RemoteConfig
from specd.remote.driver import Driver
from specd.remote.errors import RemoteError
from specd.remote.http import HttpClient, HttpSettings
from specd.remote.llama_server import LlamaServerDriver
from specd.remote.openai import OpenAIDriver
from specd.remote.prompt import RemotePrompt, load_tokenizer


def build_remote(config: RemoteConfig, windows: PromptWindows, tokenizer: str, max_len: int = 4096,
                 log: Callable[[str], None] = lambda _: None) -> RemoteBackend:
    """The backend for ``config.backend`` (a remote spec). ``tokenizer``: the model spec whose
    tokenizer bounds the windows when ``remote_tokenizer`` is empty (the engine's target).
    Checks the server once: one that is down or wrong is logged, and the daemon serves anyway
    (each request says what is wrong until the server is right). Raises RemoteError when the
    tokenizer cannot be found (a setting to fix before serving)."""
    spec = config.spec
    if spec is None:
        raise ValueError("build_remote: the backend is local")
    driver: Driver = (LlamaServerDriver(config.remote_max_predict_ms) if spec.driver == "llama-server"
                      else OpenAIDriver(config.remote_model))
    http = HttpClient(spec, HttpSettings(config.remote_connect_timeout_s, config.remote_timeout_s,
                                         config.remote_retries, config.api_key(), config.remote_deadline_s))
    prompt = RemotePrompt(load_tokenizer(config.remote_tokenizer or tokenizer), windows)
    backend = RemoteBackend(driver, http, prompt, max_len)
    try:
        facts = backend.check()
        log(f"remote {spec}: ready" + (f" (model {facts['model']})" if facts.get("model") else ""))
    except RemoteError as e:
        log(f"warning: remote {spec}: {e}; serving anyway, requests fail until it is fixed")
    return backend
