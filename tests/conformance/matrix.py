"""Prints the conformance matrix (scenario × SDK release) from the results files that
run.sh writes, and with --write FILE replaces the matrix in FILE (docs/compatibility.md)
between its <!-- matrix:begin --> and <!-- matrix:end --> markers.

    python3 tests/conformance/matrix.py [--write docs/compatibility.md] RESULTS.json...

Cells: P passed, F failed, - not applicable to that release (the scenario needs an API the
release does not have, or was removed). Exit status 1 when any cell failed.
"""

import json
import sys


def vkey(v):
    return tuple(int(p) if p.isdigit() else 0 for p in v.split("."))


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    runs.sort(key=lambda r: vkey(r["sdk_version"]))
    return runs


def table(runs, latest):
    versions = [r["sdk_version"] for r in runs]
    order, feature, cells, notes = [], {}, {}, {}
    for r in runs:
        for res in r["results"]:
            t = res["test"]
            if t not in feature:
                order.append(t)
                feature[t] = res["feature"]
            mark = {"passed": "P", "failed": "F", "skipped": "-"}.get(res["outcome"], "F")
            prev = cells.get((t, r["sdk_version"]))
            if prev != "F":  # a failure in any phase wins
                cells[(t, r["sdk_version"])] = mark
            if res["outcome"] == "skipped" and res["reason"]:
                notes.setdefault(t, set()).add(res["reason"])
    head = ["scenario"] + [v + (" (latest)" if v == latest else "") for v in versions]
    rows = []
    for t in order:
        rows.append([feature[t]] + [cells.get((t, v), "?") for v in versions])
    passed = [sum(1 for t in order if cells.get((t, v)) == "P") for v in versions]
    applicable = [sum(1 for t in order if cells.get((t, v)) in ("P", "F")) for v in versions]
    rows.append(["**passed / applicable**"] + [f"{p}/{a}" for p, a in zip(passed, applicable)])
    failed = any(c == "F" for c in cells.values()) or any(cells.get((t, v), "?") == "?" for t in order for v in versions)
    return head, rows, notes, feature, failed


def markdown(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out)


def main(argv):
    write = None
    latest = None
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--write":
            write = argv[i + 1]
            i += 2
        elif argv[i] == "--latest":
            latest = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    runs = load(args)
    head, rows, notes, feature, failed = table(runs, latest)
    md = markdown(head, rows)
    print(md)
    for r in runs:
        measured = {k: v for res in r["results"] for k, v in res.get("measured", {}).items()}
        total = sum(res.get("seconds", 0) for res in r["results"])
        extra = ", ".join(f"{k}={v}" for k, v in sorted(measured.items()))
        print(f"tinker {r['sdk_version']}: scenarios took {total:.1f} s" + (f"; {extra}" if extra else ""))
    if notes:
        print()
        for t, rs in notes.items():
            print(f"- {feature[t]}: not applicable where {'; '.join(sorted(rs))}")
    if write:
        with open(write) as f:
            doc = f.read()
        begin, end = "<!-- matrix:begin -->", "<!-- matrix:end -->"
        if begin not in doc or end not in doc:
            raise SystemExit(f"{write}: no {begin} ... {end} markers")
        body = [md, ""]
        if notes:
            body.append("Not applicable (`-`):")
            body.append("")
            for t, rs in notes.items():
                body.append(f"- {feature[t]}: {'; '.join(sorted(rs))}")
            body.append("")
        doc = doc[: doc.index(begin) + len(begin)] + "\n" + "\n".join(body) + doc[doc.index(end):]
        with open(write, "w") as f:
            f.write(doc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
