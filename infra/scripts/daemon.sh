# Functions for the with-*.sh scripts, which run a command beside a real
# server started on a free loopback port and stopped however the command
# ends. Source it; it defines free_port, start_daemon and wait_ready.

# free_port prints a loopback TCP port that is free now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# start_daemon LOG SCRATCH CMD...: starts CMD in its own session with its
# output in LOG, sets daemon_pid, and stops it (the whole session) and
# removes SCRATCH (a file or directory) when the script exits, with every
# other daemon the script started.
daemon_pids=()
daemon_scratch=()
start_daemon() {
  local log=$1 scratch=$2
  shift 2
  setsid "$@" >"$log" 2>&1 &
  daemon_pid=$!
  daemon_pids+=("$daemon_pid")
  daemon_scratch+=("$scratch")
  trap stop_daemon EXIT INT TERM
}

stop_daemon() {
  local pid
  for pid in "${daemon_pids[@]}"; do
    kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
  done
  for pid in "${daemon_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "${daemon_scratch[@]}"
}

# wait_ready NAME LOG PAUSE CHECK...: runs CHECK until it succeeds (at most
# 150 times, PAUSE seconds apart); fails with the daemon's log if the
# daemon exits first.
wait_ready() {
  local name=$1 log=$2 pause=$3
  shift 3
  for _ in $(seq 1 150); do
    if "$@" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$daemon_pid" 2>/dev/null; then
      echo "$name exited at start:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep "$pause"
  done
  echo "$name did not become ready:" >&2
  cat "$log" >&2
  exit 1
}
