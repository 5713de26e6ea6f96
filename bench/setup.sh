#!/bin/sh
# Installs what `edge-bench compare` runs against: nginx, HAProxy and wrk (Debian packages).
# Idempotent: installs only what is missing, runs `apt-get update` at most once, and never
# starts the packages' services (compare runs them with its own config files).
set -eu

need=""
for pair in nginx:/usr/sbin/nginx haproxy:/usr/sbin/haproxy wrk:/usr/bin/wrk; do
    pkg=${pair%%:*}
    bin=${pair#*:}
    if [ -x "$bin" ]; then
        echo "$pkg: present ($bin)"
    else
        need="$need $pkg"
    fi
done

if [ -z "$need" ]; then
    echo "nothing to install"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "installing:$need"
$SUDO apt-get update
# (On this Debian the packages do not start their services; compare runs its own instances.)
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $need
