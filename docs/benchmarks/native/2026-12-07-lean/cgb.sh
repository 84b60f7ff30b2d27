#!/bin/bash
# core_get_bench, median of 5 repetitions, on CPU 1
B=${1:-/work/main/build/release}
taskset -c 1 $B/bench/core_get_bench --benchmark_repetitions=5 --benchmark_min_time=0.3 --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "median|stddev"
