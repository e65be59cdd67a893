#!/usr/bin/env python
"""Decode speed through the daemon, side by side with llama-server, like with like.

Both systems serve the same target GGUF (specd's daemon over its socket, llama-server with
llama.vscode's CPU settings over ``/infill``); for each task (``bench/race_tasks.py`` JSONL, editor
contexts) every system first has the prompt cached (specd ``warm``, llama-server an ``/infill``
of ``n_predict`` 0 with ``cache_prompt``), then answers it greedily at two lengths, SHORT and LONG
new tokens, requests alternating between the systems. Per system and task:

    decode ms/token = (wall(LONG) - wall(SHORT)) / (tokens(LONG) - tokens(SHORT))

the slope of the client's wall time over new tokens: what a user waits per token, with whatever
each server does per request (prompt lookup, the first token from the prompt's logits, response)
cancelled out, so both count alike. That per-request rest is reported beside it:
``overhead = wall(SHORT) - SHORT tokens x slope``. A task counts only where both lengths ran
at least MIN_SPAN tokens further in every mode (an answer that ends early, at end-of-text, leaves
too few tokens to time). specd's continuation cache (a repeated
greedy prompt gets its last answer as free drafts) is defeated before every timed speculative
request by an untimed one-token request with another suffix, so speculation earns its tokens.

Modes: ``spec`` (specd, its default drafter or the one ``-- --drafter D`` names, K auto), ``target`` (specd target only), ``llama`` (llama-server target),
and with ``--heads FILE`` one more mode per ``--heads-drafter`` (default ``heads+ngram``; a comma
list, e.g. ``heads+ngram,auto``), named after it: a daemon each, ``--drafter D --heads FILE``, K auto
(all daemons stay up, requests alternating among all modes, so every drafter meets the same moment).
Several heads files race as ``--heads NAME=FILE`` given once each, their modes named ``D@NAME``
(a head fine-tuned on a repository beside the shipped one, say). ``--variant NAME="FLAGS"`` adds a
mode NAME: a daemon with these extra ``specd serve`` flags (a setting raced against its default,
``--variant nobias="--head-context-bias 0"``); ``--target-variant NAME="FLAGS"`` likewise, its requests
target-only (a setting's effect on the target's own step, ``--target-variant t32="--kv-cache f32"``).
With ``--cold N`` each task is first answered cold (N new tokens, the prompt never seen) by every
daemon and llama-server, alternating, timed: the editor's first request in a file, where what a
drafter costs at prefill (the draft model's own prompt pass) shows. ``--isa-cap avx2`` holds both
sides to AVX2 (specd's daemons under ``SPECD_GG_SIMD=avx2``, torch's ``ATEN_CPU_CAPABILITY`` and
oneDNN's ``DNNL_MAX_CPU_ISA`` alike, llama-server from the build of
``python -m specd.bench.llamacpp_build --isa-cap avx2``): a stand-in for an AVX2-only machine,
on a CPU that has more (what it cannot mimic: that machine's own bandwidth and cores). Reported: per-task values and, per mode, the median, p10 and p90 (machine noise), and the ratios
of medians the issue's goals name. Run it alone on the machine (no other heavy job):

    python bench/decode_race.py /tmp/race-test.jsonl --out bench/out/decode-race.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specd.bench.llamacpp_bin import ISA_CAPS, LlamaServer, find_binaries
from specd.bench.machine import machine_info
from specd.daemon.client import Client
from specd.models.pull import gguf_path
from specd.models.registry import PUBLISHED
from specd.engine.config import DEFAULT_TARGET, HEAD_DRAFTERS
from specd.percentile import percentile

MODES = ("spec", "target", "llama")
MIN_SPAN = 16  # tokens between the two lengths for a task to count


class Specd:
    """``specd serve`` as a subprocess on a temporary socket, and a blocking client to it."""

    def __init__(self, args: list[str]) -> None:
        self.dir = tempfile.mkdtemp(prefix="specd-race-")
        self.sock = os.path.join(self.dir, "s")
        self.proc = subprocess.Popen([sys.executable, "-m", "specd", "serve", "--socket", self.sock, *args],
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "wb"))
        deadline = time.monotonic() + 900
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"specd serve did not start (log: {self.dir}/log)")
            time.sleep(0.5)
        self.client = Client(self.sock, timeout=900)
        self.client.call("health")

    def complete(self, t: dict, n: int, mode: str, suffix: str | None = None) -> tuple[float, int, dict]:
        params = {"prefix": t["prefix"], "suffix": t["suffix"] if suffix is None else suffix, "max_tokens": n,
                  "temperature": 0, "mode": mode}
        t0 = time.perf_counter()
        r = self.client.call("complete", params)
        return (time.perf_counter() - t0) * 1e3, int(r["stats"]["new_tokens"]), r["stats"]

    def warm(self, t: dict) -> None:
        self.client.call("warm", {"prefix": t["prefix"], "suffix": t["suffix"]})

    def stop(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", type=Path)
    ap.add_argument("--count", type=int, default=0, help="first N tasks (0: all)")
    ap.add_argument("--short", type=int, default=8)
    ap.add_argument("--long", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", type=Path, default=None, help="JSON of every raw measurement")
    ap.add_argument("--heads", action="append", default=[],
                    help="a draft heads file (FILE, or NAME=FILE, given once per file): adds a mode per "
                         "--heads-drafter, a daemon drafting with it")
    ap.add_argument("--heads-drafter", default="heads+ngram",
                    help="comma list of those daemons' --drafter: heads (the heads alone), heads+ngram (prompt "
                         "lookup first, as the default daemon has in front of its draft model), auto (lookup, "
                         "then the draft model or the heads, chosen per round) (default: %(default)s)")
    ap.add_argument("--cold", type=int, default=0,
                    help="first answer each task cold with this many new tokens in every daemon (and "
                         "llama-server), timed: what the editor's first request in a file waits (0: off)")
    ap.add_argument("--variant", action="append", default=[],
                    help='NAME="FLAGS", given once per variant: adds a mode NAME, a daemon with these extra '
                         '`specd serve` flags')
    ap.add_argument("--target-variant", action="append", default=[],
                    help='NAME="FLAGS", as --variant, its requests target-only')
    ap.add_argument("--isa-cap", choices=ISA_CAPS, default=None,
                    help="both sides held to this instruction set: specd's daemons under SPECD_GG_SIMD, "
                         "llama-server from the build of `python -m specd.bench.llamacpp_build --isa-cap`")
    ap.add_argument("specd_args", nargs="*", help="extra `specd serve` flags (after --)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    drafters = [d for d in args.heads_drafter.split(",") if d]
    unknown = [d for d in drafters if d not in HEAD_DRAFTERS]
    if unknown:
        raise SystemExit(f"--heads-drafter: not a drafter that reads heads: {', '.join(unknown)}")
    files = [h.split("=", 1) if "=" in h else ["", h] for h in args.heads]
    if len(files) > 1 and not all(name for name, _ in files):
        raise SystemExit("--heads: name each file (NAME=FILE) when racing several")
    # the modes beyond spec, target and llama: each a daemon of its own, by its extra serve flags
    extra_modes = {(f"{d}@{name}" if name else d): ["--drafter", d, "--heads", path]
                   for name, path in files for d in drafters}
    target_only = {"target"}  # the modes whose requests are target-only
    for option, values in (("--variant", args.variant), ("--target-variant", args.target_variant)):
        for v in values:
            name, _, flags = v.partition("=")
            if not name or name in MODES or name in extra_modes:
                raise SystemExit(f"{option}: {v!r}: name it NAME=FLAGS, a name no other mode has")
            extra_modes[name] = shlex.split(flags)
            if option == "--target-variant":
                target_only.add(name)
    modes += [m for m in extra_modes if m not in modes]
    tasks = [json.loads(line) for line in args.tasks.read_text().splitlines() if line.strip()]
    tasks = tasks[: args.count] if args.count else tasks
    model = gguf_path(PUBLISHED[DEFAULT_TARGET])
    if args.isa_cap:  # the daemons inherit these (specd's kernels key their cost curves by the first)
        os.environ |= {"SPECD_GG_SIMD": args.isa_cap, "ATEN_CPU_CAPABILITY": args.isa_cap,
                       "DNNL_MAX_CPU_ISA": args.isa_cap.upper()}  # torch's own ops and oneDNN alike
    specd = Specd(["--threads", str(args.threads), *args.specd_args])
    daemons = {"spec": specd, "target": specd}
    for m, flags in extra_modes.items():
        daemons[m] = Specd(["--threads", str(args.threads), *args.specd_args, *flags])
    extra = [daemons[d] for d in extra_modes]
    bins = find_binaries(isa_cap=args.isa_cap)
    if "llama" in modes and bins is None:
        raise SystemExit("no llama-server built: python -m specd.bench.llamacpp_build"
                         + (f" --isa-cap {args.isa_cap}" if args.isa_cap else ""))
    llama = LlamaServer(bins, model, args.threads).start() if "llama" in modes else None
    raw: list[dict] = []
    try:
        for i, t in enumerate(tasks):
            row: dict = {"id": t["id"]}
            if args.cold:  # each daemon's first sight of the prompt, in an order that alternates
                cold_modes = [m for m in modes if m not in target_only]
                for mode in cold_modes if i % 2 == 0 else cold_modes[::-1]:
                    if mode == "llama":
                        r = llama.infill(t["prefix"], t["suffix"], args.cold, cache_prompt=True)
                        row[f"{mode}_cold"] = {"wall_ms": round(r.wall_ms, 2), "tokens": r.predicted_n}
                    else:
                        ms, got, _ = daemons[mode].complete(t, args.cold, "spec")
                        row[f"{mode}_cold"] = {"wall_ms": round(ms, 2), "tokens": got}
            for daemon in (specd, *extra):
                daemon.warm(t)
            if llama is not None:
                llama.infill(t["prefix"], t["suffix"], 0, cache_prompt=True)
            for mode in modes if i % 2 == 0 else modes[::-1]:
                # each mode's short and long requests swap order from task to task (by the mode's
                # own place: by its place in this task's order, an odd number of modes would keep
                # one order for ever, and a cost the first request pays would bias every slope)
                first = (i + modes.index(mode)) % 2 == 0
                for n in ((args.short, args.long) if first else (args.long, args.short)):
                    if mode == "llama":
                        r = llama.infill(t["prefix"], t["suffix"], n, cache_prompt=True)
                        ms, got, info = r.wall_ms, r.predicted_n, {"predicted_per_token_ms": r.decode_ms_per_token}
                    else:
                        daemon = daemons[mode]
                        if mode not in target_only:  # no free drafts from a remembered answer
                            daemon.complete(t, 1, "target", suffix=t["suffix"] + "\n#")
                        ms, got, info = daemon.complete(t, n, "target" if mode in target_only else "spec")
                    row[f"{mode}_{n}"] = {"wall_ms": round(ms, 2), "tokens": got,
                                          **({"acceptance": info.get("acceptance_rate"),
                                              "decode_ms_per_token": info.get("decode_ms_per_token")}
                                             if mode != "llama" else
                                             {"predicted_per_token_ms": info.get("predicted_per_token_ms")})}
            full = all(row[f"{m}_{args.long}"]["tokens"] >= row[f"{m}_{args.short}"]["tokens"] + MIN_SPAN
                       for m in modes)
            row["counted"] = full
            for m in modes:
                s, l = row[f"{m}_{args.short}"], row[f"{m}_{args.long}"]
                if l["tokens"] > s["tokens"]:
                    slope = (l["wall_ms"] - s["wall_ms"]) / (l["tokens"] - s["tokens"])
                    row[f"{m}_ms_per_token"] = round(slope, 2)
                    row[f"{m}_overhead_ms"] = round(s["wall_ms"] - s["tokens"] * slope, 1)
            raw.append(row)
            print(f"{i + 1}/{len(tasks)} {t['id']}: " + ", ".join(
                f"{m} {row.get(f'{m}_ms_per_token', float('nan')):.1f}" for m in modes) + ("" if full else " (not counted)"),
                flush=True)
    finally:
        for daemon in (specd, *extra):
            daemon.stop()
        if llama is not None:
            llama.stop()
    counted = [r for r in raw if r["counted"]]
    summary: dict = {"machine": machine_info(), "threads": args.threads, "isa_cap": args.isa_cap,
                     "llama_cmake_flags": bins.info.get("cmake_flags") if bins is not None else None,
                     "command": " ".join(sys.argv), "tasks": len(raw), "counted": len(counted), "modes": {}}
    for m in modes:
        v = sorted(r[f"{m}_ms_per_token"] for r in counted)
        o = [r[f"{m}_overhead_ms"] for r in counted]
        summary["modes"][m] = {"ms_per_token_median": round(statistics.median(v), 2) if v else None,
                               "p10": round(percentile(v, 10), 2) if v else None, "p90": round(percentile(v, 90), 2) if v else None,
                               "overhead_ms_median": round(statistics.median(o), 1) if o else None}
        cold = sorted(r[f"{m}_cold"]["wall_ms"] for r in raw if f"{m}_cold" in r)  # every task: no span needed
        if cold:
            summary["modes"][m] |= {"cold_ms_median": round(statistics.median(cold), 1),
                                    "cold_p10": round(percentile(cold, 10), 1), "cold_p90": round(percentile(cold, 90), 1)}
    med = {m: summary["modes"][m]["ms_per_token_median"] for m in modes}
    if med.get("llama") and med.get("target"):
        summary["target / llama"] = round(med["target"] / med["llama"], 3)
    if med.get("llama") and med.get("spec"):
        summary["spec / llama"] = round(med["spec"] / med["llama"], 3)
    if med.get("spec") and med.get("target"):
        summary["target / spec (speedup)"] = round(med["target"] / med["spec"], 3)
        per = [r["target_ms_per_token"] / r["spec_ms_per_token"] for r in counted]
        summary["speedup per task median"] = round(statistics.median(per), 3) if per else None
    for d in extra_modes:
        if med.get(d) and med.get("target"):
            summary[f"target / {d} (speedup)"] = round(med["target"] / med[d], 3)
            per = [r["target_ms_per_token"] / r[f"{d}_ms_per_token"] for r in counted]
            summary[f"{d} speedup per task median"] = round(statistics.median(per), 3) if per else None
        if med.get("llama") and med.get(d):
            summary[f"{d} / llama"] = round(med[d] / med["llama"], 3)
    print(json.dumps(summary, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"summary": summary, "raw": raw}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
