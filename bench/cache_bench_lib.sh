# Shared by the benchmark scripts that start caches and servers (sourced, not run):
# stop_pids, wait_port, require_caches. The caller defines PIDS=() (processes it started),
# RUN (its scratch directory) and die().

# Stops every process in PIDS (TERM, up to 10 s, then KILL), and any varnishd child left
# behind under $RUN.
stop_pids() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
  pkill -KILL -f "varnishd.*$RUN" 2>/dev/null || true
}

# Waits up to 30 s for a TCP listener on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Dies unless every cache named is known and installed.
require_caches() {
  local c
  for c in "$@"; do
    case $c in
      goblin) ;;
      varnish) command -v varnishd >/dev/null || die "varnishd not found (apt-get install varnish)" ;;
      nginx) command -v nginx >/dev/null || die "nginx not found (apt-get install nginx-light)" ;;
      *) die "unknown cache $c" ;;
    esac
  done
}
