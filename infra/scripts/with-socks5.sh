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

. "$(dirname "$0")/daemon.sh"
external=127.0.0.3
port=$(free_port)
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
start_daemon "$dir/danted.log" "$dir" "$danted" -f "$dir/danted.conf" -p "$dir/danted.pid" -N 1
wait_ready with-socks5:\ danted "$dir/danted.log" 0.1 \
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), timeout=1).close()"

export EVS_TEST_SOCKS5="socks5://127.0.0.1:$port"
export EVS_TEST_SOCKS5_EXTERNAL="$external"
"$@"
