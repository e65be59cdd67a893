"""Token healing (specd.engine.healing): the last token before the cursor is taken out of the
prompt and generated again under a constraint; exactness holds with it on."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specd.engine.config import HEALING, EngineConfig
from specd.engine.engine import CompletionRequest, Engine
from specd.engine.healing import Healer, _byte_decoder, vocab_index
from specd.engine.prompt import PromptBuilder
from specd.engine.sampling import SamplingParams
from specd.engine.speculative import Decoding
from tests.tiny import SPECIALS, tiny_decoder

# tokens beyond the 256 bytes, each built by merges from two tokens listed before it
WORDS = [("\t", "\t"), ("\t\t", "\t\t"), ("\t\t\t\t", "\t"), ("\t\t\t\t", "r"), ("\t\t\t\tr", "e"),
         ("\t\t\t\tre", "t"), ("\t\t\t\tret", "u"), ("\t\t\t\tretu", "r"), ("\t\t\t\tretur", "n"),
         (" ", " "), ("  ", "  "), ("r", "e"), ("re", "t"), ("ret", "u"), ("retu", "r"), ("retur", "n"),
         (" ", "x"), (" x", "s"), (".", "b"), (".b", "a"), (".ba", "r"), ("\n", "\n")]


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte -> character."""
    return {b: ch for ch, b in _byte_decoder().items()}


def merged_tokenizer():
    """A byte-level BPE with a few merges: tab runs, ``\\t\\t\\t\\treturn``, ``return``, space runs,
    `` xs``, ``.bar``; then Qwen's special tokens."""
    from tokenizers import Tokenizer as HFTokenizer, decoders, models as tmodels, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    from specd.models.tokenizer import Tokenizer

    chars = _byte_chars()
    assert set(chars.values()) == set(ByteLevel.alphabet())

    def bl(text: str) -> str:
        return "".join(chars[b] for b in text.encode())

    vocab = {ch: i for i, ch in enumerate(sorted(ByteLevel.alphabet()))}
    merges = []
    for a, b in WORDS:
        merges.append((bl(a), bl(b)))
        vocab.setdefault(bl(a + b), len(vocab))
    tok = HFTokenizer(tmodels.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    return Tokenizer(tok)


TOK = merged_tokenizer()
VOCAB = TOK.vocab_size
PREFIX = "func f(x int) bool {\n\tif x > 0 {\n\t\tfor {\n\t\t\tif x {\n\t\t\t\t"
SUFFIX = "\n\t\t\t}\n\t\t}\n\t}\n}\n"
PROMPTS = [(PREFIX, SUFFIX), ("x = ", "\n"), ("def f(a):\n  ", "\n"), ("a.ba", "\n")]


class Biased:
    """A model whose logits get ``bias`` added (a token it prefers whatever the context)."""

    def __init__(self, model, bias: torch.Tensor) -> None:
        self._model = model
        self._bias = bias

    def forward(self, tokens, positions=None, attn_mask=None, *, logits=True):
        out = self._model.forward(tokens, positions, attn_mask, logits=logits)
        return out + self._bias if logits and out.shape[-1] == self._bias.shape[-1] else out

    def __getattr__(self, name):
        return getattr(self._model, name)


def _models(target_seed: int = 0, draft_seed: int = 1):
    models = []
    for seed in (target_seed, draft_seed):
        m = tiny_decoder(seed=seed, dtype=torch.bfloat16, vocab=VOCAB, hidden=64, max_len=512)
        m.lm_head.weight[VOCAB - len(SPECIALS):] *= 0.01  # rarely a stop token: longer texts
        models.append(m)
    return models


def _engine(healing: str = "whitespace", k: int = 4, target=None, draft=None, **kw) -> Engine:
    if target is None:
        target, draft = _models()
    kw.setdefault("max_len", 512)
    return Engine(target, TOK, draft, TOK if draft is not None else None,
                  EngineConfig(k=k, token_healing=healing, **kw))


def _id(text: str) -> int:
    ids = TOK.encode(text)
    assert len(ids) == 1, (text, [TOK.decode([i]) for i in ids])
    return ids[0]


def test_the_tokenizer_ends_the_indentation_on_a_whitespace_token() -> None:
    assert [TOK.decode([i]) for i in TOK.encode(PREFIX[-6:])] == ["{", "\n", "\t\t\t\t"]
    assert TOK.encode("\t\t\t\treturn") == [_id("\t\t\t\treturn")]  # in a file: one token
    assert [TOK.decode([i]) for i in TOK.encode("x = ")] == ["x", " ", "=", " "]


@pytest.mark.parametrize("prefix, whitespace, prefix_rule", [
    (PREFIX, "\t\t\t\t", "\t\t\t\t"),
    ("x = ", " ", " "),
    ("a.ba", "", ".ba"),     # .ba is a prefix of .bar: healed by the prefix rule only
    ("a.bar", "", ""),       # nothing starts with .bar but itself
    ("xyz", "", ""),
    ("a\t", "\t", "\t"),
])
def test_which_endings_are_healed(prefix: str, whitespace: str, prefix_rule: str) -> None:
    prompts = PromptBuilder(TOK)
    for mode, want in (("whitespace", whitespace), ("prefix", prefix_rule)):
        healer = Healer(TOK, mode, prompts.stop_ids)
        healed, removed = prompts.build_healed(prefix, "\n}", healer.cut)
        assert TOK.decode(removed) == want, mode
        full = prompts.build(prefix, "\n}")
        assert prompts.build_healed(prefix, "\n}")[0] == full  # no heal: the plain prompt
        p, s = prompts.fim[0], prompts.fim[1]
        # the prefix's tokens lose their end, nothing else changes
        assert healed[: healed.index(s)] + removed == full[: full.index(s)] and healed[0] == p
        assert healed[healed.index(s):] == full[full.index(s):]


def test_the_constraint_allows_extensions_and_the_prefixes_the_tokenizer_writes() -> None:
    index = vocab_index(TOK, PromptBuilder(TOK).stop_ids)
    assert vocab_index(TOK, PromptBuilder(TOK).stop_ids) is index  # built once per tokenizer
    longer = {"\t\t\t\t", "\t\t\t\t\t", "\t\t\t\tr", "\t\t\t\tre", "\t\t\t\tret", "\t\t\t\tretu",
              "\t\t\t\tretur", "\t\t\t\treturn"}
    allowed = {TOK.decode([i]) for i in index.allowed(b"\t\t", VOCAB).nonzero().flatten().tolist()}
    assert allowed == {"\t\t"} | longer  # two tabs are always written as one token, never tab + tab
    # three tabs then anything are written two tabs first: one tab alone is not a way to start
    allowed = {TOK.decode([i]) for i in index.allowed(b"\t\t\t", VOCAB).nonzero().flatten().tolist()}
    assert allowed == {"\t\t"} | longer
    assert index.extends(b"\t") and not index.extends(b"\t\t\t\treturn") and not index.extends(b".bar")
    assert not index.allowed(b"<", VOCAB)[[TOK.token_id(t) for t in SPECIALS]].any()  # control tokens never


def test_the_setting_is_declared_once_prefix_by_default() -> None:
    assert HEALING == ("off", "whitespace", "prefix") and EngineConfig().token_healing == "prefix"
    assert _engine("off")._build(CompletionRequest(PREFIX, SUFFIX))[1] == []
    with pytest.raises(ValueError):
        Healer(TOK, "off")


@pytest.mark.parametrize("prefix, suffix", PROMPTS)
def test_the_completion_starts_with_the_removed_text(prefix: str, suffix: str) -> None:
    engine = _engine("prefix")
    prompt, removed = engine._build(CompletionRequest(prefix, suffix))
    removed_text = TOK.decode(removed)
    assert removed_text
    c = engine.complete(CompletionRequest(prefix, suffix, max_tokens=12, mode="target"))
    first = TOK.decode(c.tokens[:1])
    assert first.startswith(removed_text) or removed_text.startswith(first)
    text = TOK.decode(c.tokens)
    assert text.startswith(removed_text)
    assert c.text == text[len(removed_text):]  # the client sees what follows the cursor, once
    assert c.stats.new_tokens == len(c.tokens) and c.stats.prompt_tokens == len(prompt)


def test_the_indentation_is_not_repeated() -> None:
    """A model that always starts a line with ``\\t\\t\\t\\treturn`` (indentation and all), as the
    real pair did after a prompt ending in ``\\t\\t\\t\\t``: unhealed, its answer repeats the
    indentation; healed, it writes the indentation's token over again and the client sees
    ``return``."""
    target, draft = _models()
    bias = torch.zeros(VOCAB)
    bias[_id("\t\t\t\treturn")] = 50.0
    target, draft = Biased(target, bias), Biased(draft, bias)
    request = CompletionRequest(PREFIX, SUFFIX, max_tokens=6)
    off = _engine("off", target=target, draft=draft).complete(request)
    assert off.text.startswith("\t\t\t\treturn")
    for mode in ("whitespace", "prefix"):
        on = _engine(mode, target=target, draft=draft).complete(request)
        assert on.tokens[0] == _id("\t\t\t\treturn")
        assert on.text.startswith("return") and not on.text.startswith("\t")


@pytest.mark.parametrize("k, tree", [(1, "off"), (4, "off"), (3, "on")])
def test_greedy_speculative_equals_target_only_with_healing(k: int, tree: str) -> None:
    engine = _engine("prefix", k=k, tree=tree)
    for prefix, suffix in PROMPTS:
        target = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="target"))
        spec = engine.complete(CompletionRequest(prefix, suffix, max_tokens=24, mode="spec"))
        assert spec.tokens == target.tokens and spec.text == target.text
        assert spec.stats.mode == "spec" and spec.stats.drafted > 0
        # the draft's cache holds the healing tokens (the loop's prefill fed them)
        prompt, removed = engine._build(CompletionRequest(prefix, suffix))
        healed_prompt = prompt + spec.tokens[: _healing_len(spec.tokens, TOK.decode(removed))]
        assert engine.draft.common_prefix(torch.tensor(healed_prompt)) >= len(healed_prompt) - 1


def test_greedy_with_healing_equals_a_plain_generation_from_the_healed_prompt() -> None:
    """Healing forces the first tokens only: after them, the text is the target's own greedy text
    from the healed prompt (the constrained tokens fed back)."""
    from specd.engine.speculative import generate

    engine = _engine("whitespace", k=4)
    c = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=16, mode="spec"))
    prompt, removed = engine._build(CompletionRequest(PREFIX, SUFFIX))
    m = _healing_len(c.tokens, TOK.decode(removed))
    engine.reset()
    rest, _ = generate(engine.target, prompt + c.tokens[:m], Decoding(16 - m, SamplingParams(allowed=engine._allowed),
                                                                      engine.prompts.stop_ids))
    assert c.tokens[m:] == rest[: len(c.tokens) - m]


@pytest.mark.parametrize("k", [0, 3])
def test_healing_samples_follow_the_constrained_target(k: int) -> None:
    """The healing token is drawn from the target's warped distribution restricted to the allowed
    ids: target-only (``k = 0``) and in speculative rounds, where the drafts it disallows are
    rejected (``k = 3``, the tiny draft model drafting unconstrained)."""
    target, draft = _models()
    engine = _engine("whitespace", k=k, target=target, draft=draft if k else None)
    request = CompletionRequest("x = ", "\n", max_tokens=4, temperature=1.5)
    prompt, removed = engine._build(request)
    allowed = engine._healer.index.allowed(b" ", VOCAB)
    assert TOK.decode(removed) == " " and not bool(allowed.all())
    engine.reset()
    logits = engine.target.forward(torch.tensor(prompt))[-1].float()
    exact = torch.softmax((logits / 1.5).masked_fill(~allowed, float("-inf")), -1).double()
    engine.reset()
    counts = torch.zeros(VOCAB, dtype=torch.float64)
    samples, drafted = 1000, 0
    for seed in range(samples):
        c = engine.complete(dataclasses.replace(request, seed=seed))
        counts[c.tokens[0]] += 1
        drafted += c.stats.drafted
    assert (drafted > 0) == (k > 0)  # the speculative case did draft
    keep = exact > 0
    assert counts[~keep].sum() == 0  # never a token outside the constraint
    expected = exact * samples
    # tokens expected fewer than 5 times are pooled, as a chi-square test needs
    small = keep & (expected < 5)
    obs = torch.cat([counts[keep & ~small], counts[small].sum()[None]])
    exp = torch.cat([expected[keep & ~small], expected[small].sum()[None]])
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = len(obs) - 1
    p = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))
    assert p > 1e-4


def test_greedy_healing_drafts_are_verified_under_the_constraint() -> None:
    """Speculative rounds heal: the healing token comes out of a round that drafted (the old
    loop generated it target-only first), and the text is target-only's."""
    engine = _engine("prefix", k=4)
    for prefix, suffix in PROMPTS:
        c = engine.complete(CompletionRequest(prefix, suffix, max_tokens=12, mode="spec", profile=True))
        first = c.timeline["rounds"][0]
        assert first["drafted"] > 0  # the first round, which emits the healing token, verified drafts
        target = engine.complete(CompletionRequest(prefix, suffix, max_tokens=12, mode="target"))
        assert c.tokens == target.tokens


def test_a_stop_string_in_the_removed_text_does_not_stop_the_completion() -> None:
    """The prompt ends in ``\n`` (healed) and the request stops at ``\n``: the stop applies to
    the text after the cursor only."""
    engine = _engine("whitespace")
    prefix = "def f(a):\n  return a\n"
    assert TOK.decode(engine._build(CompletionRequest(prefix, "\n"))[1]) == "\n"
    for seed in range(3):
        c = engine.complete(CompletionRequest(prefix, "\n", max_tokens=10, stop=("\n",), temperature=1.0, seed=seed))
        full = TOK.decode(c.tokens)
        assert full.startswith("\n") and c.text == full[1:].split("\n")[0]


def _healing_len(tokens: list[int], removed: str) -> int:
    """How many of ``tokens`` healing generated: the fewest whose text holds ``removed``."""
    return next(m for m in range(1, len(tokens) + 1) if TOK.decode(tokens[:m]).startswith(removed))


def test_max_tokens_bounds_the_healing_steps_too() -> None:
    engine = _engine("whitespace")
    for n in (1, 2, 3):
        c = engine.complete(CompletionRequest(PREFIX, SUFFIX, max_tokens=n, mode="spec"))
        assert len(c.tokens) <= n and c.stats.new_tokens == len(c.tokens)


def test_typing_along_a_healed_suggestion_gives_the_cold_answer() -> None:
    """The continuation cache drafts the rest of a healed suggestion; the answer is a cold one's."""
    engine = _engine("whitespace", k=4)
    first = engine.complete(CompletionRequest("x = ", "\n", max_tokens=16))
    assert len(first.text) > 3
    typed = "x = " + first.text[:2]
    warm = engine.complete(CompletionRequest(typed, "\n", max_tokens=12))
    engine.reset()
    cold = engine.complete(CompletionRequest(typed, "\n", max_tokens=12, mode="target"))
    assert warm.text == cold.text and warm.tokens == cold.tokens


def test_warm_brings_the_caches_to_the_healed_prompt() -> None:
    engine = _engine("whitespace")
    request = CompletionRequest(PREFIX, SUFFIX, max_tokens=8)
    cached = engine.warm(request)
    prompt, removed = engine._build(request)
    assert removed and cached == len(prompt) - 1
    c = engine.complete(request)
    assert c.stats.prefill_reused == len(prompt) - 1


# -- the real pair ----------------------------------------------------------------------------------

# The eight lines before a line start in Go (the quality bench's dev task go-dev-line_start-2, from the
# Go sources' debug/buildinfo): the prompt ends in the token "\t\t\t" (the file: "\t\t" +
# "\telem"); unhealed, the 1.5B target starts its answer with one more tab.
GO_PREFIX = ('\tfor len(data) > 0 {\n\t\tline, data, ok = strings.Cut(data, newline)\n\t\tif !ok {\n\t\t\tbreak\n'
             '\t\t}\n\t\tswitch {\n\t\tcase strings.HasPrefix(line, pathLine):\n\t\t\t')
GO_SUFFIX = ('\n\t\t\tbi.Path = string(elem)\n\t\tcase strings.HasPrefix(line, modLine):\n'
             '\t\t\telem := strings.Split(line[len(modLine):], tab)\n')


def _sibling(engine: Engine, healing: str) -> Engine:
    """An engine over ``engine``'s models with another healing setting (nothing loaded again)."""
    return Engine(engine.target, engine.tokenizer, engine.draft, engine.tokenizer if engine.draft is not None else None,
                  engine.config.replace(token_healing=healing, prefix_cache_mb=0),
                  costs=engine.policy.cost if engine.policy is not None else None)


@pytest.mark.real_models
def test_real_pair_no_extra_tab_after_tab_indentation(real_engine) -> None:
    request = CompletionRequest(GO_PREFIX, GO_SUFFIX, max_tokens=4, mode="target")
    off = _sibling(real_engine, "off").complete(request)
    assert off.text.startswith("\telem"), off.text  # the defect healing fixes
    for mode in ("whitespace", "prefix"):
        healed = _sibling(real_engine, mode)
        assert real_engine.tokenizer.decode(healed._build(request)[1]) == "\t\t\t"
        on = healed.complete(request)
        assert on.text.startswith("elem"), (mode, on.text)
    spec = healed.complete(CompletionRequest(GO_PREFIX, GO_SUFFIX, max_tokens=8, mode="spec"))
    target = healed.complete(CompletionRequest(GO_PREFIX, GO_SUFFIX, max_tokens=8, mode="target"))
    assert spec.tokens == target.tokens and spec.text.startswith("elem")


# Texts as a file has them, split where the healed prompt would end (the removed token's text, then
# what follows it): indentation before words and before closers, tabs, a member access, a non-ASCII word.
REAL_TEXTS = ["      if x >= 0 {", "\n        self.run()", "\t\t\telem := x", "    }", "obj.bar()", "    \n",
              "        return None", "  # é comment", "\t\t\t\t\"quoted\"", "x == y"]


@pytest.mark.real_models
@pytest.mark.parametrize("text", REAL_TEXTS)
def test_real_tokenizer_the_way_it_writes_a_text_is_always_allowed(real_engine, text: str) -> None:
    """Wherever the cursor is in the text, the healing constraint lets through, step by step, the
    tokens the tokenizer writes for the removed text and what follows it."""
    tok = real_engine.tokenizer
    healer = Healer(tok, "prefix", PromptBuilder(tok).stop_ids)
    healed = 0
    for cursor in range(1, len(text)):
        before = tok.encode(text[:cursor])
        if not healer.cut(before):
            continue  # not healed there
        healed += 1
        healing = healer.begin(before[-1:])
        after = healer.constraint(healing, 0, tok.vocab_size)  # the tokens after the prompt -> the mask
        written = tok.encode(healing.removed + text[cursor:])
        for k, t in enumerate(written):
            mask = after(written[:k])
            if mask is None:
                break  # covered
            assert mask[t], (text, cursor, healing.removed, tok.decode(written[:k]), tok.decode([t]))
    assert healed > 0


@pytest.mark.real_models
def test_real_tokenizer_indentation_is_not_covered_one_space_at_a_time(real_engine) -> None:
    """Six spaces before a word are written five spaces then `` word``: healing six spaces may start
    with five, never with one (the model once wrote six one-space tokens that way, then lost its place)."""
    tok = real_engine.tokenizer
    index = vocab_index(tok, PromptBuilder(tok).stop_ids)
    allowed = index.allowed(b"      ", tok.vocab_size)
    assert allowed[tok.encode("     ")[0]] and not allowed[tok.encode(" ")[0]]
    assert all(index.bytes[i].startswith(b"      ") or index.bytes[i] == b"     "
               for i in allowed.nonzero().flatten().tolist())
