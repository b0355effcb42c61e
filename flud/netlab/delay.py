"""The lab's links onto its switch, with delay, in user space: for kernels
without netem (CONFIG_NET_SCH_NETEM; this machine's has none, and no
modules to load).

`python -m flud.netlab.delay SPEC_JSON` makes, for each link of the spec,
two TAP devices: one in the host's (or router's) namespace under the name
the veth end would have had (eth0, wan), one in the core's namespace (the
switch's port, plugged into the bridge by build.py as a veth end would
be), and copies Ethernet frames between them: what the host sends goes to
the switch at once, what the switch sends towards the host waits
`delay_ms` first. Any two hosts then see 2 x delay_ms of round trip, as
with the netem qdiscs build.py puts on the switch's ports where the kernel
has them. Real node traffic crosses it (TCP, TLS, everything): nothing in
flud knows.

It prints "ready" once every device exists, then runs until SIGTERM (the
lab records its pid and start time in lab.json; `lab down` stops it). Its
devices go with it. Frames wait in one queue in arrival order (the delay is one
constant), at most MAX_QUEUED; past that, or when a device's queue is
full, a frame is dropped, as a congested link drops it (TCP resends).

SPEC: {"delay_ms": D, "links": [[host_ns, host_if, core_ns, core_if, mac]]}
"""
import collections
import fcntl
import json
import os
import select
import signal
import socket
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000
SIOCSIFHWADDR = 0x8924
ARPHRD_ETHER = 1
FRAME = 65536
MAX_QUEUED = 50_000
CLONE_NEWNET = 0x40000000


_libc = None


def _setns_fd(fd: int) -> None:
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        import ctypes
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def make_tap(namespace: str, name: str, mac: str = "") -> int:
    """A TAP device `name` in `namespace` (this process's fd to it); the
    process is back in its own namespace after."""
    from flud.netlab.build import enter_namespace
    home_fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        enter_namespace(namespace)
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
            if mac:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    address = bytes.fromhex(mac.replace(":", ""))
                    fcntl.ioctl(s, SIOCSIFHWADDR, struct.pack("16sH6s8x", name.encode(),
                                                              ARPHRD_ETHER, address))
        finally:
            _setns_fd(home_fd)
    finally:
        os.close(home_fd)
    return fd


class Forwarder:
    def __init__(self, delay_ms: float, links):
        self.delay = delay_ms / 1000.0
        self.peer = {}          # fd -> the fd its frames go to
        self.delayed = set()    # fds whose frames wait (the switch's ports)
        self.queue = collections.deque()
        self.counters = {"frames": 0, "dropped": 0}
        for host_ns, host_if, core_ns, core_if, mac in links:
            host = make_tap(host_ns, host_if, mac)
            core = make_tap(core_ns, core_if)
            self.peer[host], self.peer[core] = core, host
            self.delayed.add(core)

    def _write(self, fd: int, frame: bytes) -> None:
        try:
            os.write(fd, frame)
            self.counters["frames"] += 1
        except (BlockingIOError, OSError):
            self.counters["dropped"] += 1

    def run(self, stop) -> None:
        poller = select.epoll()
        for fd in self.peer:
            poller.register(fd, select.EPOLLIN)
        while not stop():
            now = time.monotonic()
            while self.queue and self.queue[0][0] <= now:
                _, fd, frame = self.queue.popleft()
                self._write(fd, frame)
            timeout = max(0.0, self.queue[0][0] - now) if self.queue else 1.0
            for fd, _ in poller.poll(timeout):
                for _ in range(64):             # a burst at a time, then the timers
                    try:
                        frame = os.read(fd, FRAME)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:             # the device went with its namespace
                        poller.unregister(fd)
                        break
                    if fd in self.delayed and self.delay:
                        if len(self.queue) >= MAX_QUEUED:
                            self.counters["dropped"] += 1
                        else:
                            self.queue.append((time.monotonic() + self.delay,
                                               self.peer[fd], frame))
                    else:
                        self._write(self.peer[fd], frame)


def main(argv) -> int:
    spec = json.loads(argv[0])
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    forwarder = Forwarder(spec["delay_ms"], spec["links"])
    print("ready", flush=True)
    forwarder.run(lambda: bool(stopping))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
