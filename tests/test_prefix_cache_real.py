"""The prefix cache on the real default pair: a request restored from blocks that were computed in
other chunks, for another request, gives exactly a cold one-shot prefill's text and KV rows."""

from __future__ import annotations

import pytest
import torch

from specd.engine.engine import CompletionRequest

pytestmark = pytest.mark.real_models

FILE_A = "".join(f"def handler_{i}(event, context):\n    return {{'status': {200 + i}, 'body': event}}\n\n"
                 for i in range(12))
FILE_B = "".join(f"class Model{i}:\n    name = 'model-{i}'\n    size = {i * 7}\n\n" for i in range(14))


def test_real_pair_restored_from_the_prefix_cache_equals_a_cold_one_shot_prefill(real_engine) -> None:
    engine = real_engine
    config = engine.config
    request = CompletionRequest(FILE_A + "def handler_12(event, context):\n    ", "\n", max_tokens=16)
    try:
        engine.config = config.replace(prefill_chunk_tokens=4096)  # the reference: one forward
        engine.reset()
        cold = engine.complete(request)
        n = cold.stats.prompt_tokens - 1
        reference = engine.target.kv_rows(0, n)
        engine.config = config.replace(prefill_chunk_tokens=48)
        engine.reset()
        engine.warm(CompletionRequest(FILE_A + "def other(x):\n    ", "\n"))  # the blocks, in chunks of 48
        engine.warm(CompletionRequest(FILE_B))  # another file takes the live caches
        again = engine.complete(request)
        assert again.stats.prefill_reused >= len(FILE_A) // 8  # most of the file restored
        assert engine.prefix_cache.stats.hit_tokens > 0
        assert again.tokens == cold.tokens, (again.text, cold.text)
        rows = engine.target.kv_rows(0, n)
        assert torch.equal(torch.as_tensor(rows.k), torch.as_tensor(reference.k))
        assert torch.equal(torch.as_tensor(rows.v), torch.as_tensor(reference.v))
    finally:
        engine.config = config
        engine.reset()
