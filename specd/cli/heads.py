"""``specd heads``: make the data draft heads train on, train them, report their held-out figures."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from specd.models.registry import cache_root
from specd.engine.config import DEFAULT_TARGET


def _default_dir(target: str) -> Path:
    return cache_root() / "heads" / Path(target).name


def register(subparsers: Any) -> None:
    h = subparsers.add_parser("heads", help="train draft heads (EAGLE, recurrent, Medusa) for a target on this machine")
    hsub = h.add_subparsers(dest="heads_command", required=True)
    d = hsub.add_parser("data", help="run the target over the corpus (specd.heads.corpus) and store what heads "
                                     "train on; resumes where an earlier run stopped")
    d.add_argument("--target", default=DEFAULT_TARGET, help="the target model (default: %(default)s)")
    d.add_argument("--tokens", type=int, default=250_000, help="corpus tokens to store in all (default: %(default)s)")
    d.add_argument("--out", type=Path, help="data directory (default: ~/.cache/specd/heads/TARGET/data, "
                                            "data-fim for --layout fim)")
    d.add_argument("--layout", choices=("plain", "fim"), default="plain",
                   help="plain: corpus windows as they are; fim: the daemon's FIM prompt around a cursor in each "
                        "window (one per file), then the target's own greedy continuation (default: %(default)s)")
    d.set_defaults(func=cmd_data)
    t = hsub.add_parser("train", help="train heads on stored data; writes the heads file and a JSON log beside it")
    t.add_argument("--target", default=DEFAULT_TARGET, help="the target the data came from (default: %(default)s)")
    t.add_argument("--data", type=Path, nargs="+",
                   help="data directories, their windows pooled (default: ~/.cache/specd/heads/TARGET/data)")
    t.add_argument("--init", type=Path, help="eagle: start from this heads file (its sub-vocabulary kept) "
                                             "instead of a fresh head")
    t.add_argument("--kind", choices=("eagle", "recurrent", "medusa"), default="eagle",
                   help="eagle: one decoder layer over the target's features (EAGLE-1); recurrent: one MLP step per "
                        "draft, fed the draft before it (EAGLE's inputs and losses); medusa: K independent heads "
                        "(default: %(default)s)")
    t.add_argument("--out", type=Path, help="heads file (default: ~/.cache/specd/heads/TARGET/KIND.safetensors)")
    t.add_argument("--heads", type=int, default=4, help="medusa: heads; recurrent: draft positions the held-out "
                                                        "figures follow")
    t.add_argument("--width", type=int, default=None, help="eagle, recurrent: the MLP's width (default: 3072, 2048)")
    t.add_argument("--windows", type=int, default=4, help="eagle: windows a training step")
    t.add_argument("--vocab", type=int, default=8192, help="sub-vocabulary rows of the shared head")
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--batch", type=int, default=512)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--eval-every", type=int, default=250)
    t.set_defaults(func=cmd_train)


def cmd_data(args: argparse.Namespace) -> int:
    # imported here: the models load only for the commands that run them
    from specd.heads import data
    from specd.models.loader import load_model

    fim = args.layout == "fim"
    out = args.out or _default_dir(args.target) / ("data-fim" if fim else "data")
    settings = data.DataSettings(args.target, layout=args.layout, windows_per_file=1 if fim else 4)
    model = load_model(args.target, quant="auto", max_len=settings.window)
    manifest = data.make(model.model, model.tokenizer, out, settings, args.tokens,
                         report=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(manifest, indent=1))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from specd.heads import train
    from specd.models.heads import HeadRows, HeadsInfo, MedusaHeads, RecurrentHead, load as load_heads
    from specd.models.loader import resolve

    base = _default_dir(args.target)
    directories = args.data or [base / "data"]
    out = args.out or base / f"{args.kind}.safetensors"
    torch.manual_seed(args.seed)
    report = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.init is not None and args.kind != "eagle":
        raise SystemExit("specd heads train: --init starts an EAGLE head only")
    train_split, val = train.load(directories, args.heads)
    source = resolve(args.target)
    if source.gguf is None:
        raise SystemExit("specd heads train: the shared head rows are read from the target's GGUF file; "
                         f"{args.target} is not a GGUF model")
    embed_rows = HeadRows(source.gguf, embedding=True)
    start = None
    if args.init is not None:
        start = load_heads(args.init, HeadRows(source.gguf), embed_rows)
        ids = start.ids
        covered = float(torch.isin(train_split.labels[:, 0], ids).float().mean())
    else:
        ids, covered = train.sub_vocabulary(train_split, args.vocab)
    report(f"heads train: {train_split.hidden.shape[0]} training positions, {val.hidden.shape[0]} held out; "
           f"the {ids.numel()}-token sub-vocabulary covers {covered:.1%} of the target's greedy tokens")
    rows = start.head if start is not None else HeadRows(source.gguf)(ids)  # [V', H]: --init read them
    head: MedusaHeads | RecurrentHead | EagleHead
    settings: object
    if args.kind == "eagle":
        from specd.heads.train_eagle import EagleSettings, train_eagle
        from specd.models.eagle import EagleHead, EagleShape

        settings = EagleSettings(width=args.width or 3072, vocab=args.vocab, steps=args.steps, windows=args.windows,
                                 lr=args.lr, seed=args.seed, eval_every=args.eval_every, chain=args.heads)
        if start is not None:
            if not isinstance(start, EagleHead):
                raise SystemExit(f"specd heads train: {args.init} is not an EAGLE head")
            head = start
            settings = replace(settings, width=start.shape.width, vocab=int(ids.numel()))
        else:
            head = EagleHead(EagleShape(int(rows.shape[1]), width=settings.width), rows, ids, embed_rows)
        log = train_eagle(head, train_split, val, train.Embeddings(embed_rows, train_split, val), settings, report)
        size = settings.width
    elif args.kind == "recurrent":
        settings = train.RecurrentSettings(width=args.width or 2048, vocab=args.vocab, steps=args.steps,
                                           batch=args.batch, lr=args.lr, seed=args.seed,
                                           eval_every=args.eval_every, chain=args.heads)
        head = RecurrentHead(int(rows.shape[1]), settings.width, rows, ids, embed_rows)
        log = train.train_recurrent(head, train_split, val, train.Embeddings(embed_rows, train_split, val),
                                    settings, report)
        size = settings.width
    else:
        settings = train.TrainSettings(heads=args.heads, vocab=args.vocab, steps=args.steps, batch=args.batch,
                                       lr=args.lr, seed=args.seed, eval_every=args.eval_every)
        head = MedusaHeads(args.heads, rows, ids)
        log = train.train(head, train_split, val, settings, report)
        size = args.heads
    manifests = [json.loads((d / "manifest.json").read_text()) for d in directories]
    manifest = manifests[0] if len(manifests) == 1 else manifests
    init = f"; started from {args.init}" if args.init is not None else ""
    info = HeadsInfo(target=args.target, target_sha256=source.sha256, heads=size, hidden=int(rows.shape[1]),
                     vocab=int(ids.numel()), trained_tokens=int(train_split.hidden.shape[0]),
                     notes=f"specd heads train --kind {args.kind} {json.dumps(settings.__dict__)}{init}; "
                           f"data {[m['settings'] for m in manifests]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    head.save(out, info)
    record = {"heads": str(out), "kind": args.kind, "info": info.__dict__,
              "sub_vocabulary_coverage": round(covered, 4), "data": manifest, "log": log}
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    print(json.dumps(log[-1]["held_out"], indent=1))
    report(f"heads train: wrote {out}. The held-out figures count positions where the corpus follows the "
           "target's greedy tokens, which overstates decoding (0.58 there, 0.47 in decoding, for session 19's "
           f"EAGLE head); decoding's own figure: python bench/heads_acceptance.py --heads {out}")
    return 0
