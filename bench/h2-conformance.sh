#!/usr/bin/env bash
# HTTP/2 server conformance of the real edge binary (h2c with prior knowledge on the plain listener), run
# with httpwg-cli 0.2.5 (bearcove/loona's h2spec replacement, 107 RFC 9113 cases) against edge in front
# of edge-bench's origin. Prints the pass count and exits non-zero when a run passes fewer than MIN_PASSED
# of the deterministic cases (all but the four racy ones listed below).
#
#   bench/h2-conformance.sh [MIN_PASSED]        # default 89: the count in bench/README.md
#
# Environment:
#   HTTPWG_ROOT       cargo install --root for httpwg-cli (default: target/httpwg); installed when missing
#   JOBS              cargo -j (default 2)
#   EDGE_BIN          use this edge binary instead of building (EDGE_BENCH_BIN: the origin, default the
#                     edge-bench beside it), e.g. target/debug/edge after CI's own build
#   FRAME_TIMEOUT_MS  httpwg's wait for one frame (default 1000; its own default, 250, makes a loaded
#                     machine's slow answer look like EOF, which several cases count as a pass)
#   SUITE_TIMEOUT     seconds allowed for the suite run itself (default 120; it takes ~2 s)
#   RUNS              suite runs (default 3); the threshold applies to each
#   KEEP_LOG          httpwg's logs of all runs (default: target/h2-conformance.log)
set -euo pipefail
cd "$(dirname "$0")/.."

min=${1:-89}
root=${HTTPWG_ROOT:-$PWD/target/httpwg}
jobs=${JOBS:-2}
frame_timeout=${FRAME_TIMEOUT_MS:-1000}
suite_timeout=${SUITE_TIMEOUT:-120}
keep_log=${KEEP_LOG:-$PWD/target/h2-conformance.log}
httpwg=$root/bin/httpwg

if [ ! -x "$httpwg" ]; then
    # --locked: httpwg-cli 0.2.5 builds only with its own Cargo.lock. Its dependency buffet 0.3.3 calls
    # socket2 0.5's Socket::set_reuse_port without enabling socket2's "all" feature, which only the
    # locked tokio 1.39 brings in; a fresh resolve picks a tokio on socket2 0.6 and fails with E0599 (no
    # method `set_reuse_port`).
    echo "installing httpwg-cli 0.2.5 into $root"
    timeout 1800 nice cargo install -j "$jobs" --locked --version 0.2.5 --root "$root" httpwg-cli
fi

if [ -z "${EDGE_BIN:-}" ]; then
    # The same package set as the build in bench/README.md, so the features (and the artifacts) are shared.
    timeout 3600 nice cargo build -j "$jobs" --release -p edge-frontend -p edge-bench
fi
edge=${EDGE_BIN:-target/release/edge}
bench=${EDGE_BENCH_BIN:-$(dirname "$edge")/edge-bench}

tmp=$(mktemp -d /tmp/h2-conformance.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

# A 127.0.0.1 port nothing listens on (edge binds with SO_REUSEPORT, so a port in use must be skipped).
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    echo "no free port found" >&2
    return 1
}

# The origin: port 0, it prints the one it got.
"$bench" origin --listen 127.0.0.1:0 >"$tmp/origin.log" 2>&1 &
pids+=($!)
origin_port=""
for _ in $(seq 1 100); do
    origin_port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/origin.log")
    [ -n "$origin_port" ] && break
    sleep 0.1
done
if [ -z "$origin_port" ]; then
    echo "origin did not start:" >&2
    cat "$tmp/origin.log" >&2
    exit 2
fi

cat >"$tmp/edge.toml" <<'EOF'
[server]
h2c = true
workers = 1
EOF

edge_port=""
for attempt in 1 2 3; do
    port=$(free_port)
    "$edge" --config "$tmp/edge.toml" --listen "127.0.0.1:$port" --admin-listen "" \
        --upstream "127.0.0.1:$origin_port" >"$tmp/edge.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if "$edge" healthcheck --url "http://127.0.0.1:$port/_health" >/dev/null 2>&1; then
            edge_port=$port
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -n "$edge_port" ]; then
        pids+=("$pid")
        break
    fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
done
if [ -z "$edge_port" ]; then
    echo "edge did not become healthy:" >&2
    cat "$tmp/edge.log" >&2
    exit 2
fi
echo "edge (h2c) on 127.0.0.1:$edge_port, origin on 127.0.0.1:$origin_port"

# Four cases pass or fail by a race, not by what edge does (bench/README.md "HTTP/2 conformance"): the
# suite's reader gives up after the frame timeout and reports EOF, which some cases accept, or edge's close
# races the case's next frame. They are run and printed, but the threshold applies to the other cases'
# passes, in every one of RUNS runs.
flaky=(
    "5. streams and multiplexing :: half closed remote sends data frame"
    "6. frame definitions :: sends data frame on invalid stream state"
    "7. error codes :: sends goaway frame with unknown error code"
    "8. expressing http semantics in http2 :: client sends push promise frame"
)
runs=${RUNS:-3}
worst=1000
best=-1
: >"$keep_log"
for run in $(seq 1 "$runs"); do
    started=$(date +%s%N)
    set +e
    timeout "$suite_timeout" "$httpwg" --frame-timeout "$frame_timeout" -a "127.0.0.1:$edge_port" \
        >"$tmp/httpwg.raw" 2>&1
    rc=$?
    set -e
    elapsed_ms=$((($(date +%s%N) - started) / 1000000))
    sed 's/\x1b\[[0-9;]*m//g' "$tmp/httpwg.raw" >"$tmp/httpwg.log"
    { echo "===== run $run"; cat "$tmp/httpwg.log"; } >>"$keep_log"
    summary=$(grep -a -o 'Passed [0-9]*/[0-9]*' "$tmp/httpwg.log" | tail -1 || true)
    if [ -z "$summary" ]; then
        echo "httpwg did not finish (exit $rc, suite timeout ${suite_timeout}s); log: $keep_log" >&2
        tail -20 "$tmp/httpwg.log" >&2
        exit 2
    fi
    passed=${summary#Passed }
    total=${passed#*/}
    passed=${passed%/*}
    flaky_passed=0
    for f in "${flaky[@]}"; do
        if grep -a -q -F "Test passed: RFC 9113 :: $f" "$tmp/httpwg.log"; then
            flaky_passed=$((flaky_passed + 1))
        fi
    done
    stable=$((passed - flaky_passed))
    # A case whose test task panics (httpwg unwraps a frame wait on a peer that hung up) is neither
    # passed nor failed in httpwg's own lines: it counts as failed here.
    echo "run $run: $passed of $total passed in ${elapsed_ms} ms;" \
        "$stable of $((total - ${#flaky[@]})) deterministic cases, $flaky_passed of ${#flaky[@]} racy ones"
    grep -a 'Test failed:' "$tmp/httpwg.log" | sed 's/.*Test failed: RFC 9113 :: /    failed: /' | sort || true
    if [ "$stable" -lt "$worst" ]; then worst=$stable; fi
    if [ "$passed" -gt "$best" ]; then best=$passed; fi
done
echo "frame timeout ${frame_timeout} ms; log: $keep_log"
echo "best run: $best of $total passed; deterministic cases: at least $worst of $((total - ${#flaky[@]})) in every run"
echo "h2-conformance: $best passed, $((total - best)) failed"
passed=$worst
if [ "$passed" -lt "$min" ]; then
    echo "FAIL: a run passed only $passed deterministic cases, below the threshold $min" >&2
    exit 1
fi
echo "OK: every run passed at least $passed deterministic cases (threshold $min)"
