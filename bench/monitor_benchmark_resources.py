#!/usr/bin/env python3
"""Samples the machine and the benchmarked processes while a benchmark runs.

    monitor_benchmark_resources.py --pids 123,456 [--interval 1] --out resources.csv

One CSV row per interval until SIGINT/SIGTERM (or until every pid is gone): CPU busy % per
CPU and in total (/proc/stat), the processes' CPU % (utime+stime), VmRSS, RssAnon/RssFile,
HugetlbPages, threads, read/write bytes (/proc/PID/io), pressure stall averages for cpu,
memory and io (/proc/pressure, when the kernel has PSI), page-cache size, dirty and
writeback, pgmajfault and pswpin/out deltas (/proc/vmstat), and per-NUMA-node free and
file-backed memory (/sys/devices/system/node). Reads only /proc and /sys; no dependency.
"""
import argparse
import glob
import os
import signal
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def cpu_times():
    out = {}
    for line in read("/proc/stat").splitlines():
        if line.startswith("cpu"):
            parts = line.split()
            vals = list(map(int, parts[1:]))
            idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
            out[parts[0]] = (sum(vals), idle)
    return out


def proc_sample(pid):
    stat = read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    s = {"cpu_ticks": int(fields[11]) + int(fields[12])}
    for line in read(f"/proc/{pid}/status").splitlines():
        key, _, val = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "HugetlbPages"):
            s[key] = int(val.split()[0])
        elif key == "Threads":
            s[key] = int(val)
    for line in read(f"/proc/{pid}/io").splitlines():
        key, _, val = line.partition(":")
        if key in ("read_bytes", "write_bytes"):
            s[key] = int(val)
    return s


def pressure():
    out = {}
    for res in ("cpu", "memory", "io"):
        for line in read(f"/proc/pressure/{res}").splitlines():
            kind, *kv = line.split()
            d = dict(x.split("=") for x in kv)
            out[f"psi_{res}_{kind}_avg10"] = d.get("avg10", "")
    return out


def vm():
    want = ("pgmajfault", "pswpin", "pswpout", "nr_dirty", "nr_writeback", "nr_file_pages")
    out = {}
    for line in read("/proc/vmstat").splitlines():
        k, _, v = line.partition(" ")
        if k in want:
            out[k] = int(v)
    return out


def nodes():
    out = {}
    for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*")):
        n = os.path.basename(d)
        for line in read(f"{d}/meminfo").splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("MemFree:", "FilePages:"):
                out[f"{n}_{parts[2][:-1].lower()}_kib"] = int(parts[3])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pids", default="", help="comma-separated pids to follow")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pids = [int(p) for p in args.pids.split(",") if p.strip()]
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    prev_cpu, prev_proc, prev_vm, prev_t = cpu_times(), {}, vm(), time.monotonic()
    for p in pids:
        s = proc_sample(p)
        if s:
            prev_proc[p] = s
    header = None
    with open(args.out, "w") as f:
        while not stop:
            time.sleep(args.interval)
            now = time.monotonic()
            dt = now - prev_t
            row = {"t_s": f"{now:.3f}"}
            cur = cpu_times()
            for name, (total, idle) in sorted(cur.items()):
                pt, pi = prev_cpu.get(name, (total, idle))
                busy = 100.0 * (1 - (idle - pi) / max(1, total - pt))
                row[f"{name}_busy_pct"] = f"{busy:.1f}"
            prev_cpu = cur
            agg = {"cpu_pct": 0.0, "VmRSS": 0, "RssAnon": 0, "RssFile": 0, "HugetlbPages": 0,
                   "Threads": 0, "read_bytes": 0, "write_bytes": 0}
            alive = 0
            for p in pids:
                s = proc_sample(p)
                if not s:
                    continue
                alive += 1
                before = prev_proc.get(p, s)
                agg["cpu_pct"] += 100.0 * (s["cpu_ticks"] - before["cpu_ticks"]) / HZ / dt
                for k in ("VmRSS", "RssAnon", "RssFile", "HugetlbPages", "Threads"):
                    agg[k] += s.get(k, 0)
                for k in ("read_bytes", "write_bytes"):
                    agg[k] += s.get(k, 0) - before.get(k, 0)
                prev_proc[p] = s
            row["procs_alive"] = alive
            row["procs_cpu_pct"] = f"{agg['cpu_pct']:.1f}"
            for k in ("VmRSS", "RssAnon", "RssFile", "HugetlbPages"):
                row[f"procs_{k}_kib"] = agg[k]
            row["procs_threads"] = agg["Threads"]
            row["procs_read_mbs"] = f"{agg['read_bytes'] / dt / 1e6:.1f}"
            row["procs_write_mbs"] = f"{agg['write_bytes'] / dt / 1e6:.1f}"
            row.update(pressure())
            cur_vm = vm()
            for k in ("pgmajfault", "pswpin", "pswpout"):
                row[f"{k}_delta"] = cur_vm.get(k, 0) - prev_vm.get(k, 0)
            for k in ("nr_dirty", "nr_writeback", "nr_file_pages"):
                row[k] = cur_vm.get(k, 0)
            prev_vm = cur_vm
            row.update(nodes())
            if header is None:
                header = list(row)
                f.write(",".join(header) + "\n")
            f.write(",".join(str(row.get(k, "")) for k in header) + "\n")
            f.flush()
            prev_t = now
            if pids and alive == 0:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
