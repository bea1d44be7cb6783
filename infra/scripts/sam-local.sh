#!/usr/bin/env bash
# make sam-local: the API under `sam local start-api`, each function in a
# Docker container as on Lambda, against DynamoDB, SQS and API Gateway's
# key APIs served by moto_server on this machine.
#
# 1. moto_server on port 5000 (infra/sam/env.json points the functions at
#    http://host.docker.internal:5000), bound to Docker's bridge gateway
#    when this host has that address (Linux), else to all interfaces;
# 2. evs sam-local-init: the tables, the queue and a usage plan;
# 3. a live API key for account "local" (evs keys create);
# 4. sam build, then sam local start-api on http://127.0.0.1:3000.
#
# Not emulated by sam local: usage plans (throttle, quota), the gateway
# responses of template.yaml, and the SQS trigger of the worker (batches
# stay queued; `sam local invoke WorkerFunction -e EVENT` runs it once).
set -euo pipefail

command -v sam >/dev/null 2>&1 || { echo "sam-local: the AWS SAM CLI is required: see https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/install-sam-cli.html" >&2; exit 1; }
command -v docker >/dev/null 2>&1 || { echo "sam-local: Docker is required (sam local runs each function in a container): see https://docs.docker.com/get-docker/" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "sam-local: Docker is installed but its daemon does not answer (docker info failed)" >&2; exit 1; }
command -v moto_server >/dev/null 2>&1 || { echo "sam-local: moto_server not found: install it with: pip install 'moto[server]'" >&2; exit 1; }

cd "$(dirname "$0")/../.."
env_file=infra/sam/env.json
port=5000 # the port of AWS_ENDPOINT_URL in $env_file
go=${GO:-go}

# host-gateway is the bridge's gateway address on Linux; Docker Desktop
# resolves host.docker.internal by itself and has no such local address.
gw=$(docker network inspect bridge --format '{{range .IPAM.Config}}{{.Gateway}}{{end}}' 2>/dev/null || true)
bind=0.0.0.0
add_host=()
if [ -n "$gw" ] && ip -o addr show 2>/dev/null | grep -qw "inet $gw"; then
  bind=$gw
  add_host=(--add-host "host.docker.internal:$gw")
else
  echo "sam-local: moto_server listens on all interfaces (port $port) for the containers to reach it" >&2
fi
host=$bind
[ "$host" = 0.0.0.0 ] && host=127.0.0.1
endpoint="http://$host:$port"

if python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('$host', $port)) != 0)" 2>/dev/null; then
  echo "sam-local: port $port on $host is in use; stop what listens there (env.json expects moto_server on it)" >&2
  exit 1
fi
log=$(mktemp -t moto-sam-local.XXXXXX.log)
setsid moto_server -H "$bind" -p "$port" >"$log" 2>&1 &
moto_pid=$!
cleanup() {
  kill -- -"$moto_pid" 2>/dev/null || kill "$moto_pid" 2>/dev/null || true
  wait "$moto_pid" 2>/dev/null || true
  rm -f "$log"
}
trap cleanup EXIT INT TERM
for _ in $(seq 1 150); do
  python3 -c "import urllib.request; urllib.request.urlopen('$endpoint/moto-api/', timeout=1)" 2>/dev/null && break
  kill -0 "$moto_pid" 2>/dev/null || { echo "sam-local: moto_server exited at start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done

# Assigned first: set -e sees a failure of the command, not of eval.
vars=$("$go" run ./infra/evs sam-local-init --env-vars "$env_file" --endpoint "$endpoint")
eval "$vars"
key=$(AWS_ENDPOINT_URL=$endpoint AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
  "$go" run ./infra/evs keys create --account local --dynamodb-table "$EVS_KEYS_TABLE" --usage-plan "$EVS_USAGE_PLAN_ID")
cat <<MSG
sam-local: API key of account "local" (live, SMTP off): $key
sam-local: try: curl -s http://127.0.0.1:3000/v1/verify -H 'X-Api-Key: $key' -H 'Content-Type: application/json' -d '{"email":"someone@example.com"}'
MSG

sam build
sam local start-api --env-vars "$env_file" --region us-east-1 --port 3000 "${add_host[@]}"
