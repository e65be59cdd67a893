"""``bench/lookup_matches.py``: lookup's drafts judged at every answer position, by match length."""

from __future__ import annotations

from tests.bench_script import load_bench_script


def test_tally_judges_every_answer_position_by_its_match_length() -> None:
    m = load_bench_script("lookup_matches")
    prompt = [1, 2, 3, 4, 5, 9, 8]
    answer = [1, 2, 3, 4, 6]
    counts: dict[int, list[int]] = {}
    m.tally(prompt + answer, len(prompt), 3, counts)
    # before the answer's 1 and 2 nothing repeats ("9 8", "8 1"); then
    #   after "1 2": drafts 3 4 5 against the answer's 3 4 6: 1, 2, 2 accepted at caps 1, 2, 3
    #   after "1 2 3": drafts 4 5 9 against 4 6: 1, 1, 1
    #   after "1 2 3 4": drafts 5 9 8 against 6: none
    assert counts == {2: [1, 1, 2, 2], 3: [1, 1, 1, 1], 4: [1, 0, 0, 0]}
    assert m.accepted([7, 8, 9], [7, 8]) == 2 and m.accepted([], [1]) == 0
