#!/usr/bin/env python3
"""Seed 000's tables from mirror_proxy_benchmark traces (one CSV per cache).

    analyze_mirror_proxy.py [--baseline varnish] [--ceiling-file ceilings.txt] trace-*.csv

First validates that the traces describe the same run: the same request sequence (pass,
order, path, size) for every cache, every request status 200 with all of its declared bytes.
A mismatch is an error (exit 1): the caches were not given the same work. Then, per cache:
TTFB (send -> first response byte) percentiles, request-to-last-byte bandwidth percentiles
in the seed's degradation ordering (p99.9 is the slowest 0.1%: the bandwidth below which
0.1% of requests fall), aggregate payload Gbit/s over the passes, and a ratio column
against --baseline. With --ceiling-file (ceiling_disk_mbs=N ceiling_loopback_mbs=M) the
request-bandwidth p50 is also shown as a share of the lower ceiling.
"""
import argparse
import csv
import math
import sys


def percentile(sorted_values, p):
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not sorted_values:
        return float("nan")
    rank = math.ceil(p / 100.0 * len(sorted_values))
    return sorted_values[min(len(sorted_values) - 1, max(rank, 1) - 1)]


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise SystemExit(f"analyze: {path} has no requests")
    return rows[0]["label"], rows


def summarize(rows):
    ttfb = sorted((int(r["response_first_byte_ns"]) - int(r["query_start_ns"])) / 1e3 for r in rows)
    mbs = []
    for r in rows:
        secs = (int(r["complete_ns"]) - int(r["query_start_ns"])) / 1e9
        mbs.append(int(r["received"]) / secs / 1e6)
    # Degradation ordering: fastest first, so p90 is the bandwidth 90% of requests reach
    # and p99.9 the slow tail (as mirror_proxy_benchmark prints it).
    fast_first = sorted(mbs, reverse=True)
    start = min(int(r["query_start_ns"]) for r in rows)
    end = max(int(r["complete_ns"]) for r in rows)
    total = sum(int(r["received"]) for r in rows)
    return {
        "requests": len(rows),
        "ttfb": {p: percentile(ttfb, p) for p in (50, 90, 99, 99.9)},
        "mbs": {p: percentile(fast_first, p) for p in (50, 90, 99, 99.9)},
        "gbits": total * 8 / ((end - start) / 1e9) / 1e9,
        "bytes": total,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--baseline", default="varnish")
    ap.add_argument("--ceiling-file")
    args = ap.parse_args()
    runs = [load(p) for p in args.traces]
    # The same work for everyone.
    ref_label, ref = runs[0]
    problems = []
    for label, rows in runs:
        seq = [(r["pass"], r["seq"], r["path"], r["size"]) for r in rows]
        ref_seq = [(r["pass"], r["seq"], r["path"], r["size"]) for r in ref]
        if seq != ref_seq:
            problems.append(f"{label}: its request sequence differs from {ref_label}'s")
        bad = [r for r in rows if r["status"] != "200" or r["received"] != r["size"]]
        if bad:
            problems.append(f"{label}: {len(bad)} requests failed or were short "
                            f"(first: {bad[0]['path']} status {bad[0]['status']})")
    if problems:
        for p in problems:
            print(f"analyze: {p}", file=sys.stderr)
        return 1
    ceiling = None
    if args.ceiling_file:
        vals = dict(kv.split("=") for kv in open(args.ceiling_file).read().split())
        disk, loop = float(vals["ceiling_disk_mbs"]), float(vals["ceiling_loopback_mbs"])
        ceiling = min(disk, loop)
    stats = {label: summarize(rows) for label, rows in runs}
    base = stats.get(args.baseline)
    n = len(ref)
    print(f"{n} requests per cache ({len({r['path'] for r in ref})} objects, "
          f"{max(int(r['pass']) for r in ref)} passes); "
          f"{stats[ref_label]['bytes'] / 1e9:.2f} GB per cache; traces match.\n")

    def ratio(mine, theirs, lower_is_better):
        if theirs is None or mine <= 0 or theirs <= 0:
            return "-"
        return f"{(theirs / mine) if lower_is_better else (mine / theirs):.2f}x"

    print("### Time to first byte (us; lower is better)\n")
    print(f"| cache | p50 | p90 | p99 | p99.9 | p50 vs {args.baseline} |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, s in stats.items():
        t = s["ttfb"]
        r = ratio(t[50], base["ttfb"][50] if base else None, True) if label != args.baseline else "-"
        print(f"| {label} | {t[50]:,.1f} | {t[90]:,.1f} | {t[99]:,.1f} | {t[99.9]:,.1f} | {r} |")
    print("\n### Request bandwidth, send to last byte (MB/s; higher is better; p99.9 = slowest 0.1%)\n")
    extra = " | p50 / ceiling" if ceiling else ""
    print(f"| cache | p50 | p90 | p99 | p99.9 | aggregate Gbit/s | p50 vs {args.baseline}{extra} |")
    print("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if ceiling else ""))
    for label, s in stats.items():
        m = s["mbs"]
        r = ratio(m[50], base["mbs"][50] if base else None, False) if label != args.baseline else "-"
        c = f" | {m[50] / ceiling * 100:.0f}%" if ceiling else ""
        print(f"| {label} | {m[50]:,.0f} | {m[90]:,.0f} | {m[99]:,.0f} | {m[99.9]:,.0f} | "
              f"{s['gbits']:.2f} | {r}{c} |")
    if ceiling:
        print(f"\nCeiling: min(O_DIRECT disk {disk:,.0f} MB/s, loopback TCP {loop:,.0f} MB/s) "
              f"= {ceiling:,.0f} MB/s, measured in the same run.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
