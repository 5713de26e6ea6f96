#!/usr/bin/env bash
# Writes an edge config with N routes (default 10 000) for edge-bench compare --edge-config
# (bench/README.md "Traffic rules"): half exact-host routes, half path prefixes, all to the origin, and
# a last catch-all route that the benchmark's requests match. `{origin}` is the origin's address.
set -euo pipefail
n=${1:-10000}
printf '[[upstreams]]\nname = "origin"\nendpoints = ["{origin}"]\npool_max_idle = 1024\n'
for ((i = 0; i < n - 1; i++)); do
    if ((i % 2)); then
        printf '\n[[routes]]\nhost = "svc%d.example.com"\npath_prefix = "/"\nupstream = "origin"\n' "$i"
    else
        printf '\n[[routes]]\npath_prefix = "/svc%d/api"\nupstream = "origin"\n' "$i"
    fi
done
printf '\n[[routes]]\npath_prefix = "/"\nupstream = "origin"\n'
