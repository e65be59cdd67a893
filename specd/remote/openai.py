"""OpenAI-compatible ``/v1/completions`` (vLLM, llama-cpp-python's server, llama-server, others).

specd writes the FIM prompt itself, as text, with the engine's layout and windows
(:class:`~specd.remote.prompt.RemotePrompt`): servers differ on a ``suffix`` field (vLLM rejects
it), but all of them parse the model's FIM control tokens out of a prompt string. The FIM stop
tokens go in ``stop``.

Whether the served model has those tokens is checked once (:meth:`OpenAIDriver.check`): the prompt
``<|fim_prefix|><|fim_suffix|><|fim_middle|>`` must count two tokens more than ``a`` (three
control tokens against one letter); written out as text the markers would take a dozen or more.
"""

from __future__ import annotations

from typing import Any

from specd.engine.prompt import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from specd.remote.driver import Chunk, need, optional_int
from specd.remote.errors import RemoteError
from specd.remote.http import Cancel, HttpClient
from specd.remote.prompt import STOP_TOKENS, RemotePrompt
from specd.requests import CompletionRequest

FINISH = {"stop": "stop_token", "length": "max_tokens"}


class OpenAIDriver:
    name = "openai"
    path = "/completions"
    end_marker = "a finish_reason, then data: [DONE]"

    def __init__(self, model: str | None = None) -> None:
        self.model = model  # None until check() asks the server for its first model

    def _common(self, request: CompletionRequest, prompt: RemotePrompt) -> dict[str, Any]:
        body: dict[str, Any] = {"prompt": prompt.fim_text(request)}
        if self.model is not None:
            body["model"] = self.model
        return body

    def body(self, request: CompletionRequest, prompt: RemotePrompt, stream: bool = True) -> dict[str, Any]:
        body = self._common(request, prompt)
        body.update({"max_tokens": request.max_tokens, "temperature": request.temperature, "top_p": request.top_p,
                     "stop": list(STOP_TOKENS) + [s for s in request.stop if s not in STOP_TOKENS],
                     "stream": stream})
        if request.top_k:
            body["top_k"] = request.top_k  # an extension vLLM and the llama.cpp servers accept
        if request.seed is not None:
            body["seed"] = request.seed
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def warm_body(self, request: CompletionRequest, prompt: RemotePrompt) -> dict[str, Any]:
        # servers differ on max_tokens 0; one token computes (and, with prefix caching, caches) the prompt
        return {**self._common(request, prompt), "max_tokens": 1, "temperature": 0.0, "stream": False}

    def parse(self, event: Any) -> Chunk:
        what = "/v1/completions"
        usage = event.get("usage") if isinstance(event, dict) and isinstance(event.get("usage"), dict) else None
        choices = need(event, "choices", list, what)
        if not choices:  # the usage-only chunk that ends a stream with include_usage
            if usage is None:
                raise RemoteError(f"{what}: malformed answer: no choices and no usage in {str(event)[:200]}")
            return self._usage(Chunk(), usage)
        choice = choices[0]
        text = need(choice, "text", str, what)
        finish = choice.get("finish_reason")
        chunk = Chunk(text=text, stop_reason=FINISH.get(finish, "stop_token") if finish else None)
        return self._usage(chunk, usage) if usage is not None else chunk

    @staticmethod
    def _usage(chunk: Chunk, usage: dict) -> Chunk:
        details = usage.get("prompt_tokens_details")
        return Chunk(chunk.text, chunk.stop_reason, optional_int(usage, "prompt_tokens"),
                     optional_int(details, "cached_tokens") if isinstance(details, dict) else None,
                     optional_int(usage, "completion_tokens"))

    def ended(self, final: bool, how: str | None) -> bool:
        # a stream ends with data: [DONE] after the choice's finish_reason; a plain JSON answer
        # (a server that does not stream) was read whole and holds its finish_reason
        return final and how in ("done", "json")

    def prompt_tokens(self, request: CompletionRequest, prompt: RemotePrompt) -> int | None:
        return len(prompt.builder.build(request.prefix, request.suffix))

    def stop_strings(self) -> tuple[str, ...]:
        return STOP_TOKENS  # a server that prints control tokens as text: cut there too

    def check(self, http: HttpClient, prompt: RemotePrompt, cancelled: Cancel = None) -> dict[str, Any]:
        models = http.get_json("/models", cancelled)
        listed = need(models, "data", list, f"{http.spec.url}/models")
        ids = [m.get("id") for m in listed if isinstance(m, dict) and isinstance(m.get("id"), str)]
        facts: dict[str, Any] = {}
        if self.model is None:
            if not ids:
                raise RemoteError(f"{http.spec.url}/models lists no model: give --remote-model NAME")
            self.model = ids[0]
        elif ids and self.model not in ids:
            raise RemoteError(f"{http.spec.url} does not serve model {self.model!r} (it serves {', '.join(ids)}); "
                              "fix --remote-model")
        entry = next((m for m in listed if isinstance(m, dict) and m.get("id") == self.model), {})
        if optional_int(entry, "max_model_len"):  # vLLM
            facts["max_len"] = entry["max_model_len"]
        facts["model"] = self.model
        if not prompt.has_fim:
            raise RemoteError("the local tokenizer has no FIM tokens: specd cannot write a FIM prompt")
        fim = self._prompt_tokens(http, FIM_PREFIX + FIM_SUFFIX + FIM_MIDDLE, cancelled)
        letter = self._prompt_tokens(http, "a", cancelled)
        if fim is not None and letter is not None and fim - letter > 2:
            raise RemoteError(f"model {self.model!r} at {http.spec.url} has no FIM tokens: "
                              f"{FIM_PREFIX}{FIM_SUFFIX}{FIM_MIDDLE} is {fim - letter + 1} tokens to it, not 3; "
                              "serve a fill-in-the-middle code model (Qwen2.5-Coder's format)")
        facts["fim_checked"] = fim is not None and letter is not None
        return facts

    def _prompt_tokens(self, http: HttpClient, text: str, cancelled: Cancel) -> int | None:
        body: dict[str, Any] = {"prompt": text, "max_tokens": 1, "temperature": 0.0}
        if self.model is not None:
            body["model"] = self.model
        answer = http.post_json(self.path, body, cancelled)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return optional_int(usage, "prompt_tokens")
