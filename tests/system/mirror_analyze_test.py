#!/usr/bin/env python3
"""bench/analyze_mirror_proxy.py on synthetic traces: percentiles in the seed's ordering,
ratios against the baseline, the share of the ceiling, and refusal of traces that do not
describe the same run (another sequence, a failed or short request)."""
import os
import subprocess
import sys
import tempfile

ANALYZE = os.path.join(sys.argv[1], "bench", "analyze_mirror_proxy.py")
HEAD = ("label,pass,seq,path,size,status,query_start_ns,response_first_byte_ns,"
        "body_first_byte_ns,complete_ns,received\n")


def trace(d, label, ttfb_us, secs, status=200, short=False, swap=False):
    path = os.path.join(d, f"trace-{label}.csv")
    t = 1_000_000_000
    with open(path, "w") as f:
        f.write(HEAD)
        for k in range(10):
            obj = f"/files/obj-{(k + 1) % 10 if swap else k}.bin"
            size = 100_000_000
            got = size // 2 if short and k == 3 else size
            f.write(f"{label},1,{k},{obj},{size},{status},{t},{t + int(ttfb_us[k] * 1000)},"
                    f"{t + int(ttfb_us[k] * 1000) + 1},{t + int(secs[k] * 1e9)},{got}\n")
            t += int(secs[k] * 1e9) + 1000
    return path


def run(*args):
    return subprocess.run([sys.executable, ANALYZE, *args], capture_output=True, text=True)


def main():
    with tempfile.TemporaryDirectory() as d:
        # varnish: TTFB 10 ms, 0.2 s per 100 MB (500 MB/s); goblin 10x faster first bytes,
        # 0.1 s (1,000 MB/s) except one slow request (0.5 s: 200 MB/s).
        v = trace(d, "varnish", [10_000] * 10, [0.2] * 10)
        g = trace(d, "goblin", [1_000] * 10, [0.1] * 9 + [0.5])
        ceil = os.path.join(d, "ceilings.txt")
        open(ceil, "w").write("ceiling_disk_mbs=1250 ceiling_loopback_mbs=3000\n")
        r = run("--baseline", "varnish", "--ceiling-file", ceil, v, g)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert "traces match" in out, out
        assert "| goblin | 1,000.0 | 1,000.0 | 1,000.0 | 1,000.0 | 10.00x |" in out, out
        # fastest first: p50 and p90 1,000 MB/s, p99/p99.9 the slow request's 200 MB/s.
        assert "| goblin | 1,000 | 1,000 | 200 | 200 |" in out, out
        assert "| 2.00x | 80% |" in out, out  # 1,000 / 500 and 1,000 / 1,250
        # Not the same run: refused.
        for bad in (trace(d, "swapped", [1_000] * 10, [0.1] * 10, swap=True),
                    trace(d, "short", [1_000] * 10, [0.1] * 10, short=True),
                    trace(d, "failed", [1_000] * 10, [0.1] * 10, status=503)):
            r = run(v, bad)
            assert r.returncode == 1 and "analyze:" in r.stderr, (bad, r.stdout, r.stderr)
    print("mirror_analyze_test: ok")


if __name__ == "__main__":
    main()
