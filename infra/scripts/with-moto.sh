#!/usr/bin/env bash
# Runs a command with moto_server (a real AWS-API server for DynamoDB and SQS)
# listening on a free loopback port, exported as EVS_MOTO_ENDPOINT, and stops
# the server however the command ends.
set -euo pipefail

command -v moto_server >/dev/null 2>&1 || {
  echo "with-moto: moto_server not found: install it with: pip install 'moto[server]'" >&2
  exit 1
}

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
log=$(mktemp -t moto.XXXXXX.log)
setsid moto_server -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto_pid=$!
cleanup() {
  kill -- -"$moto_pid" 2>/dev/null || kill "$moto_pid" 2>/dev/null || true
  wait "$moto_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT INT TERM

for _ in $(seq 1 150); do
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$moto_pid" 2>/dev/null; then
    echo "with-moto: moto_server exited at start:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 0.2
done

export EVS_MOTO_ENDPOINT="http://127.0.0.1:$port"
"$@"
