"""The few things flud reads from Linux's /proc, read in one place.

Standard library only and cheap to import: a node imports it at start (its
memory monitor samples own_rss(), its node.json carries its start ticks).
Each reader returns None when the process (or the field) is not there;
own_rss() raises OSError where there is no /proc, so callers can fall back.
"""
import os

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# Fields of /proc/PID/stat counted after the command name, which is in
# parentheses and may itself hold spaces and parentheses: "state" is the
# first (field 3 in proc(5)), "starttime" the twentieth (field 22).
_STATE = 0
_START = 19


def _stat_fields(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields if len(fields) > _START else None


def process_stat(pid):
    """(state, start ticks) of a process from one read, or None if there is
    no such process. state is proc(5)'s letter: "R", "S", "Z" (a zombie)...
    Start ticks (clock ticks since boot) with the pid name one process for
    good: pids get reused."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        return fields[_STATE], int(fields[_START])
    except ValueError:
        return None


def start_ticks(pid):
    """The process's start time in clock ticks since boot, or None."""
    stat = process_stat(pid)
    return stat[1] if stat else None


def own_rss() -> int:
    """This process's resident set size in bytes, from /proc/self/statm (what
    psutil reads on Linux, without psutil's 4.9 MB import). OSError where
    there is no /proc."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE_SIZE


def status_bytes(pid, field: str):
    """A size line of /proc/PID/status ("VmRSS", "VmHWM", ...) in bytes, or
    None if the process has no such line. pid may be "self". OSError if
    there is no such process."""
    prefix = field + ":"
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(prefix):
                return int(line.split()[1]) * 1024  # the kernel prints kB
    return None


def command_line(pid):
    """The process's command line, its arguments joined by spaces, or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def machine_cpu_ticks():
    """(busy, total) clock ticks of every CPU since boot, from /proc/stat
    (busy: all but idle and iowait)."""
    with open("/proc/stat") as f:
        values = list(map(int, f.readline().split()[1:]))
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values[:8]) - idle, sum(values[:8])


def local_addresses() -> list:
    """This network namespace's own unicast addresses but loopback and
    link-local, IPv4 first (from /proc/net/fib_trie's /32 LOCAL entries and
    /proc/net/if_inet6's global-scope ones, ULAs included); [] where they
    cannot be read. A node listening on every address advertises these as
    its candidates (flud/node/service.py)."""
    import ipaddress
    found = []
    try:
        with open("/proc/net/fib_trie") as f:
            previous = ""
            for line in f:
                text = line.strip()
                if text.startswith("/32 host LOCAL") and previous.startswith("|-- "):
                    found.append(previous[4:])
                previous = text
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 4 and fields[3] == "00":   # scope global
                    found.append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    except (OSError, ValueError):
        pass
    kept = []
    for text in found:
        address = ipaddress.ip_address(text)
        if not (address.is_loopback or address.is_link_local) and text not in kept:
            kept.append(text)
    return kept
