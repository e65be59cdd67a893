"""Medusa draft heads: the data they train on, training, the head file, and drafting from them
with the output still exactly the target's."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from specd.engine.budget import DraftBudget
from specd.engine.head_drafter import HeadDrafter
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding, generate
from specd.heads import corpus, data, train
from specd.models.heads import HeadsInfo, MedusaHeads, load, read_info
from specd.models import kernels
from specd.models.errors import ModelError
from tests.test_sampling import _chi2_pvalue
from tests.tiny import TINY_VOCAB, tiny_decoder, tiny_tokenizer


def _heads(target, k: int = 3, vocab: int | None = None, seed: int = 0, scale: float = 0.3) -> MedusaHeads:
    """Random heads over ``target``'s own output-head rows (``vocab`` of them: a sub-vocabulary)."""
    g = torch.Generator().manual_seed(seed)
    v = target.vocab_size
    ids = torch.arange(v) if vocab is None else torch.randperm(v, generator=g)[:vocab].sort().values
    head = target.lm_head.weight.float()[ids]  # [V', H]
    heads = MedusaHeads(k, head, ids)
    with torch.no_grad():
        heads.weight.copy_(torch.randn(heads.weight.shape, generator=g) * scale)
        heads.bias.copy_(torch.randn(heads.bias.shape, generator=g) * scale)
    return heads


def test_a_zero_head_guesses_what_the_target_head_would() -> None:
    """Zero-initialised blocks leave the hidden state as it is: every head then ranks tokens as
    the target's own output head does (the starting point training moves away from)."""
    target = tiny_decoder(seed=3)
    heads = MedusaHeads(2, target.lm_head.weight.float(), torch.arange(target.vocab_size))
    logits = target.forward(torch.tensor([5, 9, 17, 4]))
    h = target.last_hidden()
    assert h is not None and h.start == 0 and h.states.shape == (4, target.config.hidden_size)
    with torch.no_grad():
        out = heads(h.states)  # [4, 2, V]
    torch.testing.assert_close(out[:, 0], logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out[:, 1], logits, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not kernels.available(), reason="specd's C kernels are not built here")
def test_medusa_drafts_on_the_int8_kernel_rank_as_the_float_heads() -> None:
    """Where specd's INT8 kernel runs the blocks and the shared head rows, a draft call's logits
    are the float heads' own within INT8's rounding, and the drafts (each head's top) agree."""
    torch.manual_seed(0)
    h, v = 64, 96
    heads = MedusaHeads(3, torch.randn(v, h), torch.arange(v))
    with torch.no_grad():
        heads.weight.copy_(torch.randn(heads.weight.shape) * 0.1)
        heads.bias.copy_(torch.randn(heads.bias.shape) * 0.1)
    assert heads._packed()
    agree = 0
    for _ in range(20):
        x = torch.randn(h)
        with torch.no_grad():
            exact = heads(x[None])[0]  # [K, V'] float32
        got = heads.draft_logits(x)
        assert got.shape == (3, v)
        torch.testing.assert_close(got, exact, atol=0.15 * float(exact.abs().max()), rtol=0.0)
        agree += int((got.argmax(-1) == exact.argmax(-1)).sum())
        assert torch.equal(heads.draft_logits(x, 2), got[:2])  # the first k heads alone: the same rows
    assert agree >= 55  # of 60 drafts
    assert heads.nbytes() < 2 * (heads.weight.numel() + heads.head.numel())  # INT8 rows, not bfloat16


def test_hidden_states_follow_the_cache() -> None:
    target = tiny_decoder(seed=1)
    target.forward(torch.tensor([1, 2, 3]), logits=False)
    assert target.last_hidden() is None  # a prefill computes no head input
    target.forward(torch.tensor([4, 5]))
    assert target.last_hidden().start == 3
    target.rollback(4)
    assert target.last_hidden() is not None  # row 0 (position 3) is still cached
    target.rollback(3)
    assert target.last_hidden() is None  # every row it held is gone


@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("vocab", [None, 40])
@pytest.mark.parametrize("width", [1, 4])
@pytest.mark.parametrize("bias", [0.0, 2.0])
def test_greedy_matches_target_with_head_drafts(k: int, vocab: int | None, width: int, bias: float) -> None:
    target = tiny_decoder(seed=0, dtype=torch.bfloat16)
    prompt = [3, 17, 42, 8, 8, 61, 5]
    plain, _ = generate(target, prompt, Decoding(40))
    target.reset()
    drafter = HeadDrafter(target, _heads(target, k=max(k, 3), vocab=vocab), width=width, context_bias=bias)
    spec, stats = generate(target, prompt, Decoding(40), drafter, k=k)
    assert spec == plain
    assert stats.drafted > 0  # the heads did draft
    assert (stats.tree_nodes > 0) == (width > 1)  # siblings only with a width
    assert drafter.rounds_without_state == 1  # only the first round has no hidden state


def _greedy_run(seed: int = 2) -> tuple:
    """A tiny target's greedy continuation of a prompt, and its hidden states over the whole
    sequence: (target, prompt, plain, seq, states ``[n, H]``), for heads that look up where
    they are by the state they are handed."""
    target = tiny_decoder(seed=seed, dtype=torch.bfloat16)
    prompt = [7, 7, 7, 7]
    plain, _ = generate(target, prompt, Decoding(30))
    seq = prompt + plain
    target.reset()
    target.forward(torch.tensor(seq[:-1]))
    hs = target.last_hidden().states  # [n, H]
    target.reset()
    return target, prompt, plain, seq, hs


def test_heads_that_know_the_target_are_accepted() -> None:
    """Heads built to repeat the target's own greedy continuation get their drafts accepted:
    the drafter reads the right hidden state (a drafter off by one position would be rejected)."""
    torch.manual_seed(0)
    target, prompt, plain, seq, hs = _greedy_run()
    # a head that maps each (distinct) hidden state to the token 1 + j after its next token
    k = 2
    v = target.vocab_size

    class Oracle(MedusaHeads):
        def draft_logits(self, hidden, k=None):
            pos = int(((hs - hidden.float()).abs().sum(-1)).argmin())
            out = torch.full((self.k, v), -1e9)
            for j in range(1, self.k + 1):
                if pos + 1 + j < len(seq):
                    out[j - 1, seq[pos + 1 + j]] = 0.0
            return out[: self.k if k is None else min(k, self.k)]

    oracle = Oracle(k, target.lm_head.weight.float(), torch.arange(v))
    out, stats = generate(target, prompt, Decoding(30), HeadDrafter(target, oracle), k=k)
    assert out == plain
    assert stats.accepted >= stats.drafted - 2 and stats.rounds <= 12


def test_a_sibling_right_where_the_first_draft_is_wrong_is_accepted() -> None:
    """Medusa as a token tree: heads whose first choice is always wrong and whose second choice is
    the target's own next token get that sibling accepted round after round. Each such round
    leaves the chain, so this also checks the next round reads the state of the sibling the
    target kept (a drafter reading the rejected chain's row would guess from the wrong place)."""
    target, prompt, plain, seq, hs = _greedy_run()
    v = target.vocab_size

    class SecondBest(MedusaHeads):
        def draft_logits(self, hidden, k=None):
            pos = int(((hs - hidden.float()).abs().sum(-1)).argmin())
            out = torch.full((self.k, v), -1e9)
            if pos + 2 < len(seq):
                right = seq[pos + 2]
                out[0, (right + 1) % v] = 1.0  # the first choice: wrong
                out[0, right] = 0.0  # the next choice: right
            return out[: self.k if k is None else min(k, self.k)]

    heads = SecondBest(1, target.lm_head.weight.float(), torch.arange(v))
    out, stats = generate(target, prompt, Decoding(30), HeadDrafter(target, heads, width=2), k=1)
    assert out == plain
    assert stats.branch_hits >= 12 and stats.accepted >= 12  # rounds after the first each gain the sibling


def test_medusa_picks_lean_to_the_context() -> None:
    """With a context bias the heads' pick (and head 1's next choices) lean to tokens the
    sequence already holds, and the pick's confidence stays the heads' own probability."""
    target = tiny_decoder(seed=3, dtype=torch.bfloat16)
    v = target.vocab_size
    seq = [5, 9, 12, 20, 7]
    outside, inside = 40, 9  # the heads prefer a token the context lacks to one it holds

    class Fixed(MedusaHeads):
        def draft_logits(self, hidden, k=None):
            out = torch.full((self.k, v), -5.0)
            out[:, outside], out[:, inside] = 1.0, 0.0
            return out[: self.k if k is None else min(k, self.k)]

    heads = Fixed(2, target.lm_head.weight.float(), torch.arange(v))
    own = torch.softmax(heads.draft_logits(torch.zeros(1))[0], -1)
    for bias, first, second in ((0.0, outside, inside), (2.0, inside, outside)):
        target.reset()
        target.forward(torch.tensor(seq[:-1]))  # the state the first draft reads
        drafter = HeadDrafter(target, heads, width=2, context_bias=bias)
        p = drafter.propose(seq, DraftBudget(k=2), SamplingParams(), None)
        assert p.tokens.tolist()[:1] == [first] and p.tokens.tolist()[-1] == second  # chain, then the sibling
        assert p.tokens.tolist()[1] == first  # head 2 leans the same way
    assert float(own[inside]) < float(own[outside])  # (the confidences below are the heads' own)
    seen: list[list[float]] = []
    target.reset()
    target.forward(torch.tensor(seq[:-1]))
    HeadDrafter(target, heads, context_bias=2.0).propose(
        seq, DraftBudget(k=2, gate=lambda c: seen.append(list(c)) or True), SamplingParams(), None)
    assert seen and seen[0] == pytest.approx([float(own[inside])])


@pytest.mark.slow
@pytest.mark.parametrize("bias", [0.0, 2.0])
def test_head_drafts_sample_from_the_target(bias: float) -> None:
    """Sampling: the joint distribution of the first two tokens with head drafts is the target's
    exact one (chi-square), with heads confident enough that drafts are often rejected; with the
    drafts leaning to the context's tokens too."""
    target = tiny_decoder(seed=4, vocab=10, hidden=16)
    heads = _heads(target, k=2, seed=5, scale=1.0)
    prompt, v, samples = [1, 2, 3], 10, 20_000
    with torch.no_grad():  # the exact joint p(t1) p(t2 | t1), from the target itself
        target.reset()
        p1 = torch.softmax(target.forward(torch.tensor(prompt)).double()[-1], -1)
        exact = torch.zeros(v, v, dtype=torch.float64)
        for t1 in range(v):
            target.reset()
            exact[t1] = p1[t1] * torch.softmax(target.forward(torch.tensor(prompt + [t1])).double()[-1], -1)
    params = SamplingParams(temperature=1.0)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(v, v, dtype=torch.float64)
    drafted = 0
    for _ in range(samples):
        target.reset()
        out, stats = generate(target, prompt, Decoding(3, params, generator=g),
                              HeadDrafter(target, heads, context_bias=bias), k=2)
        counts[out[0], out[1]] += 1
        drafted += stats.drafted
    assert drafted > samples // 2
    assert _chi2_pvalue(counts.flatten(), exact.flatten() * samples) > 1e-4


def test_data_training_and_the_head_file(tmp_path: Path) -> None:
    """Windows scored by a tiny target, heads trained on them (the loss falls), saved, read back."""
    target = tiny_decoder(seed=6)
    g = torch.Generator().manual_seed(0)
    shard = data._Shard()
    for w in range(12):
        # a repetitive "corpus" the heads can learn: a cycle with a random start
        start = int(torch.randint(0, 7, (1,), generator=g))
        tokens = [(start + i) % 7 + 10 for i in range(48)]
        argmax, hidden = data.score(target, tokens)
        assert argmax.shape == (48,) and hidden.shape == (48, target.config.hidden_size)
        item = data.Item("python", type("F", (), {"name": f"f{w}", "validation": w % 4 == 0})(), tokens)
        shard.add(item, tokens, argmax, hidden)
    shard.save(tmp_path / "shard-00000.pt")
    tr, val = train.load(tmp_path, k=2)
    assert val.hidden.shape[0] == 3 * 48 and tr.hidden.shape[0] == 9 * 48
    ids, covered = train.sub_vocabulary(tr, target.vocab_size)
    assert covered == 1.0
    heads = MedusaHeads(2, target.lm_head.weight.float()[ids], ids)
    before = train.evaluate(heads, val)
    log = train.train(heads, tr, val, train.TrainSettings(heads=2, steps=60, batch=64, lr=3e-3, eval_every=60),
                      report=lambda s: None)
    after = log[-1]["held_out"]
    assert after["all"]["head_top1"][0] > before["all"]["head_top1"][0]
    ce_only = MedusaHeads(2, target.lm_head.weight.float()[ids], ids)  # Medusa-1's own loss, alone
    settings = train.TrainSettings(heads=2, steps=60, batch=64, lr=3e-3, eval_every=60, feature_weight=0.0, ce_weight=1.0)
    log = train.train(ce_only, tr, val, settings, report=lambda s: None)
    assert log[-1]["held_out"]["all"]["head_top1"][0] > before["all"]["head_top1"][0]
    with pytest.raises(ValueError, match="no loss"):
        train.train(ce_only, tr, val, train.TrainSettings(feature_weight=0.0, ce_weight=0.0), report=lambda s: None)
    path = tmp_path / "heads.safetensors"
    heads.save(path, HeadsInfo("tiny", "", 2, target.config.hidden_size, int(ids.numel())))
    assert read_info(path)[1].heads == 2
    back = load(path, lambda rows: target.lm_head.weight.float()[rows])
    h = val.hidden[:5].float()
    with torch.no_grad():
        torch.testing.assert_close(back(h), heads(h), rtol=2e-2, atol=2e-2)  # stored in bfloat16


def test_fim_data_is_the_daemons_prompt_then_the_targets_own_continuation() -> None:
    target = tiny_decoder(seed=6, vocab=TINY_VOCAB, max_len=600)
    tok = tiny_tokenizer()
    settings = data.DataSettings("tiny", layout="fim", generate=12)
    window = tok.encode("def f(x):\n    return x + 1\n" * 12)
    prompt = data.fim_prompt(tok, window, settings)
    p, s, m = (tok.token_id(t) for t in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"))
    assert prompt[0] == p and prompt[-1] == m and prompt.count(s) == 1
    assert prompt == data.fim_prompt(tok, window, settings)  # seeded
    seq, argmax, hidden = data.score_fim(target, prompt, settings.generate, stops=set())
    assert seq[: len(prompt)] == prompt and len(seq) == len(prompt) + 12
    assert argmax.shape == (len(seq),) and hidden.shape == (len(seq), target.config.hidden_size)
    n = len(prompt)
    assert argmax[n - 1 : -1].tolist() == seq[n:]  # greedy along the continuation
    whole_argmax, whole_hidden = data.score(target, seq)  # one forward over it: the same states
    assert whole_argmax.tolist() == argmax.tolist()
    torch.testing.assert_close(whole_hidden.float(), hidden.float(), rtol=1e-2, atol=1e-2)
    first = int(argmax[n - 1])
    seq, argmax, _ = data.score_fim(target, prompt, settings.generate, stops={first})
    assert seq == prompt and int(argmax[-1]) == first  # stops before a stop token


def test_fim_data_run_stores_and_resumes(tmp_path: Path) -> None:
    target = tiny_decoder(seed=6, vocab=TINY_VOCAB, max_len=600)
    tok = tiny_tokenizer()
    settings = data.DataSettings("tiny", layout="fim", windows_per_file=1, generate=4, shard_tokens=256)
    first = data.make(target, tok, tmp_path, settings, max_tokens=500, report=lambda line: None)
    assert first["tokens"] >= 500 and first["settings"]["layout"] == "fim"
    more = data.make(target, tok, tmp_path, settings, max_tokens=1200, report=lambda line: None)
    assert more["windows"] > first["windows"] and more["tokens"] >= 1200
    fim = tok.token_id("<|fim_middle|>")
    for path in data.shards(tmp_path):
        shard = torch.load(path)
        assert int((shard["tokens"] == fim).sum()) == shard["starts"].numel() - 1  # one FIM prompt a window
    with pytest.raises(ValueError, match="other settings"):
        data.make(target, tok, tmp_path, data.DataSettings("tiny"), max_tokens=2000, report=lambda line: None)


def test_a_manifest_from_before_the_fim_layout_is_still_plain(tmp_path: Path) -> None:
    old = {"model": "tiny", "window": 512, "windows_per_file": 4, "min_window": 64, "seed": 0, "shard_tokens": 16384}
    assert data.stored_settings({"settings": old}) == json.loads(json.dumps(asdict(data.DataSettings("tiny"))))


def test_a_manifest_from_before_corpus_sources_resumes_on_the_classic_corpus(tmp_path: Path) -> None:
    old = {"model": "tiny", "window": 512, "windows_per_file": 4, "min_window": 64, "seed": 0, "shard_tokens": 16384,
           "layout": "plain"}
    assert data.stored_settings({"settings": old})["sources"] == list(corpus.CLASSIC)


def test_a_file_that_is_not_heads_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    path = tmp_path / "x.safetensors"
    save_file({"a": torch.zeros(2)}, str(path))
    with pytest.raises(ModelError, match="not a specd draft heads file"):
        read_info(path)


def test_a_recurrent_head_trains_drafts_and_round_trips(tmp_path: Path) -> None:
    """The recurrent head: trained on a tiny target's windows its held-out first draft improves; as
    a drafter the output stays the target's greedy output; its file reads back."""
    from specd.models.heads import RecurrentHead

    target = tiny_decoder(seed=6, dtype=torch.bfloat16)
    embed = lambda ids: target.embed[ids].float()  # noqa: E731
    shard = data._Shard()
    g = torch.Generator().manual_seed(1)
    for w in range(12):
        start = int(torch.randint(0, 7, (1,), generator=g))
        tokens = [(start + i) % 7 + 10 for i in range(48)]
        argmax, hidden = data.score(target, tokens)
        shard.add(data.Item("python", type("F", (), {"name": f"f{w}", "validation": w % 4 == 0})(), tokens),
                  tokens, argmax, hidden)
    shard.save(tmp_path / "shard-00000.pt")
    tr, val = train.load(tmp_path, k=3)
    ids, _ = train.sub_vocabulary(tr, target.vocab_size)
    head = RecurrentHead(target.config.hidden_size, 64, target.lm_head.weight.float()[ids], ids, embed)
    table = train.Embeddings(embed, tr, val)
    before = train.evaluate_recurrent(head, val, table, 3)
    log = train.train_recurrent(head, tr, val, table,
                                train.RecurrentSettings(width=64, steps=80, batch=64, lr=3e-3, eval_every=80, chain=3),
                                report=lambda s: None)
    assert log[-1]["held_out"]["all"]["head_top1"][0] > before["all"]["head_top1"][0]
    target.reset()
    prompt = [12, 13, 14, 15]
    plain, _ = generate(target, prompt, Decoding(30))
    target.reset()
    drafter = HeadDrafter(target, head)
    spec, stats = generate(target, prompt, Decoding(30), drafter, k=3)
    assert spec == plain and stats.drafted > 0
    path = tmp_path / "recurrent.safetensors"
    head.save(path, HeadsInfo("tiny", "", 64, target.config.hidden_size, int(ids.numel())))
    back = load(path, lambda rows: target.lm_head.weight.float()[rows], embed)
    state = val.hidden[3].float()
    assert back.draft(state, 12, 3)[0] == head.draft(state, 12, 3)[0]


def test_an_engine_drafts_with_heads() -> None:
    """``--drafter heads`` through the engine: greedy speculative text == target-only text."""
    from specd.engine.config import EngineConfig
    from specd.engine.engine import CompletionRequest, Engine
    from specd.engine.policy import CostModel
    from tests.tiny import tiny_tokenizer

    target = tiny_decoder(seed=0, dtype=torch.bfloat16, vocab=265)
    config = EngineConfig(draft=None, drafter="heads", k="auto", prefix_cache_mb=0)
    engine = Engine(target, tiny_tokenizer(), config=config, heads=_heads(target, k=4),
                    costs=CostModel(0.5, tuple(10.0 + i for i in range(9))))
    prefix, suffix = "def add(a, b):\n    return a", "\n"
    spec = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24))
    plain = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="target"))
    assert spec.tokens == plain.tokens
    assert spec.stats.drafted > 0


def test_missing_heads_are_a_clear_error(tmp_path: Path) -> None:
    from specd.app import heads_file
    from specd.engine.config import EngineConfig

    with pytest.raises(ModelError, match="no such file"):
        heads_file(EngineConfig(drafter="heads", heads=str(tmp_path / "none.safetensors")))
    with pytest.raises(ModelError, match="no eagle draft heads are shipped for .*specd heads train"):
        heads_file(EngineConfig(target=str(tmp_path / "x.gguf"), drafter="heads"))
    with pytest.raises(ModelError, match="no medusa draft heads are shipped for "):
        heads_file(EngineConfig(target=str(tmp_path / "x.gguf"), drafter="heads", heads="medusa"))
