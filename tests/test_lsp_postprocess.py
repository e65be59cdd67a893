"""Post-processing rules, one at a time and together."""

from __future__ import annotations

from specd.lsp.postprocess import Rules, cut_block, drop_suffix_repeat, postprocess, trim_trailing_whitespace


def test_mid_line_keeps_one_line() -> None:
    assert postprocess("a, b)\nprint(x)\n", "f(", ")", ")\nnext\n") == "a, b"


def test_end_of_line_may_be_multi_line() -> None:
    out = postprocess("\n    return n\n", "def f(n):", "", "\n")
    assert out == "\n    return n"


def test_block_ends_where_indentation_returns_to_the_opening_line() -> None:
    text = "\n    if n < 2:\n        return n\n    return f(n - 1)\n\ndef g():\n    pass"
    assert cut_block(text, "def f(n):") == "\n    if n < 2:\n        return n\n    return f(n - 1)\n"


def test_block_inside_a_body_stops_at_a_shallower_line() -> None:
    text = "x = 1\n    y = 2\nz = 3\n"
    assert cut_block(text, "    ") == "x = 1\n    y = 2"


def test_closing_bracket_ends_and_is_kept() -> None:
    text = "\n    a();\n    b();\n}\n\nint main() {"
    assert cut_block(text, "void f() {") == "\n    a();\n    b();\n}"


def test_suffix_repeat_on_the_line() -> None:
    assert drop_suffix_repeat("x, y):", "):", "):\n") == "x, y"
    assert drop_suffix_repeat("x, y)", "):", "):\n") == "x, y"
    assert drop_suffix_repeat("x, y", ")", ")\n") == "x, y"


def test_suffix_repeat_over_lines() -> None:
    text = "\n    total += x\nreturn total\nprint(1)"
    assert drop_suffix_repeat(text, "", "\nreturn total\n") == "\n    total += x"


def test_a_closing_bracket_the_completion_wrote_is_not_the_suffix_repeating() -> None:
    """The model's own ``    }`` closing the method it wrote stays, although the line after the
    cursor is the enclosing impl's ``}`` (rs-dev-block-16 of the quality bench lost it)."""
    text = "fn ge(&self) -> bool {\n        true\n    }\n}\n\nimpl Ord for L {"
    suffix = "\n}\n\nimpl PartialOrd<Level> for L {\n"
    assert drop_suffix_repeat(text, "", suffix) == "fn ge(&self) -> bool {\n        true\n    }"
    assert postprocess(text, "    ", "", suffix) == "fn ge(&self) -> bool {\n        true\n    }"


def test_the_enclosing_closer_at_its_own_indentation_is_a_repeat() -> None:
    text = "a();\n}\n\nfunc next() {"
    assert drop_suffix_repeat(text, "", "\n}\n\nfunc other() {\n") == "a();"


def test_trailing_whitespace() -> None:
    assert trim_trailing_whitespace("a  \n  b \t\n\n") == "a\n  b"


def test_rules_can_be_switched_off() -> None:
    off = Rules(single_line_mid_line=False, block_by_indent=False, drop_suffix_repeat=False,
                trim_trailing_whitespace=False)
    raw = "a)\nb  \n"
    assert postprocess(raw, "f(", ")", ")") == "a"
    assert postprocess(raw, "f(", ")", ")", off) == raw


def test_a_nul_character_ends_the_suggestion_whatever_the_rules() -> None:
    off = Rules(single_line_mid_line=False, block_by_indent=False, drop_suffix_repeat=False,
                trim_trailing_whitespace=False)
    assert postprocess("x = 1\0 + 2\n", "", "", "", off) == "x = 1"
    assert postprocess("\0abc", "    ", "", "") == ""
