"""What the bench runs: specd's own modes and the anchors, parsed from ``--modes``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from specd.bench.errors import BenchError

SPECD_KINDS = ("target", "spec")
ANCHOR_KINDS = ("hf-target", "hf-assisted", "llamacpp", "llamacpp-lookup", "llamacpp-server", "remote")
ALL_MODES = "target,spec,hf-target,hf-assisted,llamacpp,llamacpp-lookup,llamacpp-server"
HELP = (
    "comma-separated: target (specd, target alone), spec (the configured K), spec:k=N or spec:auto "
    "(the K policy), each with an optional :tree (token trees) and :continue (the timed request "
    "continues an accepted suggestion: its prefix adds the first characters of an untimed "
    "suggestion, which stays remembered; target:continue is its baseline), and the "
    "anchors hf-target, hf-assisted (transformers assisted generation, same pair, fp32), llamacpp, "
    "llamacpp-lookup[:k=N] (llama-cpp-python on the same GGUF files), llamacpp-server (llama.cpp's "
    "llama-server /infill, binaries built by `python -m specd.bench.llamacpp_build`), remote (specd's remote "
    "backend on the server --backend names: llama-server:URL or openai:URL/v1); 'all' = " + ALL_MODES
)


@dataclass(frozen=True)
class Mode:
    kind: str
    k: int | None = None  # draft tokens per round (spec) or lookup tokens (llamacpp-lookup)
    auto: bool = False  # spec:auto — the engine's K policy (--k auto) chooses K each round
    tree: bool = False  # spec...:tree — token trees (--tree on)
    continued: bool = False  # ...:continue — the user typed the start of the shown suggestion

    @property
    def name(self) -> str:
        name = self.kind if self.k is None else f"{self.kind}:k={self.k}"
        if self.auto:
            name = f"{self.kind}:auto"
        return name + (":tree" if self.tree else "") + (":continue" if self.continued else "")

    @property
    def is_anchor(self) -> bool:
        return self.kind in ANCHOR_KINDS

    @property
    def needs_draft(self) -> bool:
        return self.kind in ("spec", "hf-assisted")


def parse_modes(text: str, default_k: int | str) -> tuple[Mode, ...]:
    """Modes in the order given; ``target`` is added first when absent (speedups need it)."""
    items = [s.strip() for s in text.split(",") if s.strip()]
    items = [x for item in items for x in (ALL_MODES.split(",") if item == "all" else [item])]
    if not items:
        raise BenchError(f"--modes is empty: give {HELP}")
    modes: list[Mode] = []
    for item in items:
        m = re.fullmatch(r"([a-z-]+)(?::k=(\d+)|:(auto))?(:tree)?(:continue)?", item)
        kind = m.group(1) if m else None
        if kind not in SPECD_KINDS + ANCHOR_KINDS:
            raise BenchError(f"unknown mode {item!r}: modes are {HELP}")
        k = int(m.group(2)) if m.group(2) else None
        auto, tree, continued = bool(m.group(3)), bool(m.group(4)), bool(m.group(5))
        if kind == "spec" and k is None and default_k == "auto":
            auto = True  # plain "spec": the configured K, here the K policy
        if k is not None and kind not in ("spec", "llamacpp-lookup"):
            raise BenchError(f"mode {item!r}: only spec and llamacpp-lookup take :k=N")
        if (auto or tree) and kind != "spec":
            raise BenchError(f"mode {item!r}: only spec takes :auto and :tree")
        if continued and kind not in SPECD_KINDS:
            raise BenchError(f"mode {item!r}: only target and spec take :continue")
        if kind == "spec" and not auto:
            k = default_k if k is None else k
            if not 1 <= k <= 32:
                raise BenchError(f"mode {item!r}: K must be in 1..32")
        if kind == "llamacpp-lookup" and k is None:
            k = 10  # llama-cpp-python's default num_pred_tokens
        mode = Mode(kind, k, auto, tree, continued)
        if mode not in modes:
            modes.append(mode)
    if Mode("target") not in modes:
        modes.insert(0, Mode("target"))
    if any(m.continued for m in modes) and Mode("target", continued=True) not in modes:
        modes.insert(1, Mode("target", continued=True))  # the continued modes' baseline
    return tuple(modes)
