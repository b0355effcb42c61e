#!/usr/bin/env python3
"""Run one flud client command and count what it said to the nodes.

    python tools/bench/count_client.py OUT.json -- check --home H --json

The command runs in this process, as `python -m flud ...` would run it, with
the protocol's Connection wrapped: every request it sends is counted by
operation, and every connection's transport bytes (TLS included) are summed
when the command ends. OUT.json gets {"requests": {OP: count}, "bytes_out",
"bytes_in", "connections"}. Measuring the client itself leaves out what the
nodes say to each other meanwhile (membership gossip), which their STATS
counters would mix in.
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def counted(argv: list, out_path: str) -> int:
    from flud.cli.main import main
    from flud.protocol import connection
    from flud.protocol.codec import Op

    requests, connections = {}, []
    plain_init, plain_request = connection.Connection.__init__, connection.Connection.request

    def init(self, *args, **kwargs):
        plain_init(self, *args, **kwargs)
        connections.append(self)

    def request(self, op, *args, **kwargs):
        name = Op(op).name if op in Op._value2member_map_ else str(op)
        requests[name] = requests.get(name, 0) + 1
        return plain_request(self, op, *args, **kwargs)

    connection.Connection.__init__ = init
    connection.Connection.request = request
    code = 1
    try:
        code = main(argv)
    finally:
        with open(out_path, "w") as f:
            json.dump({"requests": requests, "connections": len(connections),
                       "bytes_out": sum(c.bytes_out for c in connections),
                       "bytes_in": sum(c.bytes_in for c in connections)}, f)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    sys.exit(counted(sys.argv[3:], sys.argv[1]))
