"""The composition root: everything that wires specd together, in one place.

Every face (the CLI, the daemon, the in-process LSP, the bench) gets its ``Engine`` from
:func:`build_engine`. Here, and only here: torch's process-wide thread count is set, models are
loaded, the draft is told it need not be batch-invariant, and the K policy's step costs are read
from the cache directory when a few timed steps confirm them, else measured and stored. The
engine itself does no I/O.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
from dataclasses import replace
from pathlib import Path
from typing import Callable

import torch

from specd.engine.config import HEAD_DRAFTERS, MODEL_DRAFTERS, EngineConfig, resolve_drafter
from specd.engine.engine import Engine
from specd.engine.policy import CostModel, convex_curve, costs_hold, measure_costs
from specd.engine.head_drafter import DraftHeads
from specd.models import heads, hub_gguf, kernels
from specd.models.eagle import EagleHead
from specd.models.errors import ModelError
from specd.models.footprint import Footprint, NotEnoughMemory, available_memory, estimate
from specd.models.loader import LoadedModel, load_model, resolve
from specd.models.protocol import CausalLM
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED, cache_root

log = logging.getLogger("specd.app")

COSTS_KEY_VERSION = "costs-v15"  # bump when what the cost curve measures changes (v15: AVX2 K-quant tiles stream each super-block once, both halves in turn; v14: AVX2 K-quant tiles of 5 rows; v13: attention's max and weighted sum faster; v12: the repacked tiles prefetch a slice per sub-block, extra verified rows cheaper; v11: Q6_K_X16 unpacked in fewer operations, kernel ABI 9; v10: keyed by engine.kv_cache; v9: the EAGLE layer drafts in one C call; v8: EAGLE heads draft on INT8 rows; v4: repacked GGUF kernels; v5: INT4 drafts on the repacked Q4_0 kernels; v6: repacked weights prefetched into L2, extra verified rows nearly free; v7: attention prefetched, the KV cache on huge pages)
# environment variables that change which kernels run (a curve measured under one misleads another)
KERNEL_ENV = ("SPECD_GG_SIMD",)
EAGLE_COST_CONTEXT = 512  # rows an EAGLE head's timed step attends over (EagleDrafter's window)


def load_target(config: EngineConfig) -> LoadedModel:
    """The configured target, loaded as the daemon runs it (benchmarks time this same model)."""
    return load_model(config.target, quant=config.target_quant, max_len=config.max_len, device=config.device,
                      backend=config.target_backend, threads=config.threads, kv_cache=config.kv_cache)


def load_draft(config: EngineConfig) -> LoadedModel:
    """The configured draft model, loaded as the daemon runs it (``config.draft`` must be set)."""
    # row_attention off: only the target's numbers define the output, the draft may batch its attention
    return load_model(config.draft, quant=config.draft_quant, max_len=config.max_len, device=config.device,
                      head_vocab=config.draft_head_vocab, backend=config.draft_backend, threads=config.threads,
                      row_attention=False, kv_cache=config.kv_cache)


def heads_at_hand(config: EngineConfig) -> bool:
    """Whether draft heads can draft for ``config``'s target as it runs: a heads file (``--heads``,
    or shipped for the target), a GGUF target (the heads read its output rows) on a runtime that
    hands over hidden states (not ONNX Runtime), on the CPU (where the heads were measured)."""
    if config.device != "cpu" or config.target_backend == "ort":
        return False
    kind = shipped_kind(config)
    if kind is not None and heads.shipped(config.target, kind) is None:
        return False
    try:
        return resolve(config.target).gguf is not None
    except ModelError:
        return False


def resolved(config: EngineConfig) -> EngineConfig:
    """``config`` with ``--drafter default`` resolved (``resolve_drafter``)."""
    return replace(config, drafter=resolve_drafter(config.drafter, config.drafter == "default" and heads_at_hand(config)))


def build_engine(config: EngineConfig = EngineConfig()) -> Engine:
    """Load the configured pair and hand back a ready engine (costs measured or read for K auto).
    The engine keeps ``config`` as given (``--drafter default`` included: what clients compare);
    the heads are handed over exactly when ``default`` resolves to a head drafter here."""
    runs = resolved(config)  # --drafter default resolved
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    check_memory(runs)
    target = load_target(config)
    heads = load_heads(config) if runs.drafter in HEAD_DRAFTERS else None
    draft = load_draft(config) if config.draft and runs.drafter in MODEL_DRAFTERS else None
    draft_model = draft.model if draft else None
    costs = None
    if config.k == "auto" and (draft_model is not None or runs.drafter != "model"):
        costs = step_costs(runs, target.model, draft_model, heads)
    return Engine(target.model, target.tokenizer, draft_model, draft.tokenizer if draft else None, config,
                  costs=costs, heads=heads)


def shipped_kind(config: EngineConfig) -> str | None:
    """The kind of shipped heads ``--heads`` names (``eagle`` when it names none), or None when it
    names a file."""
    if not config.heads:
        return "eagle"
    return config.heads if config.heads in heads.SHIPPED_KINDS else None


def heads_file(config: EngineConfig) -> Path:
    """The draft heads ``--drafter heads`` loads: ``--heads FILE``; ``--heads eagle|medusa`` or
    none, the ones of that kind (EAGLE when none is named) shipped for the target (ModelError when
    there are none)."""
    kind = shipped_kind(config)
    if kind is None:
        path = Path(config.heads).expanduser()
        if not path.is_file():
            raise ModelError(f"draft heads {config.heads}: no such file")
        return path
    shipped = heads.shipped(config.target, kind)
    if shipped is None:
        raise ModelError(f"no {kind} draft heads are shipped for {config.target}: train them (specd heads data, "
                         f"specd heads train) and pass --heads FILE")
    return shipped


def load_heads(config: EngineConfig) -> DraftHeads:
    """The draft heads for ``config``, their head (and embedding) rows read from the target's GGUF
    file, and checked against it (the file records the target's sha256)."""
    path = heads_file(config)
    gguf = gguf_file(config.target)
    if gguf is None:
        raise ModelError(f"draft heads read the target's output head from its GGUF file; {config.target} is not "
                         f"a GGUF model")
    _, info = heads.read_info(path)
    source = resolve(config.target)
    if info.target_sha256 and source.sha256 and info.target_sha256 != source.sha256:
        raise ModelError(f"draft heads {path} were trained for another target ({info.target}, sha256 "
                         f"{info.target_sha256[:12]}…), not {config.target} ({source.sha256[:12]}…)")
    return heads.load(path, heads.HeadRows(gguf), heads.HeadRows(gguf, embedding=True))


def footprints(config: EngineConfig) -> list[tuple[str, Footprint | None]]:
    """(role, estimated footprint) of each model ``config`` loads, read from disk before loading."""
    config = resolved(config)
    built = kernels.available()
    out = [("target", estimate(config.target, config.target_quant, config.max_len, config.device, 0,
                                built and config.target_backend != "ort", config.kv_cache))]
    if config.draft and config.drafter in MODEL_DRAFTERS:
        out.append(("draft", estimate(config.draft, config.draft_quant, config.max_len, config.device,
                                      config.draft_head_vocab, built and config.draft_backend != "ort",
                                      config.kv_cache)))
    return out


def check_memory(config: EngineConfig, available: tuple[int, str] | None = None) -> None:
    """Before anything is loaded: a ``NotEnoughMemory`` naming the numbers when the models' weights,
    their KV caches and the prefix cache's budget exceed the memory available (``available``:
    bytes and where the number comes from; default: :func:`available_memory`). Nothing is checked
    on a GPU, or where a footprint or the available memory cannot be known before loading."""
    if config.device != "cpu":
        return
    available = available or available_memory()
    models = footprints(config)
    if available is None or any(f is None for _, f in models):
        return
    have, where = available
    prefix = config.prefix_cache_mb << 20
    need = sum(f.total for _, f in models if f is not None) + prefix
    if need <= have:
        return
    parts = [f"the {role} {f.name} ({f.quant}) needs {_gib(f.total)} ({_gib(f.weight_bytes)} of weights + "
             f"{_gib(f.kv_cache_bytes)} of KV cache at max_len {config.max_len})" for role, f in models if f is not None]
    if prefix:
        parts.append(f"the prefix cache up to {_gib(prefix)} (prefix_cache_mb {config.prefix_cache_mb})")
    raise NotEnoughMemory(
        f"not enough memory to load the models: {'; '.join(parts)}: about {_gib(need)} in all, but "
        f"{_gib(have)} is available ({where}); lower max_len or prefix_cache_mb, pick a smaller quant mode "
        f"or model, or free memory")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def model_directory(spec: str) -> Path:
    """The Hugging Face directory a model spec (``--target`` / ``--draft``) loads from, converted
    or fetched first when needed (for tools that run the same model another way: the bench's
    anchors)."""
    return resolve(spec).directory


def gguf_file(spec: str | None) -> Path | None:
    """The GGUF file behind a model spec: a published model's, or the spec itself when it names
    a ``.gguf``; None otherwise."""
    if spec is None:
        return None
    if spec in PUBLISHED:
        return gguf_path(PUBLISHED[spec])
    if hub_gguf.is_hub_gguf(spec) and not Path(spec).expanduser().is_file():
        return hub_gguf.local_path(spec)
    return Path(spec).expanduser() if spec.endswith(".gguf") else None


def step_costs(config: EngineConfig, target: CausalLM, draft: CausalLM | None,
               draft_heads: DraftHeads | None = None) -> CostModel:
    """The K policy's measured step costs for this machine, pair and runtime: read from the cache
    directory when a few timed steps confirm them (``costs_hold``), else measured and stored.
    N-gram drafts cost nothing; a draft by heads costs one step of them (a Medusa call for all K,
    counted per draft: an upper bound), in ``heads_ms`` where the draft model drafts beside them."""
    path = costs_path(config, target, draft)
    step = None if draft_heads is None else head_step(draft_heads)
    cost = read_costs(path)
    if cost is not None and not costs_hold(cost, target, draft, draft_step=step):
        log.info("stored step costs %s no longer match this machine's steps: measuring again", path)
        cost = None
    if cost is None:
        cost = measure_costs(target, draft, draft_step=step)
        write_costs(path, cost)
    if draft is None and draft_heads is None:
        cost = CostModel(0.0, cost.verify_ms)
    return cost


def head_step(draft_heads: DraftHeads, context: int = EAGLE_COST_CONTEXT) -> Callable[[], object]:
    """One draft step of ``draft_heads``, to time: a recurrent or EAGLE head's step for one token
    (an EAGLE head's attending over ``context`` rows of its own cache, as at an editor's prompt),
    a Medusa call for all its heads."""
    state = torch.randn(target_hidden_size(draft_heads))
    if isinstance(draft_heads, heads.RecurrentHead):
        return lambda: draft_heads.draft(state, 0, 1)
    if isinstance(draft_heads, EagleHead):
        cache = draft_heads.new_cache(context + 1)
        draft_heads.extend(cache, torch.randn(context, state.numel()), [0] * context)

        def eagle_step() -> object:
            out = draft_heads.draft(cache, state, 0, 1)
            cache.rollback(context)
            return out
        return eagle_step
    return lambda: draft_heads.draft_logits(state, 1)


def target_hidden_size(draft_heads: DraftHeads) -> int:
    return int(draft_heads.head.shape[1])


def costs_path(config: EngineConfig, target: CausalLM, draft: CausalLM | None) -> Path:
    """Keyed by what actually runs (each model's ``describe()``), not by the configured names:
    ``auto`` resolves differently as runtimes are added, and a stale curve misleads the policy."""
    runtimes = (target.describe(), draft.describe() if draft is not None else "-")
    key = "|".join(map(str, (COSTS_KEY_VERSION, config.target, config.target_quant, config.draft,
                             config.draft_quant, config.draft_head_vocab, config.drafter, config.heads, config.kv_cache,
                             platform.machine(), platform.processor(), torch.get_num_threads(), *runtimes,
                             *(os.environ.get(v, "") for v in KERNEL_ENV))))
    return cache_root() / "costs" / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")


def read_costs(path: Path) -> CostModel | None:
    """The stored curve, in the shape measure_costs gives (``convex_curve``: a curve stored before
    that rule keeps its points where they fit it)."""
    try:
        cost = CostModel.from_json(path.read_text())
    except (OSError, ValueError, KeyError):
        return None
    return CostModel(cost.draft_ms, convex_curve(cost.verify_ms))


def write_costs(path: Path, cost: CostModel) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cost.to_json())
    except OSError:
        pass  # a read-only cache directory: measure again next time
