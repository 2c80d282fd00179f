"""The machine a benchmark ran on, as its results record it: host, CPUs, Python, CPU model."""

from __future__ import annotations

import os
import platform
import sys


def machine_info() -> dict:
    info = {"hostname": platform.node(), "cpus": os.cpu_count(), "python": sys.version.split()[0],
            "platform": platform.platform()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info
