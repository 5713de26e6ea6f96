#!/usr/bin/env python3
"""The gRPC origin of edge's tests (frontend/tests/it/harness/grpc.rs): serves edge.test.Echo
(echo.proto, compiled into a directory on PYTHONPATH) and the standard health service
grpc.health.v1.Health (grpcio-health-checking) on 127.0.0.1, port chosen by the kernel. The health
service starts with "" (the server) and "edge.test.Echo" SERVING; any other name is unknown (NOT_FOUND).

Usage: server.py [--tls CERT KEY]

stdin, one JSON object per line:
  {"cmd": "health", "id": N, "service": S, "status": "SERVING" | "NOT_SERVING" | ...}
                                                             sets S's health status; answered by
                                                             {"event": "health_set", "id": N}

stdout, one JSON object per line, flushed at once:
  {"event": "listening", "port": N}                         first, once bound
  {"event": "call", "method": M, "metadata": {...}, "time_remaining": S or null, "peer": P}
                                                             when a call starts (metadata: the client's)
  {"event": "done", "method": M, "cancelled": bool, "messages_in": N, "messages_out": N}
                                                             when it ends (cancelled: the client or a
                                                             proxy cancelled it before the handler finished)
  {"event": "health_check", "service": S, "metadata": {...}}  a Health/Check call (metadata: the caller's)
Runs until killed (stdin closing ends it too, so a test that dies leaves no server behind).
"""

import json
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

import echo_pb2
import echo_pb2_grpc

_out = threading.Lock()


def emit(**event):
    with _out:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def metadata_dict(md):
    out = {}
    for k, v in md or ():
        out[k] = v.hex() if isinstance(v, bytes) else v
    return out


class Call:
    """Bookkeeping of one call: its start and end events, cancellation, message counts."""

    def __init__(self, method, context):
        self.method = method
        self.context = context
        self.finished = False
        self.messages_in = 0
        self.messages_out = 0
        emit(
            event="call",
            method=method,
            metadata=metadata_dict(context.invocation_metadata()),
            time_remaining=remaining if (remaining := context.time_remaining()) < 1e9 else None,
            peer=context.peer(),
        )
        context.add_callback(self.ended)

    def ended(self):
        emit(
            event="done",
            method=self.method,
            cancelled=not self.finished,
            messages_in=self.messages_in,
            messages_out=self.messages_out,
        )

    def sleep(self, ms):
        """Sleeps `ms`, waking early (False) when the call is no longer active."""
        until = time.monotonic() + ms / 1000
        while time.monotonic() < until:
            if not self.context.is_active():
                return False
            time.sleep(min(0.01, max(0, until - time.monotonic())))
        return self.context.is_active()

    def start(self, ask):
        if ask.initial_metadata:
            self.context.send_initial_metadata(tuple(ask.initial_metadata.items()))

    def reply(self, ask, **fields):
        self.messages_out += 1
        return echo_pb2.Reply(text=ask.text, payload=b"x" * ask.payload_bytes, **fields)

    def end(self, ask):
        """The call's end: trailing metadata, then the asked status (or OK)."""
        if ask.trailing_metadata:
            self.context.set_trailing_metadata(tuple(ask.trailing_metadata.items()))
        self.finished = True
        if ask.status_code:
            self.context.abort(grpc.StatusCode(_codes[ask.status_code]), ask.status_message)


_codes = {c.value[0]: c.value for c in grpc.StatusCode}


class Echo(echo_pb2_grpc.EchoServicer):
    def Unary(self, ask, context):
        call = Call("Unary", context)
        call.messages_in = 1
        call.start(ask)
        if not call.sleep(ask.sleep_ms):
            return echo_pb2.Reply()
        call.end(ask)
        return call.reply(ask)

    def ServerStream(self, ask, context):
        call = Call("ServerStream", context)
        call.messages_in = 1
        call.start(ask)
        if not call.sleep(ask.sleep_ms):
            return
        for i in range(ask.count):
            if i and not call.sleep(ask.interval_ms):
                return
            yield call.reply(ask, index=i)
        call.end(ask)

    def ClientStream(self, asks, context):
        call = Call("ClientStream", context)
        first, total = None, 0
        for ask in asks:
            first = first or ask
            call.messages_in += 1
            total += len(ask.payload)
        first = first or echo_pb2.Ask()
        call.start(first)
        if not call.sleep(first.sleep_ms):
            return echo_pb2.Reply()
        call.end(first)
        return call.reply(first, sum=total, count=call.messages_in)

    def Bidi(self, asks, context):
        call = Call("Bidi", context)
        first = None
        for i, ask in enumerate(asks):
            call.messages_in += 1
            if first is None:
                first = ask
                call.start(ask)
            if not call.sleep(ask.sleep_ms):
                return
            yield call.reply(ask, index=i)
        call.end(first or echo_pb2.Ask())


class Health(health.HealthServicer):
    """The standard health service, each Check reported as an event."""

    def Check(self, request, context):
        md = metadata_dict(context.invocation_metadata())
        emit(event="health_check", service=request.service, metadata=md)
        return super().Check(request, context)


def commands(health_servicer):
    """Follows stdin's commands until it ends (the test process gone)."""
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        if cmd.get("cmd") == "health":
            status = health_pb2.HealthCheckResponse.ServingStatus.Value(cmd["status"])
            health_servicer.set(cmd["service"], status)
            emit(event="health_set", id=cmd["id"])
        else:
            emit(event="bad_command", line=line)


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    echo_pb2_grpc.add_EchoServicer_to_server(Echo(), server)
    health_servicer = Health()
    for service in ("", "edge.test.Echo"):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if len(sys.argv) == 4 and sys.argv[1] == "--tls":
        with open(sys.argv[2], "rb") as c, open(sys.argv[3], "rb") as k:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())])
        port = server.add_secure_port("127.0.0.1:0", creds)
    elif len(sys.argv) == 1:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        sys.exit("usage: server.py [--tls CERT KEY]")
    server.start()
    emit(event="listening", port=port)
    # The test holds our stdin: its end (the test process gone) ends the server.
    commands(health_servicer)
    server.stop(0)


if __name__ == "__main__":
    main()
