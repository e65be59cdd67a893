#!/usr/bin/env python
"""Two drafters compared on the same tasks, from files the benches wrote (nothing is run here).

``acceptance A.json B.json``: two ``bench/heads_acceptance.py`` outputs over the same prompts:
accepted ÷ drafted of each at the long length (pooled over prompts, not a mean of ratios), and on
how many prompts B's own acceptance is higher or lower than A's. Several pairs pool: ``A1 B1 A2
B2 ...``.

``race RACE.json A B``: two modes of one ``bench/decode_race.py`` run (same alternation):
per counted task B's ms/token slope ÷ A's (median, and on how many B is faster), and each mode's
mean acceptance at the long length over every task.

    python bench/compare_drafters.py acceptance old-dev.json new-dev.json old-scrapy.json new-scrapy.json
    python bench/compare_drafters.py race race.json heads+ngram@s22 spec
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _counts(row: dict, length: str) -> tuple[int, int]:
    return row[length]["accepted"], row[length]["drafted"]


def acceptance(files: list[Path], length: str = "40") -> dict:
    if len(files) % 2:
        raise SystemExit("acceptance: give the files in pairs, A then B")
    out: dict = {"pairs": [], "pooled": {"A": [0, 0], "B": [0, 0]}}
    for a_path, b_path in zip(files[::2], files[1::2]):
        a_rows = json.loads(a_path.read_text())["rows"]
        b_rows = json.loads(b_path.read_text())["rows"]
        if [r["id"] for r in a_rows] != [r["id"] for r in b_rows]:
            raise SystemExit(f"{a_path} and {b_path} are not over the same prompts")
        pair = {"A": str(a_path), "B": str(b_path), "higher": 0, "lower": 0}
        for side, rows in (("A", a_rows), ("B", b_rows)):
            acc, drafted = map(sum, zip(*(_counts(r, length) for r in rows)))
            pair[side + "_accepted_drafted"] = [acc, drafted]
            pair[side + "_acceptance"] = round(acc / max(drafted, 1), 4)
            out["pooled"][side][0] += acc
            out["pooled"][side][1] += drafted
        for a, b in zip(a_rows, b_rows):
            (acc_a, n_a), (acc_b, n_b) = _counts(a, length), _counts(b, length)
            ra, rb = acc_a / max(n_a, 1), acc_b / max(n_b, 1)
            pair["higher"] += rb > ra
            pair["lower"] += rb < ra
        out["pairs"].append(pair)
    for side in ("A", "B"):
        acc, drafted = out["pooled"][side]
        out["pooled"][side + "_acceptance"] = round(acc / max(drafted, 1), 4)
    return out


def race(path: Path, a: str, b: str, short: str = "8", long: str = "40") -> dict:
    raw = json.loads(path.read_text())["raw"]

    def slope(task: dict, mode: str) -> float:
        lo, hi = task[f"{mode}_{short}"], task[f"{mode}_{long}"]
        return (hi["wall_ms"] - lo["wall_ms"]) / (hi["tokens"] - lo["tokens"])

    counted = [t for t in raw if t["counted"]]
    ratios = [slope(t, b) / slope(t, a) for t in counted]
    return {"tasks": len(raw), "counted": len(counted),
            f"{b} / {a} per task median": round(statistics.median(ratios), 3),
            f"{b} faster on": sum(r < 1 for r in ratios),
            "mean acceptance": {m: round(statistics.mean(t[f"{m}_{long}"]["acceptance"] for t in raw), 3) for m in (a, b)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    acc = sub.add_parser("acceptance")
    acc.add_argument("files", type=Path, nargs="+")
    rc = sub.add_parser("race")
    rc.add_argument("file", type=Path)
    rc.add_argument("a")
    rc.add_argument("b")
    args = ap.parse_args()
    result = acceptance(args.files) if args.what == "acceptance" else race(args.file, args.a, args.b)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
