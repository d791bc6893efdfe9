#!/usr/bin/env bash
# run.sh: the HTTP throughput and latency measurement of the README's
# performance section, in one sitting on one machine:
#   1. redis-benchmark: EVALSHA of seed 000's one-item script, -c 50 and -P 16
#      (the ceilings the targets are ratios of);
#   2. wrk -t2 -c128 -d10s POSTing buys as 20,000 distinct buyers against
#      `seckill serve` on the local Redis and PostgreSQL, consumer running;
#   3. the order consumer's catch-up: orders in the database per second;
#   4. internal/bench/http/openloop: an open-loop run at 80% of the rate wrk reached,
#      for latencies measured from each request's scheduled send time (wrk's
#      closed loop stops sending while the server stalls and hides the wait).
# Needs: redis-server on 127.0.0.1:6379, PostgreSQL on 127.0.0.1:5432 (user
# postgres, trust auth), wrk, redis-benchmark, psql, curl, jq. Leaves nothing
# behind: its own database, key prefix and process are removed at exit.
set -euo pipefail
cd "$(dirname "$0")/../../.."

BUYERS=${BUYERS:-20000}
DURATION=${DURATION:-10s}
REDIS=${REDIS:-redis://127.0.0.1:6379/0}
PG=${PG:-postgres://postgres@127.0.0.1:5432}
PORT=${PORT:-18080}
RUN=wrk$(date +%s)$$
work=$(mktemp -d)
db="seckill_$RUN"

cleanup() {
  [[ -n "${pid:-}" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  psql "$PG/postgres" -qc "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
  redis-cli --scan --pattern "{$RUN:*" | xargs -r redis-cli unlink >/dev/null || true
  redis-cli unlink "ceiling:$RUN:stock" "ceiling:$RUN:bought" >/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/seckill" ./cmd/seckill

# 1. The ceilings: seed 000's script.
sha=$(redis-cli script load "$(cat internal/bench/http/seed000.lua)")
redis-cli set "ceiling:$RUN:stock" 1000000000000 >/dev/null
ceiling() { # $@: redis-benchmark options; prints requests per second
  redis-benchmark "$@" -r 100000000 -q EVALSHA "$sha" 2 "ceiling:$RUN:stock" "ceiling:$RUN:bought" 1 __rand_int__ |
    tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}
c50=$(ceiling -c 50 -n 300000)
p16=$(ceiling -P 16 -n 1000000)
echo "redis-benchmark EVALSHA seed 000: -c 50 $c50/s, -P 16 $p16/s"

# 2. The service.
psql "$PG/postgres" -qc "CREATE DATABASE $db" >/dev/null
secret=$(head -c 24 /dev/urandom | base64)
admin=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
SECKILL_ADDR=127.0.0.1:$PORT SECKILL_REDIS_URL=$REDIS SECKILL_DATABASE_URL="$PG/$db?sslmode=disable" \
  SECKILL_KEY_PREFIX=$RUN SECKILL_ADMIN_TOKEN=$admin SECKILL_JWT_SECRET=$secret SECKILL_LOG_LEVEL=warn \
  "$work/seckill" serve >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null && break; sleep 0.1; done
curl -fs -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
  -d '{"id":"hot","per_user_limit":1000000,"items":[{"sku":"A","stock":1000000000}]}' \
  "http://127.0.0.1:$PORT/v1/admin/sales" >/dev/null
SECKILL_JWT_SECRET=$secret "$work/seckill" token --user buyer --count "$BUYERS" --ttl 1h >"$work/tokens"

orders() { psql "$PG/$db" -Atc "SELECT count(*) FROM seckill.orders"; }  # serve keeps its tables in schema seckill
TOKENS="$work/tokens" wrk -t2 -c128 -d"$DURATION" --latency -s internal/bench/http/buy.lua \
  "http://127.0.0.1:$PORT/v1/sales/hot/orders" | tee "$work/wrk.txt"
rps=$(awk '/^Requests\/sec/ {print $2}' "$work/wrk.txt")
bad=$(awk '/Non-2xx/ {print $NF}' "$work/wrk.txt"); bad=${bad:-0}
sold=$(redis-cli hget "{$RUN:hot}:sale" t:A | awk -v r="$(redis-cli hget "{$RUN:hot}:sale" r:A)" '{print $1 - r}')

# 3. The consumer: how long until the database holds every order.
start=$(date +%s.%N); in_db=$(orders)
while [[ $in_db -lt $sold ]]; do sleep 0.2; in_db=$(orders); done
drain=$(echo "$(date +%s.%N) - $start" | bc)
echo "sold $sold; non-2xx $bad; database caught up ${drain}s after wrk ended"
echo "HTTP buys/s $rps = $(echo "scale=2; $rps / $c50" | bc)x redis-benchmark -c 50 seed 000"

# 4. Open loop at 80% of wrk's rate; fails the run on any error or non-2xx.
rate=$(echo "$rps * ${RATE_FRACTION:-0.8} / 1" | bc)  # RATE_FRACTION: share of wrk's rate
go run ./internal/bench/http/openloop --url "http://127.0.0.1:$PORT/v1/sales/hot/orders" \
  --tokens "$work/tokens" --rate "$rate" --duration "$DURATION" | tee "$work/openloop.txt"
echo "open loop at $rate/s (80% of wrk's rate): latencies from the scheduled send times above"
