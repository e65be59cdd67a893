"""Resolve a model name or path and load it: a published name, a GGUF file, a Hugging Face
directory, or a hub id."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable
import torch
from safetensors import safe_open

from specd.models import kernels, subvocab
from specd.models.calibrate import calibration_tokens, channel_absmax, channel_meansq
from specd.models.config import ModelConfig
from specd.models.decoder import Decoder
from specd.models.errors import ModelError
from specd.models.gguf_convert import write_tokenizer_dir
from specd.models.gguf_float import GgufFloatWeights
from specd.models.gguf_model import GgufFile, GgufLinearFactory, GgufWeights
from specd.models.kv_cache import kv_dtype
from specd.models.modes import (AUTO_QUANT, BACKENDS, DEFAULT_KV_CACHE, DEFAULT_TARGET_QUANT, GGUF_QUANT, KERNEL_QUANTS,
                                 auto_target_quant)
from specd.models.pull import converted_dir, gguf_path, is_pulled, recorded_sha256, sha256_file, write_record
from specd.models.quantize import check_mode, linear_factory
from specd.models.registry import PUBLISHED, cache_root
from specd.models.tokenizer import Tokenizer
from specd.models import hub_gguf
from specd.models.weights import LazyWeights

if TYPE_CHECKING:  # a type only: the ONNX Runtime backend is imported when a model runs on it
    from specd.models.ort_runtime import OrtDecoder


@dataclass
class LoadedModel:
    name: str
    path: Path  # the directory the model's derived files live in (tokenizer, quantized layers), or the .gguf of quant mode gguf
    config: ModelConfig
    model: Decoder | OrtDecoder
    tokenizer: Tokenizer


@dataclass(frozen=True)
class ModelSource:
    """Where a model's weights are read from and where its derived files live."""

    directory: Path  # config.json, tokenizer.json, subvocab.json, quant-*.safetensors, ort-*.onnx
    gguf: Path | None = None  # the weights: this GGUF file (None: the directory's *.safetensors)
    sha256: str = ""  # the GGUF's sha256 (keys the stored quantized layers), '' for a directory


def resolve(spec: str) -> ModelSource:
    """A published name (its pulled GGUF), a ``.gguf`` file, a Hugging Face directory
    (``config.json``, ``*.safetensors``, ``tokenizer.json``) or hub id. A GGUF source's tokenizer
    and config are built once beside the cache; its weights are never converted."""
    if spec in PUBLISHED:
        m = PUBLISHED[spec]
        if not is_pulled(m):
            raise ModelError(f"model {spec!r} is not downloaded yet: run `specd models pull {spec}`")
        return ModelSource(converted_dir(m), gguf_path(m), m.sha256)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelError(f"{path}: a model file must be .gguf (or pass a Hugging Face directory)")
        return _local_gguf(path)
    if hub_gguf.is_hub_gguf(spec):  # owner/repo:file.gguf or owner/repo:QUANT
        return _local_gguf(hub_gguf.local_path(spec))
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelError(f"{path}: not a model directory (no config.json)")
        return ModelSource(path)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not spec.startswith((".", "/")):
        return ModelSource(_from_hub(spec))
    known = ", ".join(sorted(PUBLISHED))
    raise ModelError(
        f"unknown model {spec!r}: use one of {known}, a .gguf file, a Hugging Face directory or hub id, "
        f"or a GGUF in a hub repository (owner/repo:file.gguf or owner/repo:QUANT)"
    )


def _converted_path(path: Path) -> Path:
    """Where a local GGUF file's derived files (tokenizer, config, quantized layers) are cached."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_root() / "converted" / f"{path.stem}-{key}"


def _local_gguf(path: Path) -> ModelSource:
    """A local .gguf file: read its header first (a truncated or corrupt file is a ModelError
    naming it, and nothing is written to the cache), then its tokenizer, config and sha256 once
    into its cache directory."""
    file = GgufFile(path)
    out = _converted_path(path)
    if not (out / "tokenizer.json").exists():
        print(f"specd: building the tokenizer of {path} once into {out}", file=sys.stderr)
        write_tokenizer_dir(path, out, file.config)
    sha = recorded_sha256(out)
    if not sha:
        out.mkdir(parents=True, exist_ok=True)
        sha = sha256_file(path)
        write_record(out, path, sha)
    return ModelSource(out, path, sha)


def _from_hub(repo_id: str) -> Path:
    try:
        # only hub ids need it, and it takes a while to import
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as e:
        raise ModelError(f"cannot fetch {repo_id!r} from the Hugging Face hub: {e}") from e


class _LazyWeights(LazyWeights[torch.Tensor]):
    """A checkpoint's tensors by name, each read from its file when asked for and not kept: a
    load whose linear layers come from a stored quantized artifact reads only the embedding, the
    norms and the biases (the INT8 target's 3 GB of bf16 linears are never read, so they never
    sit in the daemon's memory)."""

    def __init__(self, files: list[Path]) -> None:
        self._where: dict[str, Path] = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt") as sf:
                    self._where.update(dict.fromkeys(sf.keys(), f))
            except Exception as e:
                raise ModelError(f"{f}: corrupt or unreadable weights ({e}); pull or convert it again") from e

    def __getitem__(self, name: str) -> torch.Tensor:
        f = self._where[name]
        try:
            with safe_open(str(f), framework="pt") as sf:
                return sf.get_tensor(name)
        except Exception as e:
            raise ModelError(f"{f}: corrupt or unreadable weights ({e}); pull or convert it again") from e


def _read_weights(directory: Path) -> Mapping[str, torch.Tensor]:
    """A Hugging Face directory's float weights (never a GGUF source's: see ``GgufFloatWeights``)."""
    files = sorted(f for f in directory.glob("*.safetensors") if not f.name.startswith("quant-"))
    if not files:
        raise ModelError(f"{directory}: no .safetensors weights")
    return _LazyWeights(files)


# a calibration statistic: per linear layer, a tensor per input channel (specd.models.calibrate)
Statistic = Callable[[Decoder, list[list[int]]], dict[str, torch.Tensor]]


def _calibrate(config: ModelConfig, weights: Mapping[str, torch.Tensor], tokenizer: Tokenizer, spec: str, quant: str,
               stat: Statistic) -> dict[str, torch.Tensor]:
    """Run the dense model over real code once for ``stat``: each layer's outlier input channels
    (int8 on the fallback runtime) or each input channel's mean square (int4's scale search)."""
    print(f"specd: calibrating {spec} for {quant} (once; stored with the quantized weights)", file=sys.stderr)
    # float32: MKL's GEMM; bf16 on a CPU without native bf16 is 2.3x slower for the same statistics
    dense = Decoder(config, weights, compute_dtype=torch.float32, max_len=600)
    return stat(dense, calibration_tokens(tokenizer))


@dataclass(frozen=True)
class LoadRequest:
    """One ``load_model`` call with its quant mode and backend resolved: what a mode's builder reads."""

    spec: str
    mode: QuantMode
    backend: str  # "torch" or "ort" (never "auto")
    max_len: int
    device: str
    head_vocab: int
    threads: int
    row_attention: bool
    kv_dtype: torch.dtype  # where the layers run in C (``Decoder``'s kv_dtype)


@dataclass(frozen=True)
class QuantMode:
    """How a model loads in one quant mode (the names are in ``specd.models.modes``, what each one
    means in ``specd.models.quantize``). ``MODES`` holds one per mode; ``auto`` is not one, it
    resolves to one (``resolve_quant``)."""

    name: str
    build: Callable[[LoadRequest], LoadedModel]
    backends: tuple[str, ...] = ("torch",)  # the runtimes that run it (ort: on the CPU only)
    compute_dtype: torch.dtype = torch.bfloat16  # what the torch runtime computes activations in
    # the statistic its CPU quantizer weighs; computed only when that quantizer asks for it (see
    # ``quantize.linear_factory``'s ``calibrate``); None: the mode never calibrates
    calibration: Statistic | None = None


def resolve_quant(spec: str, quant: str, backend: str, device: str) -> str:
    """``quant`` itself, or for ``auto`` the mode it runs ``spec`` as (``modes.auto_target_quant``)."""
    if quant != AUTO_QUANT:
        return quant
    return auto_target_quant(is_gguf_source(spec) and backend != "ort", device, kernels.unavailable() is None)


def resolve_backend(backend: str, quant: str, device: str) -> str:
    """``auto`` on the CPU: int8 and int4 on the torch runtime when specd's kernels run here (their
    layers fused in C: the INT8 target's step ~20 % cheaper than ONNX Runtime's, the INT4 draft's
    ~half, bench/RESULTS.md), ONNX Runtime for the other modes it runs (fp32, and int8 | int4
    without the kernels); torch otherwise (CUDA, bf16, fp8)."""
    if backend != "auto":
        return backend
    if device != "cpu":
        return "torch"
    if quant in KERNEL_QUANTS and kernels.available() or quant == GGUF_QUANT:
        return "torch"
    return "ort" if quant in modes_on("ort") else "torch"


def modes_on(backend: str) -> tuple[str, ...]:
    """The quant modes ``backend`` runs."""
    return tuple(name for name, mode in MODES.items() if backend in mode.backends)


def load_model(
    spec: str, *, quant: str = DEFAULT_TARGET_QUANT, max_len: int = 4096, device: str = "cpu", head_vocab: int = 0,
    backend: str = "auto", threads: int = 0, row_attention: bool = True, kv_cache: str = DEFAULT_KV_CACHE,
) -> LoadedModel:
    """Load ``spec`` with its linear layers in ``quant`` (``MODES``; ``auto``: ``resolve_quant``).
    ``head_vocab > 0`` keeps only that many most frequent tokens in the output head (drafts).
    ``backend``: ``torch`` (``Decoder``) or ``ort`` (``OrtDecoder``, ONNX Runtime, CPU; modes
    int8 | int4 | fp32; ``threads`` sets its intra-op threads, 0 = ORT's default), or ``auto``
    (``resolve_backend``). ``row_attention``: batch-invariant rows, a position's numbers
    independent of the other rows in its forward (a target's; a draft may pass False, see
    ``Decoder``). ``kv_cache``: the cache's element where the layers run in C (``KV_CACHES``)."""
    if backend not in BACKENDS:
        raise ModelError(f"{spec}: unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    quant = resolve_quant(spec, quant, backend, device)
    backend = resolve_backend(backend, quant, device)
    if backend == "ort":
        if quant not in modes_on("ort"):
            raise ModelError(f"{spec}: the ort backend runs {', '.join(modes_on('ort'))}, not {quant!r}")
        if device != "cpu":
            raise ModelError(f"{spec}: the ort backend runs on the CPU only, not {device!r}")
    else:
        check_mode(quant, device, spec)  # an unknown mode, or one this device cannot run
    mode = MODES[quant]
    try:
        element = kv_dtype(kv_cache)
    except ValueError as e:
        raise ModelError(f"{spec}: {e}") from None
    return mode.build(LoadRequest(spec, mode, backend, max_len, device, head_vocab, threads, row_attention, element))


def _load_source(req: LoadRequest) -> LoadedModel:
    """The modes that read float weights (a GGUF file's, dequantized a tensor at a time, or a
    Hugging Face directory's): dense, or quantized once and stored, on torch or ONNX Runtime."""
    spec, quant = req.spec, req.mode.name
    source = resolve(spec)
    directory = source.directory
    if source.gguf is not None:
        file = GgufFile(source.gguf)  # ModelError naming the file when it is truncated or corrupt
        config = file.config
        read_weights: Callable[[], Mapping[str, torch.Tensor]] = lambda: GgufFloatWeights(file)
    else:
        try:
            config = ModelConfig.from_hf(json.loads((directory / "config.json").read_text()))
        except (KeyError, ValueError) as e:
            raise ModelError(f"{directory}/config.json: {e}") from e
        read_weights = lambda: _read_weights(directory)
    where = source.gguf or directory
    tok_path = directory / "tokenizer.json"
    if not tok_path.exists():
        raise ModelError(f"{directory}: no tokenizer.json")
    tokenizer = Tokenizer.from_file(tok_path)
    head_rows = None
    if 0 < req.head_vocab < config.vocab_size:
        head_rows = subvocab.load(directory, req.head_vocab, tokenizer)
    if req.backend == "ort":
        # imported here: onnx and onnxruntime load only for models that run on ONNX Runtime
        from specd.models.ort_runtime import load_ort

        model = load_ort(directory, config, read_weights, mode=quant, name=spec, max_len=req.max_len,
                         threads=req.threads, head_rows=head_rows, row_attention=req.row_attention,
                         stamp=f"gguf:{source.sha256}" if source.gguf is not None else None)
        return LoadedModel(spec, directory, config, model, tokenizer)
    weights = read_weights()
    if source.gguf is not None and req.device == "cpu" and not config.tie_word_embeddings:
        # the embedding stays in the file's blocks (its rows looked up, rounded as the bf16 copy's)
        weights = GgufFloatWeights(file, embedding_blocks=True)
    stat = req.mode.calibration
    calibrate = None if stat is None else partial(_calibrate, config, weights, tokenizer, spec, quant, stat)
    factory = linear_factory(directory, quant, spec, req.device, source_sha256=source.sha256, calibrate=calibrate)
    try:
        decoder = Decoder(config, weights, compute_dtype=req.mode.compute_dtype, max_len=req.max_len,
                          device=req.device, linear_factory=factory, head_rows=head_rows,
                          row_attention=req.row_attention, kv_dtype=req.kv_dtype)
    except KeyError as e:
        raise ModelError(f"{where}: {e.args[0]}; the weights do not fit a {config.architecture} model") from e
    if factory is not None:
        factory.save()  # quantized once, loaded from disk next time
    return LoadedModel(spec, directory, config, decoder, tokenizer)


def is_gguf_source(spec: str) -> bool:
    """Whether ``spec`` names a GGUF file: a published model, a ``.gguf`` path, or a GGUF in a
    Hugging Face repository (``specd.models.hub_gguf``; not fetched to answer)."""
    return (spec in PUBLISHED or (spec.endswith(".gguf") and Path(spec).expanduser().is_file())
            or hub_gguf.is_hub_gguf(spec))


def _gguf_source(spec: str) -> tuple[Path, Path]:
    """(the GGUF file, the directory holding its tokenizer.json) of ``spec`` for quant mode gguf:
    a published model's pulled file, or a .gguf path. ModelError for anything else."""
    if spec in PUBLISHED:
        m = PUBLISHED[spec]
        path = gguf_path(m)
        if not path.exists():
            raise ModelError(f"model {spec!r} is not downloaded yet: run `specd models pull {spec}`")
        return path, converted_dir(m)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path, _converted_path(path)
    if hub_gguf.is_hub_gguf(spec):
        path = hub_gguf.local_path(spec)
        return path, _converted_path(path)
    raise ModelError(f"{spec}: quant mode gguf runs a GGUF file's own weight blocks, and {spec!r} is not a "
                     f".gguf file or a published model; use int8 / int4 / bf16 for it")


def _load_gguf(req: LoadRequest) -> LoadedModel:
    """Quant mode gguf (``specd.models.gguf_model``): the decoder over the file's own blocks; the
    tokenizer (and config.json) built once beside the cache, no weights converted."""
    spec = req.spec
    why = kernels.unavailable()
    if why:
        raise ModelError(f"{spec}: quant mode gguf runs on specd's kernels: {why}")
    path, tok_dir = _gguf_source(spec)
    file = GgufFile(path)
    config = file.config
    if not (tok_dir / "tokenizer.json").exists():
        print(f"specd: building the tokenizer of {path} once into {tok_dir}", file=sys.stderr)
        write_tokenizer_dir(path, tok_dir, config)
    tokenizer = Tokenizer.from_file(tok_dir / "tokenizer.json")
    head_rows = subvocab.load(tok_dir, req.head_vocab, tokenizer) if 0 < req.head_vocab < config.vocab_size else None
    factory = GgufLinearFactory(file, head_rows, spec)
    try:
        decoder = Decoder(config, GgufWeights(file), compute_dtype=req.mode.compute_dtype, max_len=req.max_len,
                          linear_factory=factory, head_rows=head_rows, row_attention=req.row_attention,
                          kv_dtype=req.kv_dtype)
    except KeyError as e:
        raise ModelError(f"{path}: {e.args[0]}; the file does not fit a {config.architecture} model") from e
    return LoadedModel(spec, path, config, decoder, tokenizer)


# one entry per quant mode (specd.models.modes.TARGET_QUANTS, less auto), in that order
MODES: dict[str, QuantMode] = {m.name: m for m in (
    # calibration: outlier input channels kept dense, on the fallback runtime (fbgemm; specd's INT8 blocks need none)
    QuantMode("int8", _load_source, ("torch", "ort"), calibration=channel_absmax),
    QuantMode("fp8", _load_source),
    # calibration: the channels' mean squares weigh the scale search of specd's INT4 blocks (int_linear.pack4)
    QuantMode("int4", _load_source, ("torch", "ort"), calibration=channel_meansq),
    QuantMode("bf16", _load_source),
    QuantMode("fp32", _load_source, ("torch", "ort"), compute_dtype=torch.float32),
    QuantMode(GGUF_QUANT, _load_gguf),
)}
