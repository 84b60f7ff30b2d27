#!/usr/bin/env bash
# The README's test command: installs what is needed, builds Release, the ASan+UBSan build
# (clang),
# the ThreadSanitizer build and the libFuzzer build, and runs the test suite in each (the
# TSan build runs the threaded parts: rings, server loop, system tests); then the rdma
# tests for real in a Soft-RoCE qemu guest, with the release build's goblin-core (built for
# -march=x86-64-v2, a CPU the emulator provides; build/rdma only when "rdma" runs without
# "release"). The Ansible deployment test (label ansible: minutes of ssh and python, a
# quarter of one CPU) runs in the background from the end of the release tests while the
# next builds compile (ASan, then TSan), and is waited for before the next tests start. Exit status is
# non-zero when anything fails; each phase prints its time.
# Build trees: build/release, build/asan, build/tsan, build/fuzz (build/rdma).
#   GOBLIN_TEST_SKIP_DEPS=1   do not call scripts/install-deps.sh
#   GOBLIN_TEST_BUILDS="release asan tsan fuzz rdma"   which builds to make and test
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

[[ ${GOBLIN_TEST_SKIP_DEPS:-0} == 1 ]] || ./scripts/install-deps.sh
builds=${GOBLIN_TEST_BUILDS:-release asan tsan fuzz rdma}
jobs=$(nproc)
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the clone and the working directory left out of the hash: a clone in
# another directory (every CI run) hits the objects an earlier clone compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$root/scripts/tsan.supp}
# Tests get their own scratch space (sockets, tier directories) under build/; cleaned first.
export GOBLIN_TEST_TMPDIR=$root/build/test-tmp
rm -rf "$GOBLIN_TEST_TMPDIR"; mkdir -p "$GOBLIN_TEST_TMPDIR"

configure() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"; echo "test: cmake configure of $dir failed" >&2; exit 1; }
}

total_pass=0 total_fail=0 failed_builds=() failed_logs=()
count_results() {  # name, ctest log, ctest exit status: adds the log's counts to the totals
  local name=$1 log=$2 rc=$3 line pass=0 fail=0 total=0
  line=$(grep -E '[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)
  if [[ -n $line ]]; then
    fail=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
    total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<<"$line")
    pass=$((total - fail))
  fi
  total_pass=$((total_pass + pass)); total_fail=$((total_fail + fail))
  if [[ $rc -ne 0 || -z $line ]]; then failed_builds+=("$name"); failed_logs+=("$log"); fi
}
# At the very end (CI shows the tail of the output): which tests failed, and the last lines of
# each one's own output.
report_failures() {  # ctest log
  local log=$1
  echo "== failed in $log:"
  awk '/^ *Start +[0-9]+:|^[0-9]+\/[0-9]+ Test +#/ { if (keep) print_block(); keep = 0; n = 0 }
       /^[0-9]+\/[0-9]+ Test +#.*\*\*\*(Failed|Timeout|Exception|Not Run)/ { keep = 1 }
       keep { buf[n++] = $0 }
       function print_block(  i) { for (i = (n > 40 ? n - 40 : 0); i < n; i++) print buf[i] }
       END { if (keep) print_block() }' "$log" | tail -n 120
  sed -n '/The following tests FAILED/,/^$/p' "$log" | grep -v '(Skipped)' | head -40
}
# The ansible tests of the release build, in the background (see the header).
bg_pid=0 bg_log="" bg_name=""
start_background_ctest() {  # name, dir, ctest args...
  local name=$1 dir=$2; shift 2
  bg_log=$dir/ctest-$name.log
  echo "== ctest ($name, in the background)"
  (ctest --test-dir "$dir" --output-on-failure -j1 --timeout 1200 "$@" >"$bg_log" 2>&1) &
  bg_pid=$!
  bg_name=$name
}
wait_background_ctest() {
  ((bg_pid)) || return 0
  local rc=0
  wait "$bg_pid" || rc=$?
  bg_pid=0
  echo "== ctest ($bg_name, from the background)"
  cat "$bg_log"
  count_results "$bg_name" "$bg_log" "$rc"
  phase_done "$bg_name tests (waited for)"
}

run_ctest() {  # name, dir, ctest args... (after the background tests: they share the CPUs)
  local name=$1 dir=$2; shift 2
  wait_background_ctest
  echo "== ctest ($name)"
  local log=$dir/ctest-$name.log rc=0  # (one per phase: rdma runs in build/release too)
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 "$@" 2>&1 | tee "$log" || rc=$?
  count_results "$name" "$log" "$rc"
}

phase_start=$SECONDS
phase_done() {  # what
  echo "== $1: $((SECONDS - phase_start)) s (total $((SECONDS / 60)) min $((SECONDS % 60)) s)"
  phase_start=$SECONDS
}
tsan_built=0
build_tsan() {  # (once: before the ASan tests when the Ansible test runs beside it)
  ((tsan_built)) && return 0
  tsan_built=1
  configure build/tsan -DCMAKE_BUILD_TYPE=Tsan -DGOBLIN_BUILD_BENCH=OFF
  # Only what the TSan run tests (the threaded parts), and the programs they start.
  echo "== build (tsan)"
  # (The h2/TLS workers' tests, https_test and http2_test, were TSan-clean and are left
  # out to keep CI under 45 minutes: the HTTP workers' threads are covered by
  # http_mirror_test, access_log_test and metrics_test.)
  cmake --build build/tsan -j"$jobs" --target ring_test admin_unit_test store_test \
    admin_test core_system_test http_mirror_test access_log_test metrics_test etcd_test \
    goblin-core goblin goblinctl goblin-gateway
  phase_done "tsan build"
}
released=0
mkdir -p build
for b in $builds; do
  case $b in
    release)
      configure build/release -DCMAKE_BUILD_TYPE=Release -DGOBLIN_ARCH=x86-64-v2 \
        -DGOBLIN_RDMA_VM_TEST=ON
      echo "== build (release)"; cmake --build build/release -j"$jobs"
      phase_done "release build"
      run_ctest release build/release -LE 'rdma-vm|ansible'
      phase_done "release tests"
      start_background_ctest ansible build/release -L ansible
      released=1 ;;
    asan)
      # clang: it compiles the ASan+UBSan build faster than gcc (gateway/src/http_fill.cpp:
      # 7.5 s against 11.1 s; the whole build in a fresh-clone CI run on this 2-CPU VM, cold
      # ccache, the ansible test beside it: 999 s against gcc's 1,104 s in the run before);
      # gcc still builds Release and TSan, so both compilers see every file.
      CC=clang-16 CXX=clang++-16 configure build/asan -DCMAKE_BUILD_TYPE=Asan \
        -DGOBLIN_BUILD_BENCH=OFF
      echo "== build (asan+ubsan)"; cmake --build build/asan -j"$jobs"
      phase_done "asan build"
      # The Ansible test is still going: the TSan build next (compiling), not tests.
      if ((bg_pid)) && [[ " $builds " == *" tsan "* ]]; then build_tsan; fi
      run_ctest asan build/asan -LE slow
      phase_done "asan tests" ;;
    tsan)
      build_tsan
      # UCX's mmap/madvise hooks (libucm) take a lock TSan has already torn down when a
      # thread exits (glibc madvises its stack): a segfault at every thread exit under TSan.
      UCX_MEM_MMAP_HOOK_MODE=none \
        run_ctest tsan build/tsan -L 'unit|system' -R 'SpscRing|Channel|RingServer|LoopWakeFd|CoreSystem|LoopExecutor|AdminTest|IndexTest|StoreTest.*(GroupCommit|Durable)|HttpMirrorShards|HttpMirror.ParallelMissesOnSeveralWorkers|AccessLog.WorkersWriteOneFile|Metrics.CoreAndGateway|Metrics.MemcacheAndResp|Etcd'
      phase_done "tsan tests" ;;
    fuzz)
      CC=clang-16 CXX=clang++-16 configure build/fuzz -DCMAKE_BUILD_TYPE=Fuzz -DGOBLIN_FUZZ_ONLY=ON
      echo "== build (libFuzzer)"; cmake --build build/fuzz -j"$jobs"
      phase_done "fuzz build"
      run_ctest fuzz build/fuzz
      phase_done "fuzz runs" ;;
    rdma)
      if ((released)); then  # the release build is made for the guest's CPU: reuse it
        run_ctest rdma build/release -L rdma-vm
        phase_done "rdma guest tests"
        continue
      fi
      configure build/rdma -DCMAKE_BUILD_TYPE=Release -DGOBLIN_ARCH=x86-64-v2 \
        -DGOBLIN_BUILD_BENCH=OFF -DGOBLIN_RDMA_VM_TEST=ON
      echo "== build (rdma guest)"; cmake --build build/rdma -j"$jobs" --target goblin-core goblin-gateway rdma_plane_test verbs_smoke_test ktls_test
      run_ctest rdma build/rdma -L rdma-vm
      phase_done "rdma guest build and tests" ;;
    *) echo "test: unknown build '$b'" >&2; exit 2 ;;
  esac
done

wait_background_ctest  # (when nothing came after the release build)
echo
if ((${#failed_builds[@]})); then
  for log in "${failed_logs[@]}"; do report_failures "$log"; done
  echo "test: FAILED in: ${failed_builds[*]}"
fi
echo "goblin: $total_pass passed, $total_fail failed"
((${#failed_builds[@]} == 0))
