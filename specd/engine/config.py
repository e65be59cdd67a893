"""The engine's settings, declared once (:mod:`specd.schema`): the ``[engine]`` table of the config
file, the model and engine flags of every command (``--target``, ``--k``, ...), and the
``engine`` object the daemon reports in ``health``.

Torch-free: a client that only talks to the daemon reads these settings without loading a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specd.models.modes import (
    BACKENDS,
    DEFAULT_DRAFT_QUANT,
    DEFAULT_KV_CACHE,
    DEFAULT_TARGET_QUANT,
    DRAFT_QUANTS,
    KV_CACHES,
    TARGET_QUANTS,
)
from specd.requests import K_MAX
from specd.schema import nested, setting

# the default pair, by their names in specd.models.registry.PUBLISHED (`specd models pull` fetches
# them); the engine reads models through their runtime, so it names them and never imports the registry
DEFAULT_TARGET = "qwen2.5-coder-1.5b"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b"
DRAFTERS = ("default", "model", "ngram", "both", "heads", "heads+ngram", "auto")
HEAD_DRAFTERS = ("heads", "heads+ngram", "auto")  # the drafters that read --heads
MODEL_DRAFTERS = ("model", "both", "auto")  # the drafters that run the draft model (--draft)
TREE = ("on", "off")


def resolve_drafter(drafter: str, heads_at_hand: bool) -> str:
    """``default``: prompt lookup with the draft heads (``heads+ngram``) where heads are at hand for
    the target (``--heads``, or shipped with specd), else prompt lookup with the draft model
    (``both``); any other drafter as it is."""
    if drafter != "default":
        return drafter
    return "heads+ngram" if heads_at_hand else "both"
# token healing (specd.engine.healing): which last token of the text before the cursor is taken
# out and generated again, constrained to start with its text
HEALING = ("off", "whitespace", "prefix")


def parse_k(text: str) -> int | str:
    """A ``--k`` value: an integer, or "auto"."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"expected an integer or 'auto', got {text!r}") from None


def _check_k(value: int | str) -> str | None:
    if value == "auto":
        return None
    if isinstance(value, str):
        return f'an integer or "auto", got {value!r}'
    return None if 0 <= value <= K_MAX else f'must be in 0..{K_MAX} or "auto", got {value}'


def _positive(value: int) -> str | None:
    return None if value >= 1 else "must be a positive integer"


def _not_negative(value: float) -> str | None:
    return None if value >= 0 else "must be >= 0"


def _probability(value: float) -> str | None:
    return None if 0.0 <= value <= 1.0 else "must be in [0, 1]"


def _device(value: str) -> str | None:
    return None if value == "cpu" or value.startswith("cuda") else f"must be cpu or cuda[:N], got {value!r}"


def _model_or_none(value: str) -> str | None:
    return None if value in ("", "none") else value


@dataclass(frozen=True)
class PromptWindows:
    # 384 (was 1024) by measurement (bench/RESULTS.md, session 8): on single-line tasks from real code
    # the shorter windows lost nothing, and a cold prompt costs ~10 ms a token in both models
    max_prefix_tokens: int = setting(384, check=_positive, help="prefix window: tokens before the cursor")
    # 256 (was 32) by measurement (bench/RESULTS.md, session 31): on the 126 dev sites, 67 exact first
    # lines and 3,112 accepted characters against 59 and 2,621 at 32, most of it where a block is
    # written. The price: in FIM order every suffix token after an edit is computed again, so a cold
    # request or a keystroke that reaches the model costs ~1 s more on 2 cores (still 0.58x llama-server's
    # first suggestion in a newly opened file); 32 is the low-latency choice.
    max_suffix_tokens: int = setting(256, check=_positive,
                                     help="suffix window: tokens after the cursor (each keystroke recomputes them)")
    # Where text precedes the cursor on its line (typing within a line), at most this many: every key
    # typed there that reaches the model recomputes the whole suffix window. Off by default (session
    # 32, bench/RESULTS.md): at 32 a keystroke that recomputes the suffix takes ~0.35 s instead of
    # ~1.7 s on 2 cores, but the default's keystroke p50 is already 0.28x llama-server's (token healing
    # makes keys typed within a word cost one token).
    mid_line_suffix_tokens: int = setting(0, check=_not_negative,
                                          help="suffix window where text precedes the cursor on its line, at most "
                                               "max_suffix_tokens (typing within a line: each keystroke that "
                                               "reaches the model recomputes these; 0: max_suffix_tokens)")

    def suffix_tokens(self, prefix: str) -> int:
        """The suffix window for a cursor after ``prefix``: ``mid_line_suffix_tokens`` (when set)
        where text precedes the cursor on its line, else ``max_suffix_tokens`` (never more than it)."""
        if self.mid_line_suffix_tokens and prefix[prefix.rfind("\n") + 1 :].strip():
            return min(self.mid_line_suffix_tokens, self.max_suffix_tokens)
        return self.max_suffix_tokens


@dataclass(frozen=True)
class EngineConfig:
    target: str = setting(DEFAULT_TARGET, help="target model: a published name, .gguf file, HF directory or hub id")
    draft: str | None = setting(DEFAULT_DRAFT, convert=_model_or_none,
                                help="draft model (same forms), or 'none' for target-only")
    target_quant: str = setting(DEFAULT_TARGET_QUANT, choices=TARGET_QUANTS,
                                help="target weights; auto: a GGUF source's own blocks (gguf) on the CPU, "
                                     "else int8 (both batch-invariant on the CPU)")
    draft_quant: str = setting(DEFAULT_DRAFT_QUANT, choices=DRAFT_QUANTS, help="draft weights")
    # >0: the draft scores only the N most frequent code tokens (65536: ~1 % of the bench prompts'
    # tokens fall outside it in Python, JavaScript and C; 32768 leaves 3-5 % out)
    draft_head_vocab: int = setting(65536, check=_not_negative,
                                    help="the draft scores only the N most frequent code tokens (0: full vocabulary)")
    # default: heads+ngram where draft heads are at hand for the target (the shipped head of the
    # default target), both elsewhere (bench/RESULTS.md, session 23: on the dev split the two decode
    # alike and heads+ngram answers a cold prompt ~0.5 s sooner, with no draft model to load or prefill)
    drafter: str = setting("default", choices=DRAFTERS,
                           help="draft source: default (heads+ngram where draft heads are at hand for the target, "
                                "else both), the draft model, prompt lookup (n-gram), both (n-gram when it "
                                "finds a match, else the model), heads (draft heads on the target's own "
                                "hidden state: --heads), heads+ngram (n-gram when it finds a match, else "
                                "the heads), or auto (n-gram when it finds a match, else the draft model or "
                                "the heads, whichever K auto predicts faster on this kind of text)")
    heads: str = setting("", help="draft heads for --drafter heads: a file (specd heads train), or eagle | medusa: "
                                  "the heads of that kind shipped for the target; empty: the EAGLE head shipped "
                                  "for the target, if any")
    device: str = setting("cpu", check=_device, help="cpu or cuda[:N]")
    # auto: StructureK with the in-round gate (bench/RESULTS.md compares it with fixed K)
    k: int | str = setting("auto", parse=parse_k, check=_check_k,
                           help="draft tokens per round, or 'auto' (chosen per round; requests may override)")
    draft_min_prob: float = setting(0.0, check=_probability,
                                    help="the model drafter ends a round when its top probability falls below this")
    # 2.0 by measurement (bench/RESULTS.md, session 29): on the dev race tasks' first drafts in
    # decoding, +2 on the logits of the last 256 tokens' ids took the shipped head from 0.401 to
    # 0.450 (the target copies identifiers from the context more readily than the head predicts);
    # through the daemon, with prompt lookup in front, it decodes level with 0 (same-run races).
    # Session 44, Medusa's heads: on the dev tasks' decoding rounds head 1's first choice was the
    # target's token 0.231 of the time without, 0.262 / 0.270 / 0.285 with +1 / +2 / +3; Medusa
    # alone through the daemon on dev, +2 against 0: 0.921x the ms a token per task (13 of 13)
    head_context_bias: float = setting(2.0, check=_not_negative,
                                       help="draft heads (EAGLE, Medusa): added to the heads' logit of every token "
                                            "among the sequence's last 256 (0: off); drafts only, the output is "
                                            "unchanged")
    # Session 30 (dev tasks, through the daemon): width 3 took 2 % fewer rounds and decoded level;
    # a verified row is nearly free here only up to ~3 rows, when the host's memory is fast.
    # Session 40, after the repacked tiles' prefetches were spread (a verified row ~1-2 ms instead
    # of 5-6 on the Ice Lake): on the dev race tasks width 2 decoded 0.90x the chain's ms a token
    # per task (faster on 9 of 13), width 3 0.91x (7 of 13); K auto's branch gate still decides
    # per round whether the sibling is verified
    head_width: int = setting(2, check=_positive,
                              help="EAGLE and Medusa drafts: candidates at the first draft position, the "
                                   "head's first draft and up to N-1 of its next choices beside it (a token "
                                   "tree, as K auto's branch gate takes them); 1: a chain")
    tree: str = setting("off", choices=TREE,
                        help="token trees: verify several candidates where the draft is unsure")
    tree_width: int = setting(3, check=_positive, help="candidates per uncertain draft position with --tree on")
    tree_branch_below: float = setting(0.5, check=_probability,
                                       help="with --tree on: branch where the draft's top probability is below this")
    max_len: int = setting(4096, check=_positive, help="KV cache capacity in tokens")
    # f16 by measurement (bench/RESULTS.md, session 36): attention reads half the bytes; the
    # prefix cache holds twice the tokens
    kv_cache: str = setting(DEFAULT_KV_CACHE, choices=KV_CACHES,
                            help="KV cache element of both models where their layers run in specd's C kernels: "
                                 "f16 (half the bytes attention reads and the prefix cache keeps, as llama.cpp "
                                 "keeps it) or f32; other runtimes keep f32")
    # KV blocks of earlier prompts, both models' (specd.engine.prefix_cache): a request restores
    # the longest cached prefix of its prompt, so files edited in turn each stay warm. The default
    # pair takes 40 KiB per cached token in float16 (target 28, draft 12): 1 GiB holds ~26,000.
    prefix_cache_mb: int = setting(1024, check=_not_negative,
                                   help="memory for KV blocks of earlier prompts, shared by all sessions and "
                                        "both models, least recently used evicted first (0: off); must hold "
                                        "one longest prompt")
    # a request recomputes from the last block boundary before its first new token: on the default
    # pair (~24 ms a prompt token) 64-token blocks cost ~0.8 s on average per revisit, 16-token ~0.2 s
    prefix_block_tokens: int = setting(16, check=_positive,
                                       help="tokens per prefix-cache block (a prompt is reused in whole blocks)")
    # the default pair prefills ~24 ms a token (both models): a 64-token chunk takes ~1.5 s, and a
    # cold 1,013-token prompt took 23.8 s in chunks of 64 vs 24.4 s in one forward (bench/prefix_cache.py)
    prefill_chunk_tokens: int = setting(64, check=_positive,
                                        help="prefill in chunks of this many tokens; cancellation and preemption "
                                             "by another session take effect between chunks")
    # prefix by measurement on the quality bench's dev split (126 tasks, greedy, the default pair):
    # exact first lines 51 off, 57 whitespace, 59 prefix; accepted characters 2264, 2563, 2604;
    # answers starting with extra indentation 3, 1, 0 (specd.engine.healing's docstring)
    token_healing: str = setting("prefix", choices=HEALING,
                                 help="token healing: take the last token before the cursor out of the prompt and "
                                      "make the completion start with its text: whitespace (a whitespace-only "
                                      "token), prefix (any token a longer token starts with), or off")
    windows: PromptWindows = nested(PromptWindows)
    threads: int = setting(0, check=_not_negative, shown_default="0, the library's: all cores",
                           help="torch (and ONNX Runtime) intra-op threads")
    # auto: on the CPU, int8 | int4 on torch with specd's kernels (layers fused in C), ONNX Runtime
    # without them (and for fp32); torch otherwise (CUDA, bf16, fp8)
    target_backend: str = setting("auto", choices=BACKENDS,
                                  help="target runtime: auto (on the CPU, torch with specd's kernels for int8 | int4 "
                                       "where they are built, else ort; ort for fp32; torch elsewhere), torch, or "
                                       "ort (ONNX Runtime)")
    draft_backend: str = setting("auto", choices=BACKENDS, help="draft runtime: auto (as for the target), torch, or ort")

    def replace(self, **changes: Any) -> EngineConfig:
        return dataclasses.replace(self, **changes)
