"""The printed table and the Markdown report, both computed from the result document."""

from __future__ import annotations

import math


def _f(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def _spread(s: dict, digits: int = 1) -> str:
    if not s or not s.get("n"):
        return "–"
    return f"{_f(s['median'], digits)} [{_f(s['p25'], digits)}–{_f(s['p75'], digits)}]"


COLUMNS = ("mode", "runs", "prefill ms", "TTFT ms", "decode ms/tok [p25–p75]", "e2e ms", "new tok",
           "accept", "acc. len", "speedup decode [p25–p75]", "speedup e2e", "peak RSS MB", "= target")


def rows(doc: dict) -> list[list[str]]:
    out = []
    for mode, e in doc["summary"].items():
        m = e["metrics"]
        same = e["same_tokens_as_target"]
        out.append([
            mode, str(e["runs"]), _f(m["prefill_ms"].get("median"), 0), _f(m["ttft_ms"].get("median"), 0),
            _spread(m["decode_ms_per_token"]), _f(m["total_ms"].get("median"), 0),
            _f(m["new_tokens"].get("median"), 0),
            _f(m["acceptance_rate"].get("median"), 2), _f(m["mean_accepted_len"].get("median"), 2),
            _spread(e["speedup_decode"], 2), _f(e["speedup_e2e"].get("median"), 2),
            _f(m["peak_rss_mb"].get("median"), 0), f"{same[0]}/{same[1]}",
        ])
    return out


def text_table(doc: dict) -> str:
    table = [list(COLUMNS)] + rows(doc)
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _md_table(header: list[str], body: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                     ["| " + " | ".join(r) + " |" for r in body])


def anchor_ratios(doc: dict) -> list[list[str]]:
    """specd mode decode ms/token ÷ anchor decode ms/token (below 1: specd is faster)."""
    s = doc["summary"]
    specd = [m for m in s if not m.startswith(("hf-", "llamacpp"))]
    anchors = [m for m in s if m.startswith(("hf-", "llamacpp"))]
    out = []
    for a in anchors:
        am = s[a]["metrics"]["decode_ms_per_token"].get("median")
        for m in specd:
            sm = s[m]["metrics"]["decode_ms_per_token"].get("median")
            out.append([m, a, _f(sm), _f(am), _f(sm / am if sm and am else None, 2)])
    return out


def markdown(doc: dict, plots: list[str]) -> str:
    cfg, mach, git = doc["config"], doc["machine"], doc["git"]
    parts = [
        f"# specd bench — {doc['created']}",
        "",
        f"- command: `{doc['command']}`",
        f"- commit: `{git.get('commit')}` ({git.get('subject')})"
        + (f"; uncommitted changes in {', '.join(git['dirty_files'])}" if git.get("dirty_files") else ""),
        f"- machine: {mach['cpu']}, {mach['cores']} cores (torch threads {mach['torch_threads']}), "
        f"{mach['memory_gb']} GB; ISA: {' '.join(mach['isa'])}",
        f"- software: " + ", ".join(f"{k} {v}" for k, v in mach["versions"].items()),
        "- engine: " + ", ".join(f"{k} `{v}`" for k, v in cfg["engine"].items()),
        f"- {len(cfg['tasks'])} tasks × {cfg['reps']} reps × {len(cfg['modes'])} modes, max {cfg['max_tokens']} new "
        f"tokens, greedy, cold KV cache per run, interleaved per task ({' '.join(cfg['modes'])} repeated)",
        "",
        "Medians over all runs; [p25–p75]. Decode ms/token = (end-to-end − prefill) / new tokens. Speedups are "
        "per task (median of the target's runs ÷ median of the mode's runs on the same task, same run), then "
        "the median [p25–p75] over tasks. `= target`: runs whose tokens equal the target-only run's on the "
        "same task (greedy exactness; anchors use other kernels/precision, so theirs is informational).",
        "",
        _md_table(list(COLUMNS), rows(doc)),
    ]
    if doc.get("notes"):
        parts += ["", "Notes:", ""] + [f"- {n}" for n in doc["notes"]]
    ratios = anchor_ratios(doc)
    if ratios:
        parts += ["", "## specd vs anchors (decode ms/token)", "",
                  _md_table(["specd mode", "anchor", "specd", "anchor", "specd ÷ anchor"], ratios)]
    spec_modes = [m for m, e in doc["summary"].items() if e["acceptance_at"]]
    if spec_modes:
        depth = max(len(doc["summary"][m]["acceptance_at"]) for m in spec_modes)
        body = [[m] + [_f(a, 2) for a in doc["summary"][m]["acceptance_at"]] + [""] * (depth - len(doc["summary"][m]["acceptance_at"]))
                for m in spec_modes]
        parts += ["", "## Acceptance by draft position", "",
                  "Rounds that accepted draft i ÷ rounds that drafted it (all runs).", "",
                  _md_table(["mode"] + [f"i={i + 1}" for i in range(depth)], body)]
    cats = sorted({c for e in doc["summary"].values() for c in e["speedup_decode_by_category"]})
    if cats:
        body = [[m] + [_spread(e["speedup_decode_by_category"].get(c, {}), 2) for c in cats]
                for m, e in doc["summary"].items() if m != "target"]
        if body:
            parts += ["", "## Decode speedup vs target-only, per task category", "",
                      _md_table(["mode"] + cats, body)]
    vc = doc.get("verify_curve")
    if vc:
        sizes = [str(n) for n in vc["sizes"]]
        body = []
        for role, m in vc["models"].items():
            body.append([f"{role} ms"] + [f"{_f(m['median'][n])} [{_f(m['p25'][n])}–{_f(m['p75'][n])}]" for n in sizes])
            body.append([f"{role} T(n)/T(1)"] + [_f(m["ratio_to_1"][n], 2) for n in sizes])
        parts += ["", "## Cost of one forward over n new tokens", "",
                  f"After a {vc['context_tokens']}-token cached context, {vc['reps']} reps, through the model's "
                  "public `forward` (median [p25–p75]). Verifying K drafts is a forward over n = K + 1."
                  + (f" Draft step ÷ target step: {vc['draft_over_target_step']}." if "draft_over_target_step" in vc else ""),
                  "", _md_table(["model"] + [f"n={n}" for n in sizes], body)]
    modes = list(doc["summary"])
    body = []
    for t in doc["per_task"]:
        cells = [t["task"], t["category"], str(t["prompt_tokens"])]
        for m in modes:
            cells.append(_f(t["modes"].get(m, {}).get("decode_ms_per_token")))
        body.append(cells)
    parts += ["", "## Per task: decode ms/token (median over reps)", "",
              _md_table(["task", "category", "prompt tok"] + modes, body)]
    if plots:
        parts += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(parts) + "\n"
