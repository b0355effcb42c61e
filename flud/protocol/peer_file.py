"""Signed node records kept on disk (a node's routing table, a client's
known nodes), so a restart finds the network without its bootstrap nodes.

Version 1 layout: the line b"flud peers v1\\n", then per record u16 length
and the record's bytes (flud/protocol/node_record.py), at most MAX_SAVED.
Written to a temporary file, fsynced and renamed over the old one (a crash
leaves the old file or the new, never half of one). Reading is forgiving:
a missing, foreign or damaged file gives the records that parsed before
the damage (they are checked again when used: signatures, expiry), never
an error that stops a node or a backup.
"""
import os
import struct

from flud.protocol.node_record import MAX_RECORD, RecordRefused, decode_record

MAGIC = b"flud peers v1\n"
MAX_SAVED = 1024
_U16 = struct.Struct(">H")


def save(path: str, records) -> int:
    """Write up to MAX_SAVED records; returns how many."""
    records = list(records)[:MAX_SAVED]
    parts = [MAGIC]
    for record in records:
        raw = record.encode()
        parts.append(_U16.pack(len(raw)) + raw)
    temp = path + ".tmp"
    with open(temp, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    return len(records)


def load(path: str) -> list:
    try:
        with open(path, "rb") as f:
            data = f.read((MAX_RECORD + 2) * MAX_SAVED + len(MAGIC))
    except OSError:
        return []
    if not data.startswith(MAGIC):
        return []
    records, pos = [], len(MAGIC)
    while pos + 2 <= len(data) and len(records) < MAX_SAVED:
        length = _U16.unpack_from(data, pos)[0]
        raw = data[pos + 2:pos + 2 + length]
        if length > MAX_RECORD or len(raw) != length:
            break
        try:
            records.append(decode_record(raw))
        except RecordRefused:
            break
        pos += 2 + length
    return records
