"""The bytes one decode step reads (``specd.models.step_bytes``), on tiny models: the linear
layers and the head as held, not the embedding, norms or biases; a tied head reads the embedding."""

from __future__ import annotations

import torch

from specd.models.bandwidth import read_bandwidth
from specd.models.decoder import Decoder
from specd.models.step_bytes import step_bytes
from specd.models.tiny import tiny_config, tiny_weights


def _linear_bytes(c, per_weight: int) -> int:
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    layer = c.hidden_size * (q + 2 * kv) + q * c.hidden_size + 3 * c.hidden_size * c.intermediate_size
    return c.num_layers * layer * per_weight


def test_a_step_reads_the_linear_layers_and_the_head_not_the_embedding() -> None:
    c = tiny_config(vocab=64, hidden=32)
    model = Decoder(c, tiny_weights(c, 0), compute_dtype=torch.float32, max_len=16)
    weights = model.weight_bytes()
    head = c.vocab_size * c.hidden_size * 4
    assert weights["head"] == head and weights["embedding"] == head
    assert step_bytes(weights) == _linear_bytes(c, 4) + head
    assert step_bytes(weights) < sum(weights.values())  # the embedding, norms and biases are not read


def test_a_sub_vocabulary_head_counts_its_rows_only() -> None:
    c = tiny_config(vocab=64, hidden=32)
    model = Decoder(c, tiny_weights(c, 0), compute_dtype=torch.bfloat16, max_len=16, head_rows=list(range(16)))
    assert step_bytes(model.weight_bytes()) == _linear_bytes(c, 2) + 16 * c.hidden_size * 2


def test_a_tied_head_reads_the_whole_embedding() -> None:
    c = tiny_config(vocab=64, hidden=32, tie=True)
    model = Decoder(c, tiny_weights(c, 0), compute_dtype=torch.float32, max_len=16)
    weights = model.weight_bytes()
    assert weights["head"] == 0  # held once, as the embedding
    assert step_bytes(weights) == _linear_bytes(c, 4) + c.vocab_size * c.hidden_size * 4


def test_a_runtime_that_cannot_tell_its_bytes_reads_none() -> None:
    assert step_bytes({}) == 0


def test_the_bandwidth_probe_reports_a_rate_and_how() -> None:
    bw = read_bandwidth(nbytes=8 << 20, repeats=2)  # small: the rate itself is not checked
    assert bw.gbs > 0 and "best of 2" in bw.how and "8 MiB" in bw.how
