#!/usr/bin/env python3
"""Splits a CPU profile of one proxy into the parts of a proxied request, in µs per request.

Usage (bench/README.md "edge and nginx side by side"):

    edge-bench compare --rounds 1 --duration 20s --no-files --workloads W --targets T &
    sleep 9; taskset -c 1 perf record -F 1000 -C 0 --call-graph dwarf,16384 -o P -- sleep 6
    perf script -i P -F ip,sym > P.txt
    bench/perf-parts.py P.txt REQUESTS_PER_SECOND 6

REQUESTS_PER_SECOND is the run's figure from compare's output; 6 is the recording's length in seconds.
Every sample of CPU 0 is 1 ms (-F 1000), so a part's µs per request is its samples × 1000 / requests.

A kernel sample goes to the first part whose function appears anywhere in its call chain, in the order
below (so TCP work done inside io_uring_enter counts as TCP). A user-space sample goes by the first
frame that is not generic Rust library code (core, alloc, std), matched against edge's and nginx's
function names alike.
"""

import collections
import re
import sys

KERNEL = [
    ("kernel: TCP send, with the peer's receive on loopback", r"^tcp_sendmsg$"),
    ("kernel: TCP receive", r"^tcp_recvmsg$"),
    ("idle (CPU 0 halted)", r"^(pv_native_safe_halt|default_idle|do_idle)$"),
    (
        "kernel: event machinery (io_uring / epoll, wake-ups)",
        r"^(io_uring_enter|__do_sys_io_uring_enter|io_submit_sqes|io_cqring_wait|tctx_task_work|io_poll"
        r"|io_arm_poll|__x64_sys_epoll_wait|do_epoll_wait|ep_poll|__x64_sys_epoll_ctl|sock_poll)",
    ),
    ("kernel: system call entry and return", r"^(entry_SYSCALL|do_syscall_64|syscall_exit|__x64_sys_)"),
]
KERNEL_OTHER = "kernel: other (softirq, scheduler, interrupts)"

USER = [
    (
        "user: head parsing and framing",
        r"httparse|edge_core::http::(head|framing|view)|memchr|ngx_http_parse|ngx_hash_find|ngx_strstrn"
        r"|ngx_http_process_request_(header|line)|ngx_http_proxy_process_(status_line|header)"
        r"|ngx_http_upstream_process_header|ngx_http_read_request_header|ngx_http_process_host"
        r"|ngx_http_validate_host",
    ),
    (
        "user: head writing",
        r"edge_core::http::(hop|write|request_id)|edge_upstream::h1::encode|edge_frontend::server::h1::encode"
        r"|ngx_http_proxy_create_request|ngx_http_header_filter|ngx_vslprintf|ngx_sprintf|ngx_http_chunked"
        r"|ngx_http_upstream_send_request|ngx_http_proxy_copy|ngx_http_script",
    ),
    (
        "user: runtime (tasks, io operations, timers)",
        r"monoio|slab|ngx_process_events|ngx_epoll|ngx_event_|ngx_rbtree|ngx_handle_(read|write)_event",
    ),
    ("user: clock reads", r"clock_gettime|vdso|ngx_time_update|ngx_gettimeofday"),
    (
        "user: allocation and copies",
        r"malloc|_int_free|cfree|free$|memmove|memcpy|memset|ngx_palloc|ngx_pnalloc|ngx_pcalloc|ngx_alloc"
        r"|ngx_list_push|ngx_array_push|ngx_pfree|ngx_reset_pool|ngx_destroy_pool|ngx_create_pool|ngx_calloc",
    ),
    ("user: metrics and logs", r"metrics|edge_core::latency|edge_core::log|tracing|hdrhistogram|ngx_http_log"),
    (
        "user: socket calls (libc wrappers, nginx's send and receive chains)",
        r"^(__libc_|__GI___|__recv|__send|__writev|__read|__write|recv$|send$|writev$|epoll_wait$)"
        r"|ngx_writev|ngx_linux_sendfile_chain|ngx_unix_recv|ngx_readv_chain|ngx_unix_send|ngx_output_chain",
    ),
]
USER_OTHER = "user: proxy logic (state machines, routing, pools)"
GENERIC = re.compile(r"(core::|alloc::|std::|<core::|<alloc::|<std::|\[unknown\]|<F as core|<usize|<u\d|<\*|<&)")


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, rps, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    parts: collections.Counter = collections.Counter()
    total = kernel = 0
    for sample in open(path).read().split("\n\n"):
        raw = [line for line in sample.strip().split("\n") if line.strip()]
        if not raw:
            continue
        total += 1
        frames = [re.sub(r"^\s*[0-9a-f]+\s+", "", line).strip() for line in raw]
        if raw[0].strip().split()[0].startswith("ffffffff"):
            kernel += 1
            name = next((n for n, p in KERNEL if any(re.search(p, f) for f in frames)), KERNEL_OTHER)
        else:
            own = next((f for f in frames if not GENERIC.match(f)), "")
            name = next((n for n, p in USER if re.search(p, own)), USER_OTHER)
        parts[name] += 1
    if total == 0:
        sys.exit(f"{path}: no samples (is it `perf script -F ip,sym` output?)")
    per_request = lambda n: n * 1000.0 / (rps * seconds)  # noqa: E731
    print(f"samples {total}, requests {rps * seconds:.0f}")
    for name, n in sorted(parts.items()):
        print(f"{name:<58} {100 * n / total:6.2f} %  {per_request(n):6.2f} us")
    print(f"{'kernel total (incl. idle)':<58} {100 * kernel / total:6.2f} %  {per_request(kernel):6.2f} us")
    user = total - kernel
    print(f"{'user total':<58} {100 * user / total:6.2f} %  {per_request(user):6.2f} us")


if __name__ == "__main__":
    main()
