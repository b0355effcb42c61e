"""The lines `flud ls` prints: a snapshot of the list, an entry of a
directory. Apart from browse.py (which walks the trees on the nodes) so
that the snapshot list, read from the local index alone, loads neither
Twisted nor the repository's code."""
import time

from flud.cli.exits import EXIT_OK
from flud.client.progress import human_bytes


def snapshot_line(snapshot_id, created, host, paths, tags, files, size) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))
    tagged = f"  [{', '.join(tags)}]" if tags else ""
    return (f"snapshot {snapshot_id:>4}  {when}  {host or '-':<12} {files:>7} files "
            f"{human_bytes(size):>10}  {' '.join(paths)}{tagged}")


def entry_line(path, kind, mode, mtime_ns, size, target="") -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime_ns / 1e9))
    extra = f" -> {target}" if target else ""
    return f"{kind} {mode:04o} {size:>12} {when} {path}{extra}"


def list_local(index) -> int:
    """The snapshots the local index knows (no network)."""
    for s in index.snapshots():
        print(snapshot_line(s["id"], s["created"], s.get("host", ""), s.get("roots", ()),
                            s.get("tags", ()), s.get("files", 0), s.get("bytes", 0)))
    return EXIT_OK
