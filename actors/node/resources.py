"""Memory and disk alarms (vm_memory_monitor, rabbit_disk_monitor and rabbit_alarm's role).

The node measures, at RabbitMQ's cadence, the resident memory of itself and every worker it
supervises (once a second) and the free space of the file system holding its data dir (between
every 100 ms and every 10 s, sooner the closer it is to the limit). Above the memory high
watermark or below the disk free limit an alarm is set; the metadata actor tells every
connection worker, whose readers stop reading publishing connections (connection.blocked) until
every alarm clears. Consumers go on.

Owns:
- `ResourceMonitor`: the limits (settable at run time by leveretctl), the last figures, which
  alarms are on. The probes (RSS of a pid, total RAM, free disk bytes) are injected, so the
  decisions are unit-tested without a machine to fill.
- `parse_bytes`: RabbitMQ's information units ("50MB" = 50,000,000, "1GiB" = 2^30).
"""

from __future__ import annotations

import logging
import os
import re
import threading

log = logging.getLogger("leveret.alarm")

MEMORY_INTERVAL_S = 1.0  # vm_memory_monitor's default check interval
DISK_MIN_INTERVAL_S = 0.1  # rabbit_disk_monitor: checks at most this often...
DISK_MAX_INTERVAL_S = 10.0  # ...and at least this often
DISK_FAST_RATE = 250 * 1024 * 1024  # bytes/s the disk might fill at: how soon to look again

_UNITS = {"": 1, "k": 1024, "kib": 1024, "kb": 1000, "m": 1024 ** 2, "mib": 1024 ** 2,
          "mb": 1000 ** 2, "g": 1024 ** 3, "gib": 1024 ** 3, "gb": 1000 ** 3}


def parse_bytes(value) -> int:
    """rabbit_resource_monitor_misc:parse_information_unit: an int, or digits and a unit."""
    if isinstance(value, bool):
        raise ValueError(f"not an amount of bytes: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not an amount of bytes: {value!r}")
        return value
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(value))
    unit = match and _UNITS.get(match.group(2).lower())
    if not unit:
        raise ValueError(f"not an amount of bytes: {value!r} (e.g. 52428800, 50MB, 1GiB)")
    return int(match.group(1)) * unit


def rss_of(pid: int) -> int:
    """Resident bytes of a process (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def total_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def disk_free(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class ResourceMonitor:
    def __init__(self, config, data_dir: str, rss=rss_of, ram=total_memory, free=disk_free):
        self.rss, self.ram, self.free = rss, ram, free  # probes, injected
        self.data_dir = data_dir  # the file system the disk alarm watches
        self.total_ram = ram()  # bytes of RAM: relative limits are fractions of it
        # memory high watermark: a fraction of RAM, or bytes when absolute is set
        self.memory_relative = float(config.vm_memory_high_watermark)
        self.memory_absolute = parse_bytes(config.vm_memory_high_watermark_absolute or 0)
        # disk free limit: bytes, or a multiple of RAM when relative is set
        self.disk_absolute = parse_bytes(config.disk_free_limit)
        self.disk_relative = float(config.disk_free_limit_relative)
        self.check_limits()
        self.memory_used = 0  # bytes, last measured over the node and its workers
        self.disk_free_bytes = None  # bytes, last measured (None: not yet)
        self.alarms: frozenset = frozenset()  # "memory", "disk"
        self.next_memory = 0.0  # monotonic time of the next memory check
        self.next_disk = 0.0  # and of the next disk check
        self.pids: list = []  # the processes measured last time (the node and its workers)
        self.lock = threading.Lock()  # checks run on the supervision thread and, right after
        # leveretctl changes a limit, on the metadata actor's

    def check_limits(self) -> None:
        if not 0 <= self.memory_relative <= 1:
            raise ValueError(f"vm_memory_high_watermark must be between 0 and 1, "
                             f"not {self.memory_relative}")
        if self.disk_relative < 0:
            raise ValueError(f"disk_free_limit_relative must be >= 0, not {self.disk_relative}")

    # --- limits -------------------------------------------------------------------------------
    def memory_limit(self) -> int:
        if self.memory_absolute:
            return self.memory_absolute
        return int(self.total_ram * self.memory_relative)

    def disk_limit(self) -> int:
        if self.disk_relative:
            return int(self.total_ram * self.disk_relative)
        return self.disk_absolute

    def set_memory_watermark(self, relative: float | None = None,
                             absolute: int | None = None) -> None:
        """rabbitmqctl set_vm_memory_high_watermark [absolute] VALUE; checked at the next tick."""
        if absolute is not None:
            self.memory_absolute = absolute
        else:
            old = self.memory_relative
            self.memory_relative = float(relative)
            try:
                self.check_limits()
            except ValueError:
                self.memory_relative = old
                raise
            self.memory_absolute = 0
        self.next_memory = 0.0

    def set_disk_free_limit(self, absolute: int | None = None,
                            relative: float | None = None) -> None:
        """rabbitmqctl set_disk_free_limit [mem_relative] VALUE; checked at the next tick."""
        if relative is not None:
            if relative < 0:
                raise ValueError(f"mem_relative must be >= 0, not {relative}")
            self.disk_relative = float(relative)
        else:
            self.disk_absolute, self.disk_relative = absolute, 0.0
        self.next_disk = 0.0

    # --- checks -------------------------------------------------------------------------------
    def check(self, now: float, pids=None) -> frozenset | None:
        """Measure what is due (over `pids`, or the last ones); the new set of alarms when it
        changed, else None."""
        with self.lock:
            if pids is not None:
                self.pids = list(pids)
            return self._check(now)

    def _check(self, now: float) -> frozenset | None:
        alarms = set(self.alarms)
        pids = self.pids
        if now >= self.next_memory:
            self.next_memory = now + MEMORY_INTERVAL_S
            self.memory_used = sum(self.rss(p) for p in pids)
            limit = self.memory_limit()
            if self.memory_used > limit:
                if "memory" not in alarms:
                    log.warning("vm_memory_high_watermark set. Memory used:%d allowed:%d",
                                self.memory_used, limit)
                alarms.add("memory")
            elif "memory" in alarms:
                log.warning("vm_memory_high_watermark clear. Memory used:%d allowed:%d",
                            self.memory_used, limit)
                alarms.discard("memory")
        if now >= self.next_disk:
            free = self.disk_free_bytes = self.free(self.data_dir)
            limit = self.disk_limit()
            # rabbit_disk_monitor: look again sooner the closer the free space is to the limit
            wait = 2 * (free - limit) / DISK_FAST_RATE
            self.next_disk = now + min(DISK_MAX_INTERVAL_S, max(DISK_MIN_INTERVAL_S, wait))
            if free < limit:
                if "disk" not in alarms:
                    log.warning("Free disk space is insufficient. Free bytes: %d. Limit: %d",
                                free, limit)
                alarms.add("disk")
            elif "disk" in alarms:
                log.warning("Disk free space is sufficient. Free bytes: %d. Limit: %d",
                            free, limit)
                alarms.discard("disk")
        if alarms == self.alarms:
            return None
        if alarms and not self.alarms:
            log.warning("*** Publishers will be blocked until this alarm clears ***")
        self.alarms = frozenset(alarms)
        return self.alarms

    def status(self) -> dict:
        """What `leveretctl status` shows."""
        return {"alarms": sorted(self.alarms), "memory_used": self.memory_used,
                "memory_limit": self.memory_limit(),
                "vm_memory_high_watermark": (
                    {"absolute": self.memory_absolute} if self.memory_absolute
                    else {"relative": self.memory_relative}),
                "total_memory": self.total_ram,
                "disk_free": self.disk_free_bytes, "disk_free_limit": self.disk_limit()}

