"""Post-processing of a raw completion (pure functions; each rule but the first can be switched off).

- end before a NUL character, always: no source file holds one, and an editor would write it into
  the document (a model that emits one, say a random test model's byte token, is not making code);
- single line when the cursor is mid-line (text other than whitespace follows it);
- stop at the end of the current block, judged by indentation;
- drop trailing text that repeats the suffix (the rest of the line, or the next lines);
- trim trailing whitespace.
"""

from __future__ import annotations

from dataclasses import dataclass

BLOCK_OPENERS = (":", "{", "(", "[", "=>", " do", " then", "->")
CLOSERS = ("}", ")", "]", "end")


@dataclass(frozen=True)
class Rules:
    single_line_mid_line: bool = True
    block_by_indent: bool = True
    drop_suffix_repeat: bool = True
    trim_trailing_whitespace: bool = True


def is_mid_line(line_suffix: str) -> bool:
    return bool(line_suffix.strip())


def postprocess(text: str, line_prefix: str, line_suffix: str, suffix: str, rules: Rules = Rules()) -> str:
    """``text`` is the raw completion at the cursor; ``line_prefix``/``line_suffix`` the cursor
    line around the cursor; ``suffix`` the text after the cursor (including ``line_suffix``)."""
    text = text.split("\0", 1)[0].replace("\r\n", "\n")
    if rules.single_line_mid_line and is_mid_line(line_suffix):
        text = text.split("\n", 1)[0]
    if rules.block_by_indent:
        text = cut_block(text, line_prefix)
    if rules.drop_suffix_repeat:
        text = drop_suffix_repeat(text, line_suffix, suffix)
    if rules.trim_trailing_whitespace:
        text = trim_trailing_whitespace(text)
    return text


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def cut_block(text: str, line_prefix: str) -> str:
    """Keep the lines of the current block. The reference is the cursor line's indentation; when
    the cursor line opens a block (ends with ``:``, ``{``, ``(``…) the block's lines are deeper
    than it, else at least as deep. The first line outside ends the completion; it is kept when it
    is a closing bracket (it closes the block)."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    first = line_prefix + lines[0]
    ref = indent_of(first) if first.strip() else len(line_prefix)
    opens = first.rstrip().endswith(BLOCK_OPENERS)
    kept = [lines[0]]
    for line in lines[1:]:
        if line.strip():
            ind = indent_of(line)
            if ind < ref or (opens and ind <= ref):
                if line.strip().startswith(CLOSERS):
                    kept.append(line)
                break
        kept.append(line)
    return "\n".join(kept)


def drop_suffix_repeat(text: str, line_suffix: str, suffix: str) -> str:
    """Drop the completion's tail that the document already has after the cursor: on a single
    line, the longest start of the line's rest that ends the completion; over lines, everything
    from the first line equal to the next non-blank line after the cursor line, indentation
    included (a ``}`` closing a block the completion wrote is not the enclosing block's ``}``)."""
    rest = line_suffix.strip()
    if rest and "\n" not in text:
        body = text.rstrip()
        for k in range(len(rest), 0, -1):
            if body.endswith(rest[:k]):
                return body[: len(body) - k]
        return text
    after = suffix.split("\n")[1:] if "\n" in suffix else []
    following = next((ln.rstrip() for ln in after if ln.strip()), None)
    if following is None:
        return text
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if lines[i].rstrip() == following:
            return "\n".join(lines[:i])
    return text


def trim_trailing_whitespace(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip()
