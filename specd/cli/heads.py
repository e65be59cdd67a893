"""``specd heads``: make the data draft heads train on, train them, report their held-out figures."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from specd.heads import corpus
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
    d.add_argument("--layout", choices=("plain", "fim"), default=None,
                   help="plain: corpus windows as they are; fim: the daemon's FIM prompt around a cursor in each "
                        "window (one per file; up to 8 a file with --repo), then the target's own greedy "
                        "continuation (default: plain; fim with --repo)")
    d.add_argument("--repo", type=Path, help="a repository of your own instead of the corpus: its source files "
                                             "(git's tracked ones where it is a git work tree), 10%% held out")
    d.add_argument("--sources", type=_sources, default=None,
                   help="the corpus's sources, comma-separated, of: " + ", ".join(corpus.SOURCES)
                        + " (specd.heads.corpus; default: " + ",".join(corpus.CLASSIC) + ")")
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
    t.add_argument("--repo", type=Path,
                   help="fine-tune the EAGLE head on a repository of your own: store its data (resumes; made again "
                        "when the files changed), start from the target's shipped head (or --init), keep the "
                        "parameters that draft best on the repository's held-out files, and write "
                        "~/.cache/specd/heads/TARGET/repos/NAME/eagle.safetensors for specd serve --heads")
    t.add_argument("--tokens", type=int, default=300_000,
                   help="--repo: repository tokens to store at most (default: %(default)s)")
    t.add_argument("--out", type=Path, help="heads file (default: ~/.cache/specd/heads/TARGET/KIND.safetensors)")
    t.add_argument("--heads", type=int, default=4, help="medusa: heads; recurrent: draft positions the held-out "
                                                        "figures follow")
    t.add_argument("--width", type=int, default=None, help="eagle, recurrent: the MLP's width (default: 3072, 2048)")
    t.add_argument("--windows", type=int, default=4, help="eagle: windows a training step")
    t.add_argument("--vocab", type=int, default=8192, help="sub-vocabulary rows of the shared head")
    t.add_argument("--extra-vocab", type=int, default=None,
                   help="eagle with --init or --repo: add the N tokens the target most often predicts on the data "
                        "that the head's sub-vocabulary lacks (default: 1024 with --repo, else 0)")
    t.add_argument("--steps", type=int, default=None, help="default: 1500; 600 with --repo")
    t.add_argument("--batch", type=int, default=512)
    t.add_argument("--lr", type=float, default=None, help="default: 1e-3; 2e-4 with --repo")
    t.add_argument("--ce-weight", type=float, default=0.1,
                   help="medusa: the cross-entropy's weight in the loss, beside the feature regression's")
    t.add_argument("--feature-weight", type=float, default=1.0,
                   help="medusa: the feature regression's weight (0: cross-entropy alone, as Medusa-1 trains)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--eval-every", type=int, default=None, help="default: 250; 100 with --repo")
    t.set_defaults(func=cmd_train)


def _sources(text: str) -> tuple[str, ...]:
    try:
        return corpus.check_sources(tuple(s.strip() for s in text.split(",") if s.strip()))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _repo_dir(target: str, root: Path) -> Path:
    from specd.heads import repo

    return _default_dir(target) / "repos" / repo.name_of(root)


def _make_data(target: str, out: Path | None, layout: str | None, root: Path | None, tokens: int,
               sources: tuple[str, ...] | None = None) -> tuple[Path, dict]:
    """Store the data (``specd.heads.data``) for the corpus or the repository at ``root``; returns
    (its directory, its manifest). A repository's data whose files changed since is made again."""
    # imported here: the models load only for the commands that run them
    from specd.heads import data, repo
    from specd.models.loader import load_model

    report = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    layout = layout or ("fim" if root is not None else "plain")
    fim = layout == "fim"
    per_file = (repo.WINDOWS_PER_FILE if root is not None else 1) if fim else 4
    if root is None:
        out = out or _default_dir(target) / ("data-fim" if fim else "data")
        settings = data.DataSettings(target, layout=layout, windows_per_file=per_file,
                                     sources=sources or corpus.CLASSIC)
    else:
        if sources:
            raise repo.RepoError("--sources names parts of the corpus; with --repo the data is your repository's")
        root = root.expanduser().resolve()
        found = repo.files(root)  # RepoError before a model loads
        out = out or _repo_dir(target, root) / f"data-{layout}"
        settings = data.DataSettings(target, layout=layout, windows_per_file=per_file, repo=str(root))
        if data.discard_if_changed(out, repo.fingerprint(found)):
            report(f"heads data: {root}'s files changed since its data was stored; storing it again")
        report(f"heads data: {root}: " + ", ".join(f"{len(v)} {k} files" for k, v in sorted(found.items()))
               + f", {sum(f.validation for v in found.values() for f in v)} of them held out")
    model = load_model(target, quant="auto", max_len=settings.window)
    manifest = data.make(model.model, model.tokenizer, out, settings, tokens, report=report)
    return out, manifest


def cmd_data(args: argparse.Namespace) -> int:
    from specd.heads.repo import RepoError

    try:
        _, manifest = _make_data(args.target, args.out, args.layout, args.repo, args.tokens, args.sources)
    except RepoError as e:
        raise SystemExit(f"specd heads data: {e}")
    print(json.dumps(manifest, indent=1))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from specd.heads import train
    from specd.heads.repo import RepoError
    from specd.heads.train_eagle import EagleSettings, evaluate_eagle, train_eagle
    from specd.models.eagle import EagleHead, EagleShape
    from specd.models.heads import HeadRows, HeadsInfo, MedusaHeads, RecurrentHead, load as load_heads, shipped
    from specd.models.loader import resolve

    base = _default_dir(args.target)
    report = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    tuning = args.repo is not None
    if args.init is not None and args.kind != "eagle":
        raise SystemExit("specd heads train: --init starts an EAGLE head only")
    if args.ce_weight <= 0 and args.feature_weight <= 0:
        raise SystemExit("specd heads train: --ce-weight and --feature-weight are both 0: nothing to train on")
    if tuning:
        if args.kind != "eagle" or args.data:
            raise SystemExit("specd heads train: --repo fine-tunes an EAGLE head on the repository's own data "
                             "(no --kind other than eagle, no --data)")
        if args.init is None:
            args.init = shipped(Path(args.target).name)
            if args.init is None:
                raise SystemExit(f"specd heads train: no head is shipped for {args.target} to start from; "
                                 "train one (specd heads data, specd heads train) and pass it as --init")
        try:
            data_dir, _ = _make_data(args.target, None, "fim", args.repo, args.tokens)
        except RepoError as e:
            raise SystemExit(f"specd heads train: {e}")
        directories = [data_dir]
        out = args.out or data_dir.parent / "eagle.safetensors"
    else:
        directories = args.data or [base / "data"]
        out = args.out or base / f"{args.kind}.safetensors"
    steps = args.steps or (600 if tuning else 1500)
    lr = args.lr or (2e-4 if tuning else 1e-3)
    eval_every = args.eval_every or (100 if tuning else 250)
    torch.manual_seed(args.seed)
    train_split, val = train.load(directories, args.heads)
    source = resolve(args.target)
    if source.gguf is None:
        raise SystemExit("specd heads train: the shared head rows are read from the target's GGUF file; "
                         f"{args.target} is not a GGUF model")
    head_rows, embed_rows = HeadRows(source.gguf), HeadRows(source.gguf, embedding=True)
    # the target's embedding rows of the data's tokens, read once (a Medusa head reads none)
    embed = train.Embeddings(embed_rows, train_split, val) if args.kind != "medusa" else None
    start = None
    baseline: dict | None = None
    if args.init is not None:
        start = load_heads(args.init, head_rows, embed_rows)
        ids = start.ids
        extra = args.extra_vocab if args.extra_vocab is not None else (1024 if tuning else 0)
        if tuning and isinstance(start, EagleHead):  # what the head it starts from drafts, as it is
            baseline = evaluate_eagle(start, val, embed, args.heads)
            report(f"heads train: {args.init} as it is: held-out draft chain {baseline['decoding']['chain']}")
        if extra and isinstance(start, EagleHead):
            was = float(torch.isin(train_split.labels[:, 0], ids).float().mean())
            ids = train.widen_vocabulary(ids, train_split, extra)
            report(f"heads train: {ids.numel() - start.ids.numel()} tokens added to {args.init}'s "
                   f"sub-vocabulary, which covered {was:.1%} of the target's greedy tokens on the data")
            start = start.with_vocabulary(head_rows(ids), ids)
        covered = float(torch.isin(train_split.labels[:, 0], ids).float().mean())
    else:
        ids, covered = train.sub_vocabulary(train_split, args.vocab)
    report(f"heads train: {train_split.hidden.shape[0]} training positions, {val.hidden.shape[0]} held out; "
           f"the {ids.numel()}-token sub-vocabulary covers {covered:.1%} of the target's greedy tokens")
    rows = start.head if start is not None else head_rows(ids)  # [V', H]: --init read them
    head: MedusaHeads | RecurrentHead | EagleHead
    settings: object
    if args.kind == "eagle":
        settings = EagleSettings(width=args.width or 3072, vocab=args.vocab, steps=steps, windows=args.windows,
                                 lr=lr, seed=args.seed, eval_every=eval_every, chain=args.heads, keep_best=tuning)
        if start is not None:
            if not isinstance(start, EagleHead):
                raise SystemExit(f"specd heads train: {args.init} is not an EAGLE head")
            head = start
            settings = replace(settings, width=start.shape.width, vocab=int(ids.numel()))
        else:
            head = EagleHead(EagleShape(int(rows.shape[1]), width=settings.width), rows, ids, embed_rows)
        log = train_eagle(head, train_split, val, embed, settings, report)
        size = settings.width
    elif args.kind == "recurrent":
        settings = train.RecurrentSettings(width=args.width or 2048, vocab=args.vocab, steps=steps,
                                           batch=args.batch, lr=lr, seed=args.seed,
                                           eval_every=eval_every, chain=args.heads)
        head = RecurrentHead(int(rows.shape[1]), settings.width, rows, ids, embed_rows)
        log = train.train_recurrent(head, train_split, val, embed, settings, report)
        size = settings.width
    else:
        settings = train.TrainSettings(heads=args.heads, vocab=args.vocab, steps=steps, batch=args.batch,
                                       lr=lr, seed=args.seed, eval_every=eval_every, ce_weight=args.ce_weight,
                                       feature_weight=args.feature_weight)
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
    record = {"heads": str(out), "kind": args.kind, "info": info.__dict__,
              "sub_vocabulary_coverage": round(covered, 4), "data": manifest, "start": baseline, "log": log}
    print(json.dumps(log[-1]["held_out"], indent=1))
    if tuning and baseline is not None and train.expected_drafts(log[-1]["held_out"]) <= train.expected_drafts(baseline):
        out.with_suffix(".json").write_text(json.dumps(record | {"heads": None}, indent=1))
        report(f"heads train: no step drafted better than {args.init} on {args.repo}'s held-out files; nothing "
               f"written (the log: {out.with_suffix('.json')}). Keep that head, or try --steps or --lr.")
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    head.save(out, info)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1))
    if tuning and baseline is not None:
        before, after = train.expected_drafts(baseline), train.expected_drafts(log[-1]["held_out"])
        report(f"heads train: wrote {out}: on {args.repo}'s held-out files a round's accepted drafts go from "
               f"{before:.3f} to {after:.3f} (first draft {baseline['decoding']['chain'][0]:.3f} -> "
               f"{log[-1]['held_out']['decoding']['chain'][0]:.3f}). Use it: specd serve --drafter heads+ngram "
               f"--heads {out} (or specd lsp ... --heads {out})")
        return 0
    report(f"heads train: wrote {out}. The held-out figures count positions where the corpus follows the "
           "target's greedy tokens, which overstates decoding (0.58 there, 0.47 in decoding, for session 19's "
           f"EAGLE head); decoding's own figure: python bench/heads_acceptance.py --heads {out}")
    return 0
