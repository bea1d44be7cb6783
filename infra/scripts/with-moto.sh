#!/usr/bin/env bash
# Runs a command with moto_server (a real AWS-API server for DynamoDB and SQS)
# listening on a free loopback port, exported as EVS_MOTO_ENDPOINT, and stops
# the server however the command ends.
set -euo pipefail

command -v moto_server >/dev/null 2>&1 || {
  echo "with-moto: moto_server not found: install it with: pip install 'moto[server]'" >&2
  exit 1
}

. "$(dirname "$0")/daemon.sh"
port=$(free_port)
log=$(mktemp -t moto.XXXXXX.log)
# moto_serial.py is moto_server with each DynamoDB request atomic, as on AWS.
start_daemon "$log" "$log" python3 "$(dirname "$0")/moto_serial.py" 127.0.0.1 "$port"
wait_ready with-moto:\ moto_server "$log" 0.2 \
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)"

export EVS_MOTO_ENDPOINT="http://127.0.0.1:$port"
"$@"
