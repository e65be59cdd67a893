"""Toy language models for statistical tests: logits are a table lookup by (position, token).

They follow the runtime's cache protocol exactly (append, rollback, common prefix), so an
off-by-one between logit rows, drafted tokens, positions or cache rollback changes the output
distribution, and the chi-square test sees it. They cost microseconds per call.
"""

from __future__ import annotations

import torch


class TableLM:
    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # [max_len, V, V]: logits of the next token given (position, token)
        self.tokens: list[int] = []

    @property
    def vocab_size(self) -> int:
        return self.table.shape[-1]

    @property
    def max_len(self) -> int:
        return self.table.shape[0]

    @property
    def cache_len(self) -> int:
        return len(self.tokens)

    def forward(self, tokens, positions=None, attn_mask=None, *, logits=True) -> torch.Tensor:
        start = len(self.tokens)
        ids = tokens.tolist()
        if start + len(ids) > self.max_len:
            raise ValueError("context full")
        self.tokens += ids
        if positions is None:
            positions = torch.arange(start, start + len(ids))
        return self.table[positions, tokens]

    def keep(self, start: int, indices: torch.Tensor) -> None:
        self.tokens = self.tokens[:start] + [self.tokens[start + int(i)] for i in indices]

    def rollback(self, length: int) -> None:
        assert 0 <= length <= len(self.tokens)
        del self.tokens[length:]

    def common_prefix(self, tokens: torch.Tensor) -> int:
        n = 0
        for a, b in zip(self.tokens, tokens.tolist()):
            if a != b:
                break
            n += 1
        return n

    def next_probs(self, position: int, token: int, vocab: int | None = None) -> torch.Tensor:
        """The next token's distribution over the first ``vocab`` ids (default: every row)."""
        return torch.softmax(self.table[position, token, :vocab].double(), -1)


def table(max_len: int, vocab: int, seed: int, scale: float = 1.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(max_len, vocab, vocab, generator=g) * scale


def padded(table: torch.Tensor, rows: int, logit: float = 8.0) -> torch.Tensor:
    """``table`` with padding columns up to ``rows`` output ids, each at ``logit`` (high: were they
    allowed, they would take most of the probability)."""
    pad = torch.full((*table.shape[:-1], rows - table.shape[-1]), logit)
    return torch.cat([table, pad], dim=-1)


def exact_joint(target: TableLM, prompt: list[int], n_new: int, vocab: int | None = None) -> torch.Tensor:
    """P(first ``n_new`` generated tokens = xs) under ``target`` restricted to its first ``vocab``
    ids (default: all), for every xs: ``[V] * n_new``."""
    import itertools

    vocab = vocab or target.vocab_size
    exact = torch.zeros([vocab] * n_new, dtype=torch.float64)
    for xs in itertools.product(range(vocab), repeat=n_new):
        prob, prev = 1.0, prompt[-1]
        for i, x in enumerate(xs):
            prob *= float(target.next_probs(len(prompt) - 1 + i, prev, vocab)[x])
            prev = x
        exact[xs] = prob
    return exact
