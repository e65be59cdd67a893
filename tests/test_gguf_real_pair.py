"""The GGUF-native path on the real default pair (the 1.5B target's Q4_K / Q6_K blocks, the 0.5B
draft's Q5_0 / Q8_0 / Q6_K / Q4_K), loaded with ``quant="gguf"``: greedy speculative decoding
emits exactly the target-only tokens for several K (verification tiles of 2..7 rows), at each
SIMD level of the kernels this CPU has, and every level emits the same tokens."""

from __future__ import annotations

import pytest
import torch

from specd.engine.drafters import ModelDrafter
from specd.engine.speculative import Decoding, generate
from specd.models import kernels
from specd.models.gguf_linear import SIMD_LEVELS, repacks_here, simd_level, simd_levels
from specd.models.loader import load_model
from specd.engine.config import DEFAULT_DRAFT, DEFAULT_TARGET

pytestmark = [pytest.mark.real_models,
              pytest.mark.skipif(kernels.unavailable() is not None, reason=str(kernels.unavailable()))]

PROMPT = ('import argparse\n\n\ndef parse_args():\n    parser = argparse.ArgumentParser()\n'
          '    parser.add_argument("--input", type=str)\n')


@pytest.fixture(scope="module")
def gguf_pair():
    from tests.conftest import _real_pair_present

    if not _real_pair_present():
        pytest.skip("the default pair is not pulled: run `specd models pull`")
    return load_model(DEFAULT_TARGET, quant="gguf", max_len=512), load_model(DEFAULT_DRAFT, quant="gguf", max_len=512)


def test_greedy_speculative_equals_target_only_at_every_level(gguf_pair) -> None:
    target, draft = gguf_pair
    # where the kernels repack (AVX2 / AVX-512), the target's K-quant layers run repacked
    assert target.model.layers[0]["gate_up"].repacked is repacks_here()
    prompt = target.tokenizer.encode(PROMPT)
    assert draft.tokenizer.encode(PROMPT) == prompt
    outputs: dict[int, list[int]] = {}
    for level in simd_levels()[1:] or simd_levels():  # the SIMD paths (the scalar one is the tests' reference)
        with simd_level(level):
            target.model.rollback(0)
            draft.model.rollback(0)
            plain, _ = generate(target.model, prompt, Decoding(24))
            for k in (2, 4, 6):
                spec, stats = generate(target.model, prompt, Decoding(24), ModelDrafter(draft.model), k=k)
                assert spec == plain, (SIMD_LEVELS[level], k)
                assert stats.accepted > 0  # the 0.5B draft agrees with the 1.5B target on code
            outputs[level] = plain
    assert len({tuple(v) for v in outputs.values()}) == 1, {SIMD_LEVELS[lv]: v for lv, v in outputs.items()}
    assert len(plain) == 24
