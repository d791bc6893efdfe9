#!/usr/bin/env bash
# redis-instructions.sh: what a coalesced buy costs Redis, in instructions,
# against what one call of seed 000's one-item script costs it: counts that
# do not move with the machine's load (a shared 2-core machine moves Redis's
# CPU time per buy by a third between back-to-back runs; instruction counts
# by about 1%).
#
# Starts a redis-server of its own under valgrind's callgrind on a free
# loopback port, twice:
#   1. the engine: BenchmarkBuyCallSerial (internal/inventory/bench_test.go), BuyMany
#      calls of BATCH one-unit buys by new buyers of a sale with per-user
#      limit 1, one call at a time (THROTTLE=1 adds the service's default
#      per-user throttle, whose windows follow the clock: its counts then
#      vary with how long the run takes);
#   2. the seed: redis-benchmark -P 16 EVALSHA of internal/bench/http/seed000.lua,
#      one buyer per call (the hot-item ceiling's yardstick).
# Each counts only the measured part (a warm-up first loads the scripts and
# the hashes' first entries), and prints Redis's instructions per buy.
#
# ITEMS=n buys from a sale of n items instead of one, each call's buys of
# distinct items while n >= BATCH (BUY_CALL_ITEMS). REDIS_SERVER=path runs that redis-server
# instead of the one on PATH (a build of Redis's own source with its
# symbols: a packaged one is stripped), and PROFILE=dir keeps the engine's
# callgrind output there (the run of N buys, its sale's making included),
# for callgrind_annotate to say where the instructions go (by function,
# with --inclusive=yes or --tree=calling).
#
# Needs valgrind (callgrind_control, callgrind_annotate), redis-server,
# redis-cli, redis-benchmark and Go. Runs a few minutes: callgrind runs
# Redis about 50 times slower. Leaves nothing behind.
# Usage: internal/bench/redis-instructions.sh [buys]   (default 100000)
set -euo pipefail
cd "$(dirname "$0")/../.."

N=${1:-100000}
BATCH=${BATCH:-128}
THROTTLE=${THROTTLE:-0}
ITEMS=${ITEMS:-1}
SERVER=${REDIS_SERVER:-redis-server}
work=$(mktemp -d)
port=$(( 20000 + RANDOM % 20000 ))
vpid=""
cleanup() {
  [[ -n "$vpid" ]] && { redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$vpid" 2>/dev/null || true; wait "$vpid" 2>/dev/null || true; }
  rm -rf "$work"
}
trap cleanup EXIT

go test -c -o "$work/inventory.test" ./internal/inventory/

# start_redis NAME: a redis-server under callgrind, counting nothing yet.
start_redis() {
  valgrind --tool=callgrind --callgrind-out-file="$work/$1.out" --instr-atstart=no \
    "$SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --lua-time-limit 0 --dir "$work" >"$work/$1.log" 2>&1 &
  vpid=$!
  for _ in $(seq 1 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.2; done
  echo "redis-server under callgrind did not start: $work/$1.log" >&2
  exit 1
}
# stop_redis NAME COUNT: stops it and prints its instructions per COUNT.
stop_redis() {
  callgrind_control -i off "$vpid" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$vpid" 2>/dev/null || true
  vpid=""
  echo "$1: $(( $(total "$work/$1.out") / $2 )) Redis instructions per buy ($2 buys)"
}
# total FILE: the instructions a callgrind output counts.
total() {
  callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

engine() {
  SECKILL_TEST_REDIS_URL="redis://127.0.0.1:$port/0" BUY_CALL_BATCH=$BATCH BUY_CALL_THROTTLE=$THROTTLE BUY_CALL_ITEMS=$ITEMS \
    "$work/inventory.test" -test.run '^$' -test.bench BenchmarkBuyCallSerial -test.benchtime "$1x" >/dev/null
}
# Each engine run makes its sale (twice: Go runs a benchmark once with
# b.N = 1 first) and removes it, and a sale of many items costs far more
# to make than its buys (100,000 items: billions of instructions), so the
# engine is counted twice, a run of N/5 buys and one of N, each in a dump
# of its own; a buy costs the difference over the 4N/5 buys between them,
# in which what a run does besides its buys cancels out. (The benchmark
# flushes the Lua garbage of making a sale of many items before its buys;
# settle waits for Redis's background thread to have freed the keys a run
# removed, so that no free is split between two dumps.)
settle() {
  for _ in $(seq 1 300); do
    redis-cli -p "$port" info memory | grep -q '^lazyfree_pending_objects:0' && return
    sleep 0.2
  done
  echo "redis-server's background frees did not end" >&2
  exit 1
}
start_redis engine
engine 2000
settle
callgrind_control -i on "$vpid" >/dev/null
small=$(( N / 5 ))
callgrind_control -z "$vpid" >/dev/null
engine "$small"
settle
callgrind_control -d "$vpid" >/dev/null
callgrind_control -z "$vpid" >/dev/null
engine "$N"
settle
callgrind_control -d "$vpid" >/dev/null
callgrind_control -i off "$vpid" >/dev/null
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
wait "$vpid" 2>/dev/null || true
vpid=""
a=$(total "$work/engine.out.1")
b=$(total "$work/engine.out.2")
[[ -n "$a" && -n "$b" ]] || { echo "no callgrind dump of the engine's runs" >&2; exit 1; }
echo "engine: $(( (b - a) / (N - small) )) Redis instructions per buy ($(( N - small )) buys: $N less $small)"
[[ -n "${PROFILE:-}" ]] && mkdir -p "$PROFILE" && cp "$work/engine.out.2" "$PROFILE/engine.callgrind"

start_redis seed
sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat internal/bench/http/seed000.lua)")
redis-cli -p "$port" SET stock 1000000000 >/dev/null
redis-benchmark -p "$port" -P 16 -n 2000 -r 100000000 EVALSHA "$sha" 2 stock bought 1 __rand_int__ >/dev/null
callgrind_control -i on "$vpid" >/dev/null
redis-benchmark -p "$port" -P 16 -n "$N" -r 100000000 EVALSHA "$sha" 2 stock bought 1 __rand_int__ >/dev/null
stop_redis seed "$N"
