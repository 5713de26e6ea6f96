#!/usr/bin/env python3
"""Runs one call of edge.test.Echo (echo.proto, compiled into a directory on PYTHONPATH) and prints one
JSON line (frontend/tests/it/harness/grpc.rs reads it):

  {"code": 14, "code_name": "UNAVAILABLE", "details": "...", "initial_metadata": {...},
   "trailing_metadata": {...}, "messages": N, "bytes": N, "sum": N, "count": N, "elapsed_ms": F}

(messages/bytes: Replies and their payload bytes received; sum/count: the last Reply's fields.)

Usage: client.py --target HOST:PORT --case unary|server_stream|client_stream|bidi
                 [--ask JSON] [--messages N] [--payload-bytes N] [--timeout SECONDS]
                 [--metadata KEY=VALUE]... [--tls-ca FILE [--server-name NAME]]

--ask: the Ask's fields as JSON (see echo.proto), sent in every message; --messages: Asks sent on a
client or bidi stream; --payload-bytes: bytes of payload in each Ask; --timeout: the call's deadline
(sent as grpc-timeout); --tls-ca: TLS trusting this CA (ALPN h2), else h2c (prior knowledge).
"""

import argparse
import json
import sys
import time

import grpc
from google.protobuf import json_format

import echo_pb2
import echo_pb2_grpc


def metadata_dict(md):
    out = {}
    for k, v in md or ():
        out[k] = v.hex() if isinstance(v, bytes) else v
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--case", required=True, choices=["unary", "server_stream", "client_stream", "bidi"])
    p.add_argument("--ask", default="{}")
    p.add_argument("--messages", type=int, default=1)
    p.add_argument("--payload-bytes", type=int, default=0)
    p.add_argument("--timeout", type=float)
    p.add_argument("--metadata", action="append", default=[])
    p.add_argument("--tls-ca")
    p.add_argument("--server-name")
    a = p.parse_args()

    ask = json_format.Parse(a.ask, echo_pb2.Ask())
    ask.payload = b"p" * a.payload_bytes
    metadata = tuple(tuple(m.split("=", 1)) for m in a.metadata)
    # No proxy from the environment: the call goes straight to the target.
    options = [("grpc.enable_http_proxy", 0)]
    if a.tls_ca:
        with open(a.tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        if a.server_name:
            options.append(("grpc.ssl_target_name_override", a.server_name))
        channel = grpc.secure_channel(a.target, creds, options=options)
    else:
        channel = grpc.insecure_channel(a.target, options=options)
    stub = echo_pb2_grpc.EchoStub(channel)
    kw = {"timeout": a.timeout, "metadata": metadata}
    asks = lambda: iter([ask] * a.messages)

    result = {"messages": 0, "bytes": 0, "sum": 0, "count": 0}

    def took(reply):
        result["messages"] += 1
        result["bytes"] += len(reply.payload)
        result["sum"], result["count"] = reply.sum, reply.count

    started = time.monotonic()
    if a.case == "unary":
        call = stub.Unary.future(ask, **kw)
        try:
            took(call.result())
        except grpc.RpcError:
            pass
    elif a.case == "client_stream":
        call = stub.ClientStream.future(asks(), **kw)
        try:
            took(call.result())
        except grpc.RpcError:
            pass
    else:
        call = (stub.ServerStream(ask, **kw) if a.case == "server_stream" else stub.Bidi(asks(), **kw))
        try:
            for reply in call:
                took(reply)
        except grpc.RpcError:
            pass
    code = call.code()
    result.update(
        code=code.value[0],
        code_name=code.name,
        details=call.details() or "",
        initial_metadata=metadata_dict(call.initial_metadata()),
        trailing_metadata=metadata_dict(call.trailing_metadata()),
        elapsed_ms=(time.monotonic() - started) * 1000,
    )
    print(json.dumps(result), flush=True)
    channel.close()


if __name__ == "__main__":
    main()
