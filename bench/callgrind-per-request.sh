#!/bin/sh
# User-space instructions per proxied request, counted with callgrind (bench/README.md "User-space
# instructions per request"). Counts do not move with the machine's load, so two builds can be
# compared one after the other; the io_uring driver serves almost nothing under valgrind, so this counts
# the epoll driver.
#
# usage: bench/callgrind-per-request.sh EDGE_BIN ORIGIN_ADDR URL_PATH [OUT]
#   EDGE_BIN     the edge binary (a release build, with debug info for per-function figures)
#   ORIGIN_ADDR  host:port of a running origin (e.g. nginx with `location /fast { return 200 "hello\n"; }`)
#   URL_PATH     the path wrk asks for (e.g. /fast)
#   OUT          the callgrind output file (default /tmp/edge-callgrind.out); per-function figures:
#                callgrind_annotate --threshold=100 --auto=no OUT.1
# Needs valgrind, wrk, curl, taskset. Ports 39100 and 39101 on 127.0.0.1 must be free.
set -eu
bin=$1 origin=$2 path=$3 out=${4:-/tmp/edge-callgrind.out}
listen=127.0.0.1:39100 admin=127.0.0.1:39101
requests() { curl -s "http://$admin/metrics" | awk '/^edge_requests_total/ {s += $2} END {print s + 0}'; }

rm -f "$out" "$out".*
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" --listen $listen --admin-listen $admin \
    --workers 1 --io-driver epoll --upstream "$origin" >"$out.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
i=0
until curl -s -o /dev/null "http://$admin/metrics"; do
    i=$((i + 1))
    [ $i -le 60 ] || { echo "edge did not start under valgrind; see $out.log" >&2; exit 1; }
    sleep 1
done
taskset -c 1 wrk -t1 -c64 -d3s "http://$listen$path" >/dev/null
callgrind_control -z "$pid" >/dev/null 2>&1
before=$(requests)
taskset -c 1 wrk -t1 -c64 -d10s "http://$listen$path" >/dev/null
after=$(requests)
callgrind_control -d counted "$pid" >/dev/null 2>&1
total=$(callgrind_annotate --threshold=100 --auto=no "$out.1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
n=$((after - before))
echo "requests: $n  instructions: $total  per request: $((total / n))"
