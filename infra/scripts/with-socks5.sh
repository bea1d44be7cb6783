#!/usr/bin/env bash
# Runs a command with a real SOCKS5 server (Dante's danted, Debian package
# dante-server) listening on a free loopback port, exported as
# EVS_TEST_SOCKS5=socks5://127.0.0.1:PORT, and stops it however the command
# ends. danted connects out from EVS_TEST_SOCKS5_EXTERNAL (127.0.0.3), so a
# loopback peer sees whether a connection came through the proxy (from
# 127.0.0.3) or directly (from 127.0.0.1). The configuration is the one of
# testkit.DantedConfig; keep them the same.
set -euo pipefail

danted=$(command -v danted || true)
[ -n "$danted" ] || { [ -x /usr/sbin/danted ] && danted=/usr/sbin/danted; }
[ -n "$danted" ] || {
  echo "with-socks5: danted not found: install it with: apt-get install dante-server (make test does)" >&2
  exit 1
}

external=127.0.0.3
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
dir=$(mktemp -d -t evs-danted.XXXXXX)
cat >"$dir/danted.conf" <<CONF
logoutput: stderr
internal: 127.0.0.1 port = $port
external: $external
clientmethod: none
socksmethod: none
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 127.0.0.0/8 command: connect }
socks block { from: 0.0.0.0/0 to: 0.0.0.0/0 }
CONF

# Without user.* settings danted runs as the current user; -p keeps its pid
# file out of /run, which only root may write.
setsid "$danted" -f "$dir/danted.conf" -p "$dir/danted.pid" -N 1 >"$dir/danted.log" 2>&1 &
danted_pid=$!
cleanup() {
  kill -- -"$danted_pid" 2>/dev/null || kill "$danted_pid" 2>/dev/null || true
  wait "$danted_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM

for _ in $(seq 1 150); do
  if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=1).close()" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$danted_pid" 2>/dev/null; then
    echo "with-socks5: danted exited at start:" >&2; cat "$dir/danted.log" >&2; exit 1
  fi
  sleep 0.1
done

export EVS_TEST_SOCKS5="socks5://127.0.0.1:$port"
export EVS_TEST_SOCKS5_EXTERNAL="$external"
"$@"
