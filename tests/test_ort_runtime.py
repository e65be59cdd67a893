"""The ONNX Runtime runtime (``specd.models.ort_runtime``) on tiny random models: it computes what
the torch ``Decoder`` computes with the same (dequantized) weights, its cache rolls back, token
trees work, the 8-bit target is batch-invariant, and greedy speculative output with an ORT target
equals greedy target-only output."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnx", reason="the ort backend needs the onnx package: pip install 'specd[ort]'")
pytest.importorskip("onnxruntime", reason="the ort backend needs onnxruntime")

from specd.app import build_engine  # noqa: E402
from specd.engine.engine import CompletionRequest, Engine, EngineConfig  # noqa: E402
from specd.models.decoder import Decoder  # noqa: E402
from specd.models.errors import ModelError  # noqa: E402
from specd.models.onnx_graph import BITS, build_model, dequantize, pack_nbits  # noqa: E402
from specd.models.ort_runtime import OrtDecoder  # noqa: E402
from tests.tiny import TINY_VOCAB, save_tiny_model, tiny_config, tiny_decoder, tiny_tokenizer, tiny_weights  # noqa: E402

CONFIG = tiny_config(vocab=80, hidden=64, layers=2)


def ort_model(mode: str, accuracy_level: int = 4, seed: int = 0, max_len: int = 128, config=CONFIG,
              weights=None, head_rows=None) -> OrtDecoder:
    weights = weights if weights is not None else tiny_weights(config, seed)
    proto = build_model(config, weights, mode, head_rows=head_rows, accuracy_level=accuracy_level)
    return OrtDecoder(config, proto.SerializeToString(), max_len=max_len, threads=2, head_rows=head_rows,
                      mode=mode)


def dequantized_reference(mode: str, seed: int = 0, max_len: int = 128) -> Decoder:
    """A float32 torch Decoder with exactly the weights the ORT graph multiplies by."""
    weights = dict(tiny_weights(CONFIG, seed))
    if mode != "fp32":
        for name, w in list(weights.items()):
            if w.dim() == 2 and name != "model.embed_tokens.weight":
                weights[name] = dequantize(pack_nbits(w, BITS[mode]))
    return Decoder(CONFIG, weights, compute_dtype=torch.float32, max_len=max_len)


def tokens(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


def test_packing_roundtrip() -> None:
    w = torch.randn(48, 96)
    for bits, tol in ((8, 0.02), (4, 0.3)):
        err = (dequantize(pack_nbits(w, bits)) - w).abs().max().item()
        assert err < tol, (bits, err)
    odd = torch.randn(5, 40)  # K not a multiple of the block: zero padded
    assert dequantize(pack_nbits(odd, 8)).shape == (5, 40)


@pytest.mark.parametrize("mode", ["fp32", "int8", "int4"])
def test_matches_torch_with_the_same_weights(mode: str) -> None:
    """Float activations (accuracy level 0): the graph is the torch Decoder up to rounding."""
    ort_lm, ref = ort_model(mode, accuracy_level=0), dequantized_reference(mode)
    ids = tokens(20)
    for chunk in (ids[:9], ids[9:10], ids[10:]):  # prefill, one step, a verification-sized forward
        a, b = ort_lm.forward(chunk), ref.forward(chunk)
        assert a.shape == (len(chunk), CONFIG.vocab_size) and a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
    assert ort_lm.cache_len == ref.cache_len == 20


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_int8_activations_stay_close(mode: str) -> None:
    """Accuracy level 4 (int8 activations per block, the fast path): close, same argmax mostly."""
    ort_lm, ref = ort_model(mode), dequantized_reference(mode)
    ids = tokens(24)
    a, b = ort_lm.forward(ids), ref.forward(ids)
    assert (a - b).abs().mean().item() < 0.05 * b.abs().mean().item()  # random weights: a loose bound
    assert (a.argmax(-1) == b.argmax(-1)).float().mean().item() >= 0.8


def test_rollback_and_reforward() -> None:
    lm = ort_model("int8")
    ids = tokens(16)
    first = lm.forward(ids)
    lm.rollback(10)
    assert lm.cache_len == 10 and lm.common_prefix(ids) == 10
    again = lm.forward(ids[10:])
    assert torch.equal(again, first[10:])
    lm.rollback(0)
    assert torch.equal(lm.forward(ids), first)
    with pytest.raises(ValueError):
        lm.rollback(17)


def test_common_prefix() -> None:
    lm = ort_model("int8")
    ids = tokens(8)
    lm.forward(ids)
    other = ids.clone()
    other[5] = (other[5] + 1) % CONFIG.vocab_size
    assert lm.common_prefix(other) == 5 and lm.common_prefix(ids[:3]) == 3


@pytest.mark.parametrize("context", [10, 250, 254])  # 250/254: the rows straddle 256 keys
def test_tree_mask_equals_separate_branches(context: int) -> None:
    """Root r with children a and b, b with child c: one forward with a tree mask gives each
    branch, bit for bit (int8 target), what a causal forward over that branch alone gives."""
    lm = ort_model("int8", max_len=300)
    ctx, (r, a, b, c) = tokens(context), tokens(4, seed=7).tolist()
    P = context
    lm.forward(ctx)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)
    tree = lm.forward(torch.tensor([r, a, b, c]), positions=torch.tensor([P, P + 1, P + 1, P + 2]),
                      attn_mask=mask)
    lm.rollback(P)
    first = lm.forward(torch.tensor([r, a]))
    assert torch.equal(tree[:2], first)
    lm.rollback(P)
    second = lm.forward(torch.tensor([r, b, c]))
    assert torch.equal(tree[2:], second[1:])


def test_keep_compacts_the_accepted_branch() -> None:
    lm = ort_model("int8")
    ctx, (r, a, b), nxt = tokens(10), tokens(3, seed=7).tolist(), int(tokens(1, seed=9))
    lm.forward(ctx)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    lm.forward(torch.tensor([r, a, b]), positions=torch.tensor([10, 11, 11]), attn_mask=mask)
    lm.keep(10, torch.tensor([0, 2]))  # accepted path r, b
    assert lm.cache_len == 12
    kept = lm.forward(torch.tensor([nxt]))
    lm.rollback(10)
    straight = lm.forward(torch.tensor([r, b, nxt]))
    assert torch.equal(kept[0], straight[2])


def test_int8_is_batch_invariant() -> None:
    """A position's logits are bit-identical fed alone, with 4 other tokens, or cold in a prefill:
    what keeps greedy speculative text equal to greedy target-only text."""
    lm = ort_model("int8", max_len=256)
    ctx, new = tokens(150), tokens(5, seed=3)
    lm.forward(ctx)
    together = lm.forward(new)
    for i in range(5):
        lm.rollback(150 + i)
        alone = lm.forward(new[i : i + 1])
        assert torch.equal(alone[0], together[i]), i
    lm.rollback(0)
    cold = lm.forward(torch.cat([ctx, new]))
    assert torch.equal(cold[150:], together)


def test_int4_target_is_batch_invariant() -> None:
    """The 4-bit kernel takes another path for a single row: one-token forwards are padded to two
    rows, which makes an int4 target batch-invariant too; a draft (``row_attention`` off) is not
    padded."""
    lm = ort_model("int4", max_len=200)
    ctx, new = tokens(150), tokens(5, seed=3)
    lm.forward(ctx)
    together = lm.forward(new)
    for i in range(5):
        lm.rollback(150 + i)
        assert torch.equal(lm.forward(new[i : i + 1])[0], together[i]), i
    lm.rollback(0)
    assert torch.equal(lm.forward(torch.cat([ctx, new]))[150:], together)
    lm.row_attention = False  # as the engine does for a draft
    lm.rollback(150)
    alone = lm.forward(new[:1])
    assert lm.cache_len == 151
    torch.testing.assert_close(alone[0], together[0], atol=0.05, rtol=0.01)
    full = ort_model("int4", max_len=4)
    full.forward(tokens(3))
    full.forward(tokens(1))  # the last slot: the pad row uses the spare one
    assert full.cache_len == 4


def test_sub_vocabulary_head() -> None:
    rows = list(range(0, CONFIG.vocab_size, 3))
    full, sub = ort_model("int8"), ort_model("int8", head_rows=rows)
    ids = tokens(6)
    a, b = full.forward(ids), sub.forward(ids)
    assert torch.isinf(b[:, 1]).all() and b.shape == a.shape
    torch.testing.assert_close(b[:, rows], a[:, rows])


def test_memory_reporting() -> None:
    lm = ort_model("int4")
    kinds = lm.weight_bytes()
    assert set(kinds) == {"embedding", "head", "linear", "norms_biases"} and kinds["linear"] > 0
    assert lm.cache.nbytes() == CONFIG.num_layers * 129 * CONFIG.num_kv_heads * (2 * CONFIG.head_dim + 1) * 4


def test_context_full() -> None:
    lm = ort_model("int8", max_len=8)
    lm.forward(tokens(6))
    with pytest.raises(ValueError, match="context full"):
        lm.forward(tokens(3))


def _ort_engine(target_mode: str, draft: str, k: int) -> Engine:
    config = tiny_config(vocab=TINY_VOCAB, hidden=64)
    weights = tiny_weights(config, 0)
    weights["lm_head.weight"][256:TINY_VOCAB] *= 0.01  # rarely emit stop tokens: longer texts
    target = ort_model(target_mode, config=config, weights=weights, max_len=512)
    if draft == "ort":
        dw = tiny_weights(config, 1)
        dw["lm_head.weight"][256:TINY_VOCAB] *= 0.01
        draft_lm = ort_model("int4", config=config, weights=dw, max_len=512)
        draft_lm.row_attention = False  # as specd.app.build_engine does for drafts
    else:
        draft_lm = tiny_decoder(seed=1, dtype=torch.float32, vocab=TINY_VOCAB, hidden=64, max_len=512)
    tok = tiny_tokenizer()
    return Engine(target, tok, draft_lm, tok, EngineConfig(k=k, max_len=512))


@pytest.mark.parametrize("target, draft, k, n", [("int8", "ort", 4, 40), ("int8", "ort", 8, 40),
                                                 ("int4", "ort", 4, 40), ("int8", "torch", 3, 12)])
def test_greedy_speculative_equals_target_only(target: str, draft: str, k: int, n: int) -> None:
    """ORT int8 (or padded int4) target with an ORT int4 draft, or with a torch draft (mixed)."""
    engine = _ort_engine(target, draft, k)
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    spec = engine.complete(CompletionRequest(prefix, suffix, max_tokens=n))
    alone = engine.complete(CompletionRequest(prefix, suffix, max_tokens=n, mode="target"))
    assert spec.tokens == alone.tokens and len(spec.tokens) >= min(n, 10)
    assert spec.stats.drafted > 0
    again = engine.complete(CompletionRequest(prefix, suffix, max_tokens=n))  # warm: KV reused
    assert again.tokens == spec.tokens


# -- loading from a model directory ----------------------------------------------------------------

def test_engine_loads_the_ort_backend(tmp_path) -> None:
    t, d = save_tiny_model(tmp_path / "t", seed=0), save_tiny_model(tmp_path / "d", seed=1)
    config = EngineConfig(target=str(t), draft=str(d), target_quant="int8", draft_quant="int4",
                          target_backend="ort", draft_backend="ort", max_len=256, threads=2)
    engine = build_engine(config)
    assert isinstance(engine.target, OrtDecoder) and isinstance(engine.draft, OrtDecoder)
    spec = engine.complete(CompletionRequest("def f(x):\n", max_tokens=12))
    target = engine.complete(CompletionRequest("def f(x):\n", max_tokens=12, mode="target"))
    assert spec.tokens == target.tokens and len(spec.tokens) == 12
    assert (t / "ort-int8.onnx").exists() and (t / "ort-int8.onnx.data").exists()
    assert (d / "ort-int4.onnx").exists()
    memory = engine.memory()
    assert memory["target_weight_bytes"] > 0 and memory["target_kv_cache_bytes"] > 0


def test_stored_graph_is_reused_and_rebuilt_when_stale(tmp_path, monkeypatch) -> None:
    from specd.models import onnx_graph
    from specd.models.loader import load_model

    d = save_tiny_model(tmp_path / "m")
    ids = torch.tensor([1, 2, 3, 4])
    first = load_model(str(d), quant="int8", backend="ort", max_len=32).model.forward(ids)
    stored = d / "ort-int8.onnx"
    stamp = stored.stat().st_mtime_ns
    again = load_model(str(d), quant="int8", backend="ort", max_len=32).model.forward(ids)
    assert stored.stat().st_mtime_ns == stamp and torch.equal(first, again)
    monkeypatch.setattr(onnx_graph, "GRAPH_VERSION", onnx_graph.GRAPH_VERSION + 1)
    monkeypatch.setattr("specd.models.ort_runtime.GRAPH_VERSION", onnx_graph.GRAPH_VERSION)
    rebuilt = load_model(str(d), quant="int8", backend="ort", max_len=32).model.forward(ids)
    assert stored.stat().st_mtime_ns != stamp and torch.equal(first, rebuilt)


def test_corrupt_graph_names_model_and_mode(tmp_path) -> None:
    from specd.models.loader import load_model

    d = save_tiny_model(tmp_path / "m")
    load_model(str(d), quant="int4", backend="ort", max_len=32)
    (d / "ort-int4.onnx").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(ModelError, match=r"int4.*delete it to rebuild") as e:
        load_model(str(d), quant="int4", backend="ort", max_len=32)
    assert str(d) in str(e.value)
    load_model(str(d), quant="int8", backend="ort", max_len=32)
    data = d / "ort-int8.onnx.data"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # truncated weights
    with pytest.raises(ModelError, match=r"int8"):
        load_model(str(d), quant="int8", backend="ort", max_len=32)


def test_unsupported_mode_and_backend(tmp_path) -> None:
    from specd.models.loader import load_model

    d = save_tiny_model(tmp_path / "m")
    with pytest.raises(ModelError, match="ort backend runs"):
        load_model(str(d), quant="bf16", backend="ort")
    with pytest.raises(ModelError, match="unknown backend"):
        load_model(str(d), quant="int8", backend="tvm")


def test_backend_flags_reach_the_engine_config() -> None:
    from specd.cli import build_parser
    from specd.cli.flags import ENGINE_FLAG_NAMES, engine_config

    assert {"target_backend", "draft_backend"} <= set(ENGINE_FLAG_NAMES)
    for command in (["serve"], ["complete", "--prefix", "x"]):
        args = build_parser().parse_args([*command, "--target-backend", "ort", "--draft-backend", "ort",
                                          "--config", "/dev/null"])
        config = engine_config(args)
        assert (config.target_backend, config.draft_backend) == ("ort", "ort")


def test_greedy_token_trees_match_target_only() -> None:
    """Token trees (``specd.engine.tree``) with an ORT int8 target and an ORT int4 draft: the same
    greedy tokens as the target alone, and the caches hold exactly the accepted sequence."""
    import inspect

    from specd.engine.drafters import ModelDrafter
    from specd.engine.speculative import Decoding, generate

    if "branch" not in inspect.signature(ModelDrafter).parameters:
        pytest.skip("this checkout's drafter has no token trees")
    config = tiny_config(vocab=80, hidden=64)
    target = ort_model("int8", config=config, weights=tiny_weights(config, 21), max_len=512)
    draft = ort_model("int4", config=config, weights=tiny_weights(config, 22), max_len=512)
    prompt = torch.randint(0, config.vocab_size, (300,), generator=torch.Generator().manual_seed(3)).tolist()
    plain, _ = generate(target, prompt, Decoding(40), k=0)
    spec, stats = generate(target, prompt, Decoding(40), ModelDrafter(draft, branch=3, branch_below=1.0), k=4)
    assert spec == plain
    assert stats.tree_nodes > stats.drafted
    seq = prompt + spec
    assert target.cache.tokens[: target.cache_len].tolist() == seq[: target.cache_len]
    assert draft.cache.tokens[: draft.cache_len].tolist() == seq[: draft.cache_len]


def test_target_mode_ignores_the_draft_backend_when_matching_a_daemon() -> None:
    from specd.cli.complete import comparable

    mine = {"target": "t", "target_backend": "ort", "draft": "d", "draft_backend": "ort"}
    theirs = {**mine, "draft_backend": "torch"}
    assert comparable(mine, "target", False) == comparable(theirs, "target", False)
    assert comparable(mine, "spec", False) != comparable(theirs, "spec", False)


def test_read_only_model_directory_stores_the_graph_in_the_cache(tmp_path, monkeypatch) -> None:
    import os

    from specd.models.loader import load_model

    d = save_tiny_model(tmp_path / "m")
    monkeypatch.setenv("SPECD_CACHE_DIR", str(tmp_path / "cache"))
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(d) else real_access(p, mode))
    load_model(str(d), quant="int8", backend="ort", max_len=32).model.forward(torch.tensor([1, 2]))
    assert not (d / "ort-int8.onnx").exists()
    assert list((tmp_path / "cache" / "ort").glob("*/ort-int8.onnx"))
