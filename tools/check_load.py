#!/usr/bin/env python3
"""check_load: traffic-mix experiments on a flud testnet.

    .venv/bin/python tools/check_load.py --testnet /tmp/t --clients 2 --sessions 8 \
        --mix retrieve=80,store=20 --size exp:10k --duration 10

    .venv/bin/python tools/check_load.py --testnet /tmp/t --sweep

Reports ops/s, bytes/s up and down, latency and time to first byte (avg,
p50, p99) per op type, errors by kind, and each node's CPU %, RSS and bytes
in/out, every --interval seconds and at the end; --json and --plot write the
same figures. See docs/check_load.md. The code lives in tools/loadgen/.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools.loadgen.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
