"""Network partitions between nodes on loopback addresses, made with nftables.

Why not `ip saddr A ip daddr B drop`: every node listens on its own address (127.0.0.11 ...),
but its *outgoing* connections (pysyncobj's Raft links, ZeroMQ PUSH sockets to the other nodes'
workers) are not bound to it: Linux gives them the loopback route's source, 127.0.0.1. So the
sender of a connection is told by the process that opened it: every node runs with a group id of
its own (its workers inherit it), and the first packet a node's socket sends on a new
connection stamps the connection's conntrack mark with that gid. A packet is then dropped, in
either direction, when (mark of the connection's initiator, address the connection was opened
to) is a pair of the `cut` set. Connections of the test's own clients (gid 0) are never marked:
clients always reach their node, as in Jepsen.

Only our table is touched: `ip leveret_jepsen_<pid>_<n>` with one chain on the output hook, every
rule restricted to `oifname "lo"`; it is deleted by `close()` (call it in a finally) and by an
atexit hook, and tables of this name whose process is gone are removed at the next start. The
ruleset is never flushed.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import subprocess

TABLE_PREFIX = "leveret_jepsen_"
_serial = itertools.count(1)  # tables of one process: leveret_jepsen_<pid>_<n>


class Unavailable(Exception):
    """nftables cannot be used here (the message says why)."""


def _nft(*args: str, stdin: str | None = None) -> str:
    res = subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True,
                         timeout=20)
    if res.returncode != 0:
        raise subprocess.CalledProcessError(res.returncode, ["nft", *args], res.stdout,
                                            res.stderr)
    return res.stdout


def available() -> str | None:
    """None when nft can be used, else why not."""
    if shutil.which("nft") is None:
        return ("nft is not installed (as root: apt-get install nftables; `make jepsen` and "
                "`make test` install it)")
    if os.geteuid() != 0:
        return "nftables needs root (CAP_NET_ADMIN) to add a table"
    return None


def _remove_stale() -> None:
    """Tables of ours left by a run that was killed (its pid is gone)."""
    try:
        out = _nft("list", "tables", "ip")
    except (subprocess.CalledProcessError, OSError):
        return
    for name in re.findall(rf"table ip ({TABLE_PREFIX}(\d+)_\d+)\b", out):
        table, pid = name
        if int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            try:
                _nft("delete", "table", "ip", table)
            except subprocess.CalledProcessError:
                pass


class Partitioner:
    """Cuts and heals links between nodes. `nodes`: {name: (gid, address)}."""

    def __init__(self, nodes: dict):
        why = available()
        if why:
            raise Unavailable(why)
        self.nodes = dict(nodes)
        self.table = f"{TABLE_PREFIX}{os.getpid()}_{next(_serial)}"
        self.cut_pairs: set = set()  # frozensets of two node names, cut now
        _remove_stale()
        marks = " ".join(
            f'oifname "lo" ct mark 0 ct direction original meta skgid {gid} ct mark set {gid}\n'
            for gid, _ in self.nodes.values())
        ruleset = f"""
table ip {self.table} {{
  set cut {{ type mark . ipv4_addr; }}
  chain out {{
    type filter hook output priority 0; policy accept;
    {marks}
    oifname "lo" ct mark . ct original ip daddr @cut counter drop
  }}
}}
"""
        try:
            _nft("-f", "-", stdin=ruleset)
        except subprocess.CalledProcessError as e:
            raise Unavailable(f"nft could not add table {self.table}: {e.stderr.strip()}") \
                from None
        except OSError as e:
            raise Unavailable(f"nft could not run: {e}") from None
        atexit.register(self.close)

    def _elements(self, pairs) -> str:
        out = []
        for pair in pairs:
            a, b = sorted(pair)
            (ga, aa), (gb, ab) = self.nodes[a], self.nodes[b]
            out += [f"{ga} . {ab}", f"{gb} . {aa}"]
        return ", ".join(out)

    def cut(self, a: str, b: str) -> None:
        """No packet between a and b either way, on connections old or new."""
        pair = frozenset((a, b))
        if pair in self.cut_pairs:
            return
        _nft("add", "element", "ip", self.table, "cut", "{ " + self._elements([pair]) + " }")
        self.cut_pairs.add(pair)

    def partition(self, *groups) -> None:
        """Nodes in different groups cannot talk (nodes in no group keep every link)."""
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self.cut(a, b)

    def heal(self) -> None:
        if self.cut_pairs:
            _nft("flush", "set", "ip", self.table, "cut")
            self.cut_pairs.clear()

    def dropped(self) -> int:
        """Packets dropped so far (the rule's counter)."""
        out = _nft("list", "chain", "ip", self.table, "out")
        m = re.search(r"counter packets (\d+)", out)
        return int(m.group(1)) if m else 0

    def close(self) -> None:
        """Delete our table (idempotent)."""
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass
        try:
            _nft("delete", "table", "ip", self.table)
        except (subprocess.CalledProcessError, OSError):
            pass
        self.cut_pairs.clear()
