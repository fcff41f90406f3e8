"""Which serializer the one-row-per-step store should use: stdlib ``json``, ``orjson``, ``msgspec``.

    .venv/bin/python bench/serializer.py [--steps 400] [--repeats 15] [--no-peers]

The rows are real: two runs of ``bench/step_overhead.py``'s no-op loop (``think`` steps, and the
external-effect variant) with an ``SQLiteStore`` attached, and every text its ``steps`` table holds, by
shape: the step record (``harness_lab.persistence.row_text.dump_step_row``), the checkpoint, the context change log
(``ContextManager.take_changes``) and the whole context state (every ``FULL_EVERY`` steps). Each text is
read back to plain data (``json.loads``) and each serializer encodes that data and decodes its own
output, µs of CPU time per row (median of ``--repeats`` passes over all rows, the serializers interleaved
within a pass, the garbage collector off while timing, as ``timeit`` does) and bytes per row; every round trip is checked to give the data back. ``pydantic_core``
(``to_json``/``from_json``, what the runtime spells rows with today) is shown for reference.

``orjson``, ``msgspec`` and ``pydantic-core`` are installed by this script into a venv of its own under
``~/.cache/harness-lab-bench`` (never into the project), where a worker process times all of them on the
same interpreter; ``--no-peers`` times the standard library in this process only.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from step_overhead import bench_venv, noop_run, sqlite_store_class  # noqa: E402

PACKAGES = ["orjson", "msgspec", "pydantic-core"]
SHAPES = ("step record", "checkpoint", "context change log", "context full state")

# Times every serializer the interpreter has on the rows in argv[1] (JSON: shape -> list of texts).
_WORKER = r'''
import gc, json, sys, time
# stdlib json at its best: one encoder made once (json.dumps with options makes one per call), compact
# and UTF-8 as the others write; decoded from bytes, as the others are
_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
codecs = {"json": (lambda d: _json(d).encode(), json.loads)}
try:
    import orjson
    codecs["orjson"] = (orjson.dumps, orjson.loads)
except ImportError:
    pass
try:
    import msgspec
    enc, dec = msgspec.json.Encoder(), msgspec.json.Decoder()
    codecs["msgspec"] = (enc.encode, dec.decode)
except ImportError:
    pass
try:
    import pydantic_core
    codecs["pydantic_core"] = (pydantic_core.to_json, pydantic_core.from_json)
except ImportError:
    pass
rows = json.load(open(sys.argv[1]))
repeats = int(sys.argv[2])
out = {}
for shape, texts in rows.items():
    data = [json.loads(t) for t in texts]
    times = {name: {"encode": [], "decode": []} for name in codecs}
    sizes = {}
    for name, (encode, decode) in codecs.items():
        blobs = [encode(d) for d in data]
        back = [decode(b) for b in blobs]
        assert back == data, f"{name}: a {shape} row does not read back the same"
        sizes[name] = sum(len(b) for b in blobs) / len(blobs)
    order = list(codecs)
    gc.disable()  # as timeit does: a collection of the rows held here would land in one codec's pass
    for r in range(repeats):
        for name in order[r % len(order):] + order[:r % len(order)]:  # interleaved, rotating: each pass times every codec
            encode, decode = codecs[name]
            t = time.process_time()
            blobs = [encode(d) for d in data]
            t1 = time.process_time()
            for b in blobs:
                decode(b)
            t2 = time.process_time()
            times[name]["encode"].append((t1 - t) / len(data) * 1e6)
            times[name]["decode"].append((t2 - t1) / len(data) * 1e6)
    gc.enable()
    out[shape] = {"rows": len(data), "codecs": {
        name: {"encode": v["encode"], "decode": v["decode"], "bytes": sizes[name]} for name, v in times.items()}}
import importlib.metadata as md
versions = {}
for pkg in ("orjson", "msgspec", "pydantic-core"):
    try:
        versions[pkg] = md.version(pkg)
    except md.PackageNotFoundError:
        pass
print(json.dumps({"shapes": out, "versions": versions}))
'''


def collect_rows(tmp: Path, steps: int) -> dict[str, list[str]]:
    """Every JSON text two stored no-op runs wrote to their ``steps`` table, by shape."""
    rows: dict[str, list[str]] = {shape: [] for shape in SHAPES}
    for external in (False, True):
        path = tmp / f"rows-{external}.sqlite"
        run = noop_run(tmp / f"ws-{external}", store=sqlite_store_class()(path), external=external)
        for _ in range(steps):
            run.step()
        run.close()
        db = sqlite3.connect(path)
        for record, checkpoint, context in db.execute("SELECT record, checkpoint, context FROM steps ORDER BY id"):
            if record and record != "null":
                rows["step record"].append(record)
            if checkpoint:
                rows["checkpoint"].append(checkpoint)
            if context:
                kind = json.loads(context).get("kind")
                rows["context full state" if kind == "context_state" else "context change log"].append(context)
        db.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400, help="steps per run (two runs)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--no-peers", action="store_true", help="the standard library only, in this process")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-lab-serializer-") as d:
        tmp = Path(d)
        rows = collect_rows(tmp, args.steps)
        (tmp / "rows.json").write_text(json.dumps(rows), encoding="utf-8")
        python = sys.executable if args.no_peers else str(bench_venv("serializer-venv", PACKAGES))
        out = subprocess.run([python, "-c", _WORKER, str(tmp / "rows.json"), str(args.repeats)],
                             capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    shapes = result["shapes"]
    names = list(next(iter(shapes.values()))["codecs"])
    print(f"serializers on real row shapes ({2 * args.steps} steps of two stored no-op runs); "
          f"CPU µs per row, median of {args.repeats} interleaved passes; bytes per row "
          f"({', '.join(f'{k} {v}' for k, v in result['versions'].items()) or 'stdlib only'})")
    print(f"  {'shape':<20} {'rows':>5} {'codec':<14} {'encode':>8} {'decode':>8} {'bytes':>8}"
          f"   {'enc+dec vs json':>15}")
    med = statistics.median
    for shape, s in shapes.items():
        j = s["codecs"]["json"]
        base = med(j["encode"]) + med(j["decode"])
        for name in names:
            c = s["codecs"][name]
            both = med(c["encode"]) + med(c["decode"])
            print(f"  {shape:<20} {s['rows']:>5} {name:<14} {med(c['encode']):8.2f} {med(c['decode']):8.2f} "
                  f"{c['bytes']:8.0f}   {base / both:14.2f}x")
    # A step writes a record, a checkpoint and a context change log or (every FULL_EVERY steps) the
    # whole state: the shapes weighted by how often rows of each were written, pass by pass (the codecs
    # of one pass ran side by side, so their ratio is taken within the pass).
    context = sum(shapes[shape]["rows"] for shape in ("context change log", "context full state")) or 1
    weight = {shape: 1.0 if shape in ("step record", "checkpoint") else s["rows"] / context
              for shape, s in shapes.items()}
    passes = len(next(iter(shapes.values()))["codecs"]["json"]["encode"])
    per_step = {op: {name: [sum(weight[shape] * s["codecs"][name][op][i] for shape, s in shapes.items())
                            for i in range(passes)] for name in names} for op in ("encode", "decode")}

    def ratio(op: str, top: str, bottom: str) -> str:
        r = [a / b for a, b in zip(per_step[op][top], per_step[op][bottom], strict=True)]
        return f"{med(r):5.2f}x ({min(r):.2f}-{max(r):.2f})"

    print("per stored step (a record, a checkpoint and its context text, weighted as written); "
          "ratios: median of the passes' (range)")
    print(f"  {'codec':<14} {'encode (write path)':>20} {'json / it':>20}   {'decode (restore)':>18} {'json / it':>20}")
    for name in names:
        print(f"  {name:<14} {med(per_step['encode'][name]):17.2f} µs {ratio('encode', 'json', name):>20}   "
              f"{med(per_step['decode'][name]):15.2f} µs {ratio('decode', 'json', name):>20}")
    for op in ("encode", "decode"):
        best = min(names, key=lambda n: med(per_step[op][n]))
        others = [n for n in names if n != best]
        print(f"winner, {op}: {best}" + "".join(f"; {n} / {best} {ratio(op, n, best)}" for n in others))


if __name__ == "__main__":
    main()
