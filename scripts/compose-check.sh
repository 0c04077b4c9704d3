#!/usr/bin/env bash
# Runs docker-compose.yml for real and checks the mirror end to end, for each profile asked for
# (default: inprocess spark):
#   1. builds the images (docker compose build), starts the profile, waits until every container
#      is healthy (the one-shot rest-certs: exited 0), asks the REST API over HTTPS from the host
#      (the development certificate and users it wrote: no login 401, viewer and admin 200);
#   2. creates a topic on east, produces records, waits until west holds each of them once;
#   3. checks that `docker compose logs` of this normal start has no ERROR line;
#   4. under a steady stream of records: restarts the mm2py worker (SIGTERM), then SIGKILLs it and
#      starts it again;
#   5. checks every record produced arrived on west exactly once (per partition: the same records
#      in the same order; none twice, none missing);
#   6. docker compose down -v (also on failure or Ctrl-C).
# Exits 0 with "skipped: no Docker engine" where there is none; nonzero, saying what failed,
# otherwise. Needs Docker with compose (v2 plugin, or docker-compose v1); records are produced and
# read by scripts/compose_records.py in a container of the mm2py image, so the host needs nothing
# else. Uses its own compose project (mm2py-check), but the same host ports as `docker compose up`
# (8083, 9108, 19092, 29092, 8080): stop a running setup first.
#   scripts/compose-check.sh [inprocess] [spark]
# Settings: COMPOSE_CHECK_COMPOSE (the compose command, e.g. docker-compose; default docker compose
# when there is one), COMPOSE_CHECK_PROJECT (mm2py-check), COMPOSE_CHECK_TIMEOUT (300 s: health,
# and the mirror catching up).
set -euo pipefail
cd "$(dirname "$0")/.."

PROJECT=${COMPOSE_CHECK_PROJECT:-mm2py-check}
TOPIC=compose-check
PARTITIONS=3
WAIT=${COMPOSE_CHECK_TIMEOUT:-300}   # seconds for health, and for the mirror to catch up
PROFILES=("$@")
[ ${#PROFILES[@]} -gt 0 ] || PROFILES=(inprocess spark)

say() { echo "compose-check${PROFILE:+ [$PROFILE]}: $*"; }
fail() { say "FAILED: $*" >&2; exit 1; }

if ! command -v docker > /dev/null 2>&1 || ! docker info > /dev/null 2>&1; then
  echo "compose-check: skipped: no Docker engine"
  exit 0
fi
if [ -n "${COMPOSE_CHECK_COMPOSE:-}" ]; then  # e.g. COMPOSE_CHECK_COMPOSE=docker-compose
  read -ra COMPOSE <<< "$COMPOSE_CHECK_COMPOSE"
elif docker compose version > /dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose > /dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  fail "a Docker engine is running but docker compose is missing (install the compose plugin)"
fi
for profile in "${PROFILES[@]}"; do
  case "$profile" in inprocess | spark) ;; *) fail "unknown profile $profile (inprocess or spark)" ;; esac
done

PROFILE=""
compose() { "${COMPOSE[@]}" -p "$PROJECT" --profile "$PROFILE" "$@"; }

# the worker: the service that runs `mm2py run` in this profile
worker() { case "$PROFILE" in inprocess) echo mm2py ;; spark) echo mm2py-spark ;; esac; }
image() { case "$PROFILE" in inprocess) echo mm2py:lean ;; spark) echo mm2py:spark ;; esac; }
container() { compose ps -q "$1"; }
network() {
  docker inspect -f '{{range $name, $_ := .NetworkSettings.Networks}}{{$name}}{{end}}' "$(container east)"
}

# records COMMAND ARGS...: scripts/compose_records.py in a container on the compose network
records() {
  docker run --rm --network "$(network)" -e TIMEOUT="$WAIT" "$(image)" \
    python -c "$(cat scripts/compose_records.py)" "$@" 2>&1 | sed 's/^/    /'
}

PRODUCER="$PROJECT-producer"
cleanup() {
  local code=$?
  trap - EXIT INT TERM
  if [ -n "$PROFILE" ]; then
    if [ $code -ne 0 ]; then
      say "the last 40 log lines of each service:"
      compose logs --no-color --tail 40 2>&1 | sed 's/^/    /' || true
    fi
    docker rm -f "$PRODUCER" > /dev/null 2>&1 || true
    compose down -v --remove-orphans > /dev/null 2>&1 || say "docker compose down -v failed"
  fi
  exit $code
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_healthy() {  # service...: until each runs and its healthcheck passes (a one-shot: exited 0)
  local deadline=$((SECONDS + WAIT)) svc id state
  for svc in "$@"; do
    while :; do
      id=$(container "$svc")
      state=$(docker inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.State.ExitCode}}' \
        "$id" 2> /dev/null || echo missing)
      case "$state" in
        "running healthy "* | "exited none 0") break ;;
        exited* | dead* | "running unhealthy"*) fail "$svc is $state" ;;
      esac
      [ $SECONDS -lt $deadline ] || fail "$svc not healthy after ${WAIT}s ($state)"
      sleep 2
    done
  done
}

# run on spark-master: mm2py is a RUNNING application there, with cores on the worker
SPARK_APP='
import json, sys, urllib.request
state = json.load(urllib.request.urlopen("http://spark-master:8080/json/", timeout=10))
apps = [a for a in state["activeapps"] if a["name"] == "mm2py" and a["state"] == "RUNNING" and a["cores"] > 0]
workers = [w["host"] for w in state["workers"] if w["state"] == "ALIVE" and w["coresused"] > 0]
print("Spark master: application", ", ".join(a["id"] + " (" + str(a["cores"]) + " cores)" for a in apps),
      "on", ", ".join(workers))
sys.exit(not (apps and workers))
'

# run on the host with the worker's /certs copied out: no login 401, the viewer 200, over the CA
REST_CHECK='
import base64, ssl, sys, urllib.error, urllib.request
certs = sys.argv[1]
users = dict(l.split(": ", 1) for l in open(certs + "/rest-users.properties").read().splitlines() if ": " in l)
ctx = ssl.create_default_context(cafile=certs + "/ca.pem")
def ask(user):
    req = urllib.request.Request("https://localhost:8083/flows")
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode((user + ":" + users[user]).encode()).decode())
    try:
        return urllib.request.urlopen(req, context=ctx, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code
got = (ask(None), ask("viewer"), ask("admin"))
print("REST API over HTTPS: no login", got[0], "viewer", got[1], "admin", got[2])
sys.exit(got != (401, 200, 200))
'

error_lines() { compose logs --no-color 2>&1 | grep -E '\b(ERROR|FATAL|CRITICAL)\b|Traceback \(most recent call last\)|Exception in thread' || true; }

check_profile() {
  local services w start errors
  w=$(worker)
  start=$SECONDS
  say "${COMPOSE[*]} --profile $PROFILE up -d"
  compose up -d --no-build 2>&1 | sed 's/^/    /' || fail "docker compose up"
  # the profile's services: those with a container now
  mapfile -t services < <(compose ps -q | xargs docker inspect -f '{{index .Config.Labels "com.docker.compose.service"}}')
  wait_healthy "${services[@]}"
  say "healthy after $((SECONDS - start))s: ${services[*]}"

  # --- the REST API from the host: HTTPS on the development certificate, Basic authentication
  certs=$(mktemp -d)
  docker cp "$(container "$w"):/certs/." "$certs" > /dev/null || fail "copying /certs out of $w"
  python3 -c "$REST_CHECK" "$certs" | sed 's/^/    /' || fail "the REST API over HTTPS with its users"
  rm -rf "$certs"

  # --- a normal start mirrors, and logs no ERROR
  records create east:9092 "$TOPIC" "$PARTITIONS" || fail "creating $TOPIC on east"
  records produce east:9092 "$TOPIC" 0 3000 || fail "producing to east"
  records verify east:9092 "$TOPIC" west:9092 "east.$TOPIC" \
    || fail "the records of a normal start were not mirrored exactly once"
  errors=$(error_lines)
  [ -z "$errors" ] || { echo "$errors" | sed 's/^/    /'; fail "docker compose logs of a normal start has ERROR lines"; }
  say "normal start: mirrored, no ERROR line in docker compose logs"
  if [ "$PROFILE" = spark ]; then
    # the leases run on the standalone cluster's executors, not in the driver
    compose exec -T spark-master python -c "$SPARK_APP" | sed 's/^/    /' \
      || fail "mm2py is not an application with executor cores on the Spark master"
  fi

  # --- a restart and a SIGKILL of the worker while records keep coming
  docker run -d --name "$PRODUCER" --network "$(network)" -e RATE=200 "$(image)" \
    python -c "$(cat scripts/compose_records.py)" produce east:9092 "$TOPIC" 1000000 > /dev/null
  records growing west:9092 "east.$TOPIC" || fail "the records being produced are not mirrored"
  say "restarting $w (SIGTERM) under traffic"
  compose restart -t 120 "$w" 2>&1 | sed 's/^/    /' || fail "docker compose restart $w"
  wait_healthy "$w"
  records growing west:9092 "east.$TOPIC" || fail "not mirroring after the restart"
  say "SIGKILL of $w under traffic, then starting it again"
  docker kill -s KILL "$(container "$w")" > /dev/null || fail "docker kill $w"
  compose start "$w" 2>&1 | sed 's/^/    /' || fail "docker compose start $w"
  wait_healthy "$w"
  records growing west:9092 "east.$TOPIC" || fail "not mirroring after the SIGKILL"
  docker stop -t 60 "$PRODUCER" > /dev/null
  docker logs "$PRODUCER" 2>&1 | sed 's/^/    /'
  [ "$(docker wait "$PRODUCER")" = 0 ] || fail "the producer failed"
  docker rm "$PRODUCER" > /dev/null
  records verify east:9092 "$TOPIC" west:9092 "east.$TOPIC" \
    || fail "records produced across the restart and the SIGKILL were not mirrored exactly once"
  errors=$(error_lines)
  [ -z "$errors" ] || say "(for information: $(echo "$errors" | wc -l) ERROR lines after the restart and the SIGKILL)"
  say "restart and SIGKILL under traffic: every record once"

  compose down -v --remove-orphans > /dev/null 2>&1 || fail "docker compose down -v"
  say "down -v"
}

say "building the images (${COMPOSE[*]} build)"
if ! build_log=$("${COMPOSE[@]}" -p "$PROJECT" --profile inprocess --profile spark build 2>&1); then
  echo "$build_log" | tail -30
  fail "docker compose build"
fi
for PROFILE in "${PROFILES[@]}"; do
  check_profile
done
PROFILE=""
echo "compose-check: passed (${PROFILES[*]})"
