#!/usr/bin/env bash
# Runs a command with moto_server (a real AWS-API server for DynamoDB and SQS)
# listening on free loopback ports, three of them, exported as
# EVS_MOTO_ENDPOINT (their URLs, comma-separated; testkit gives each
# top-level test one), and stops the servers however the command ends.
# Several, because one moto serves DynamoDB one request at a time (below)
# on one core: the tests that run in parallel would queue on it.
set -euo pipefail

command -v moto_server >/dev/null 2>&1 || {
  echo "with-moto: moto_server not found: install it with: pip install 'moto[server]'" >&2
  exit 1
}

. "$(dirname "$0")/daemon.sh"
urls=() pids=() logs=()
for _ in 1 2 3; do
  port=$(free_port)
  log=$(mktemp -t moto.XXXXXX.log)
  # moto_serial.py is moto_server with each DynamoDB request atomic, as on AWS.
  start_daemon "$log" "$log" python3 "$(dirname "$0")/moto_serial.py" 127.0.0.1 "$port"
  urls+=("http://127.0.0.1:$port") pids+=("$daemon_pid") logs+=("$log")
done
for i in "${!urls[@]}"; do
  daemon_pid=${pids[$i]}
  wait_ready with-moto:\ moto_server "${logs[$i]}" 0.2 \
    python3 -c "import urllib.request; urllib.request.urlopen('${urls[$i]}/moto-api/', timeout=1)"
done

EVS_MOTO_ENDPOINT=$(IFS=,; echo "${urls[*]}")
export EVS_MOTO_ENDPOINT
"$@"
