"""PNG plots of a run: ms/token per mode, acceptance per draft position, end-to-end latency CDF,
speedup per task category, and the forward-cost curve."""

from __future__ import annotations

from pathlib import Path


MISSING_NOTE = ("matplotlib is not installed: the PNG plots are skipped (the numbers, results.json and "
                "report.md are not); pip install 'specd[bench]' draws them")


def unavailable() -> str | None:
    """None when the plots can be drawn, else a note saying why not and what to install. Checked
    before a run starts, so a missing optional dependency never ends a finished run in a traceback."""
    try:
        _pyplot()
    except ImportError:
        return MISSING_NOTE
    return None


def _pyplot():
    # imported here: matplotlib is optional (the bench extra), and unavailable() asks before a run
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_all(doc: dict, out: Path) -> list[str]:
    """Writes the plots into ``out``; returns their file names."""
    plt = _pyplot()
    names = []
    runs = doc["runs"]
    modes = list(doc["summary"])
    commit = (doc["git"].get("commit") or "no git")[:10] + ("+uncommitted" if doc["git"].get("dirty_files") else "")
    subtitle = f"{commit} · {doc['machine']['cores']} cores · {doc['created'][:16]}"

    def save(fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    # 1. decode ms/token per mode (box over all runs)
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(modes) + 2), 4))
    data = [[r["decode_ms_per_token"] for r in runs if r["mode"] == m] for m in modes]
    ax.boxplot(data, tick_labels=modes, showfliers=True)
    ax.set_ylabel("decode ms / token")
    ax.set_title(f"Decode ms/token per mode (lower is better)\n{subtitle}", fontsize=9)
    ax.tick_params(axis="x", rotation=20)
    save(fig, "ms_per_token.png")

    # 2. acceptance per draft position
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for m in modes:
        acc = doc["summary"][m]["acceptance_at"]
        if acc:
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=m)
            drawn = True
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(draft i accepted | drafted)")
    ax.set_ylim(0, 1.02)
    if drawn:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no speculative mode in this run", ha="center", transform=ax.transAxes)
    ax.set_title(f"Acceptance per draft position\n{subtitle}", fontsize=9)
    save(fig, "acceptance_by_position.png")

    # 3. latency CDF (end-to-end)
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in modes:
        v = sorted(r["total_ms"] for r in runs if r["mode"] == m)
        if v:
            ax.step(v, [(i + 1) / len(v) for i in range(len(v))], where="post", label=m)
    ax.set_xlabel("end-to-end ms per completion")
    ax.set_ylabel("fraction of completions")
    ax.legend()
    ax.set_title(f"End-to-end latency CDF\n{subtitle}", fontsize=9)
    save(fig, "latency_cdf.png")

    # 4. speedup per task category
    fig, ax = plt.subplots(figsize=(7, 4))
    others = [m for m in modes if m != "target"]
    cats = sorted({c for m in others for c in doc["summary"][m]["speedup_decode_by_category"]})
    width = 0.8 / max(len(others), 1)
    for j, m in enumerate(others):
        by = doc["summary"][m]["speedup_decode_by_category"]
        med = [by.get(c, {}).get("median", 0) for c in cats]
        lo = [max(0.0, med[i] - by.get(c, {}).get("p25", med[i])) for i, c in enumerate(cats)]
        hi = [max(0.0, by.get(c, {}).get("p75", med[i]) - med[i]) for i, c in enumerate(cats)]
        ax.bar([i + j * width for i in range(len(cats))], med, width, yerr=[lo, hi], capsize=3, label=m)
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks([i + width * (len(others) - 1) / 2 for i in range(len(cats))], cats)
    ax.set_ylabel("decode speedup vs target-only (×)")
    if others:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "only the target mode ran", ha="center", transform=ax.transAxes)
    ax.set_title(f"Speedup per task category (median over tasks, p25–p75)\n{subtitle}", fontsize=9)
    save(fig, "speedup_by_category.png")

    # 5. forward cost over n tokens
    vc = doc.get("verify_curve")
    if vc:
        fig, ax = plt.subplots(figsize=(6, 4))
        for role, m in vc["models"].items():
            ns = [int(n) for n in m["median"]]
            line, = ax.plot(ns, [m["median"][str(n)] for n in ns], marker="o", label=f"{role} forward")
            ax.fill_between(ns, [m["p25"][str(n)] for n in ns], [m["p75"][str(n)] for n in ns],
                            color=line.get_color(), alpha=0.2)
        ax.set_xlabel("tokens in one forward (K + 1 for K drafts)")
        ax.set_ylabel("ms per forward (median, p25–p75 band)")
        ax.set_xticks(vc["sizes"])
        ax.legend()
        ax.set_title(f"Forward cost over n new tokens ({vc['context_tokens']}-token context)\n{subtitle}", fontsize=9)
        save(fig, "verify_curve.png")
    return names
