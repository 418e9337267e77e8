"""Issue 28's own hold-out: the BEFORE errors (the engine before issue 28's physics).

Usage: .venv/bin/python bench/holdout_own_before.py [--check | --write] [--file PATH]

Evaluates every figure of simengine/data/holdout_own.toml with the engine of this tree on
the spec reduced to the pre-issue-28 schema (simengine.holdout.legacy_spec, a mechanical
rule), prints figure, published, predicted and error plus the by-kind summary. --check
compares with the `before_error` values recorded in the file (exit 1 on a difference
> 0.0005); --write records them (only meaningful on the engine before issue 28, i.e. main
at 6b8b00d, where the file was frozen). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simengine.holdout import (  # noqa: E402
    OWN_HOLDOUT_FILE,
    evaluate_own_holdout,
    load_own_holdout,
    summarise_by_kind,
)


def _fmt(v: float | str | None) -> str:
    if v is None:
        return "-"
    return f"{v:+.1%}" if isinstance(v, float) else v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", default=str(OWN_HOLDOUT_FILE))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    result = evaluate_own_holdout(path=args.file, legacy=True)
    before: dict[str, float | str] = {}
    for r in result.rows:
        before[r.id] = round(r.error, 3) if r.error is not None else f"n/a: {r.reason}"
        pred = "-" if r.predicted is None else f"{r.predicted:.4g}"
        print(f"{r.id:40s} {r.published:>10.4g} {pred:>10s} {_fmt(before[r.id])}")
    errs = [abs(v) for v in before.values() if isinstance(v, float)]
    errs.sort()
    mid = len(errs) // 2
    median = errs[mid] if len(errs) % 2 else (errs[mid - 1] + errs[mid]) / 2
    print(f"\n{len(errs)} of {len(before)} expressible: median |error| {median:.1%}, "
          f"max {max(errs):.1%}")  # fmt: skip
    kinds = {f["id"]: f["kind"] for f in load_own_holdout(args.file)}
    for s in summarise_by_kind([(kinds[i], v if isinstance(v, float) else None)
                                for i, v in before.items()]):  # fmt: skip
        med = "-" if s.median_abs_error is None else f"{s.median_abs_error:.1%}"
        mx = "-" if s.max_abs_error is None else f"{s.max_abs_error:.1%}"
        print(f"  {s.dimension}={s.value:10s} n={s.n:2d}  median {med:>7s}  max {mx:>7s}")
    if args.check:
        recorded = {f["id"]: f.get("before_error") for f in load_own_holdout(args.file)}
        bad = [
            i for i, v in before.items()
            if not (isinstance(v, float) and isinstance(recorded[i], float)
                    and abs(v - recorded[i]) <= 0.0005)
            and not (isinstance(v, str) and isinstance(recorded[i], str))
        ]  # fmt: skip
        print("recorded before_error values: " + ("match" if not bad else f"differ: {bad}"))
        return 1 if bad else 0
    if args.write:
        path = Path(args.file)
        text = path.read_text()
        for fid, v in before.items():
            value = f"{v:+.3f}" if isinstance(v, float) else '"' + v.replace('"', "'") + '"'
            block = re.compile(
                r'(id = "' + re.escape(fid) + r'"\n(?:(?!\[\[figure\]\]).*\n)*?)'
                r"(?:before_error = .*\n)?(published = .*\n)"
            )
            text, n = block.subn(lambda m, v=value: m.group(1) + m.group(2)
                                 + f"before_error = {v}\n", text, count=1)  # fmt: skip
            if n != 1:
                raise SystemExit(f"could not place before_error for {fid}")
        path.write_text(text)
        print(f"wrote before_error for {len(before)} figures to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
