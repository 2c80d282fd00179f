"""The metadata actor's part in where a queue's copies live: classic mirrors (ha-mode policies,
rabbit_mirror_queue_misc), promotion of a mirror when its master's node is gone, and a quorum
queue's leader chosen among its members' logs as Raft's election would (played by the cluster
leader). Everything here acts only in a cluster (metadata_cluster.py has the log and members).
"""

from __future__ import annotations

import logging
import time
import zlib

from actors import messages as m
from actors import metadata_ops as ops
from actors.core import mirroring, policies, quorum, stream, stream_replication
from actors.node.metadata_dispatch import handles
from actors.store import quorum_log
from actors.store.stream_position import log_position as stream_log_position

log = logging.getLogger("leveret.cluster")

ELECTION_WAIT_S = 2.0  # how long a quorum queue's election waits for its members' answers
ELECTION_RETRY_S = 2.0  # an election without a majority of answers asks again after this


class ReplicasMixin:
    """Mixed into Metadata: mirrors, promotion and quorum elections."""

    def _drop_queue(self, q) -> None:
        """Remove a queue whose home is gone (nobody is left to answer a delete)."""
        vhost, name = q["vhost"], q["name"]
        self._change(["router", "remove_queue", [vhost, name]], ["queue_del", vhost, name])
        self._auto_delete_exchanges(vhost)

    def _home_lost(self, q) -> None:
        """Leader: the home node of `q` is gone. A quorum queue elects the member with the
        longest log; otherwise the oldest in-sync mirror that is up takes over, or a durable
        queue waits for its node and a transient one goes."""
        if self._is_quorum(q):
            self._change(["queue_put", dict(q, address=None, electing=True)])
            self._elect((q["vhost"], q["name"]))
            return
        if self._promote_mirror(q):
            return
        if q["durable"] and not q["exclusive"]:
            self._change(["queue_put", dict(q, address=None)])
        else:
            self._drop_queue(q)

    def _promote_mirror(self, q) -> bool:
        """Leader: the master of a mirrored classic queue `q` is gone (its node, or its queue
        worker): the oldest in-sync mirror that is up becomes the master (RabbitMQ's
        ha-promote-on-failure: when-synced; its mirrors keep nothing on disk, so only the
        synchronised ones hold every confirmed message). False when there is none."""
        up = {k for k, v in self.members.items() if v.get("up")}
        synced = [s for s in q.get("synced") or [] if s in up]
        heir = next((x for x in q.get("mirrors") or [] if x in synced), None)
        if heir is None:
            return False
        log.warning("cluster: queue '%s' in vhost '%s' moves to its mirror on %s",
                    q["name"], q["vhost"], self.members[heir].get("name", heir))
        # the next epoch, as a quorum queue's promotion: the event log tells this master's
        # copies from the deposed one's by it (a classic master keeps no log to compare)
        self._change(["queue_put", self._moved_to(q, heir,
                                                  epoch=int(q.get("epoch") or 0) + 1)])
        return True

    def _moved_to(self, q, heir, **more) -> dict:
        """`q` homed on its member `heir` (a promotion), with the other mirrors that are up,
        on the queue worker of `heir` the name picks; `more` added."""
        up = {k for k, v in self.members.items() if v.get("up")}
        return dict(q, home=heir, mirrors=[x for x in q.get("mirrors") or []
                                           if x != heir and x in up],
                    synced=[s for s in q.get("synced") or [] if s != heir and s in up],
                    address=None, promoted=True,
                    worker=mirror_worker(q, self.members[heir].get("queue_workers", 1)), **more)

    # --- mirrored queues ----------------------------------------------------------------------------
    def _mirrors_for(self, q) -> list:
        """Members that should hold a mirror of `q`: x-ha-mode/x-ha-params arguments, else the
        effective policy's ha-mode/ha-params (mirroring.mirror_members: all, exactly N copies
        counting the master, or the listed nodes); a quorum queue's: its group size
        (actors/core/quorum.py) less the master."""
        if self.cluster is None:
            return []
        mode, params = self._ha_mode(q)
        up = [x for x in self.config.cluster_nodes if self.members.get(x, {}).get("up")]
        names = {x: self.members.get(x, {}).get("name") for x in up}
        return mirroring.mirror_members(mode, params, q.get("home"), q.get("mirrors") or [],
                                        up, names)

    def _ha_mode(self, q) -> tuple:
        """(ha-mode, ha-params) of `q`: its x-ha-* arguments, else its effective policy's."""
        args = q.get("arguments") or {}
        mode, params = args.get("x-ha-mode"), args.get("x-ha-params")
        if quorum.is_quorum(args):  # its members: the group size, ha policies do not apply
            mode, params = "exactly", quorum.group_size(args, len(self.config.cluster_nodes))
        elif stream.is_stream(args):  # its members: the initial cluster size (docs/streams.md)
            mode, params = "exactly", self._group_size(q)
        elif mode is None:
            p = policies.effective(self.policies, q["vhost"], q["name"], "queues",
                                   self.op_policies)
            mode, params = p.get("ha-mode"), p.get("ha-params")
        if isinstance(mode, bytes):
            mode = mode.decode()
        return mode, params

    def _remirror(self) -> None:
        """Leader: bring every queue's mirror list in line with its policy and the members up
        (one queue that cannot be worked out is logged and left as it is, not every other)."""
        for q in list(self.queues.values()):
            home = q.get("home")
            if not home or not self.members.get(home, {}).get("up"):
                continue
            try:
                mirrors = self._mirrors_for(q)
            except Exception:  # noqa: BLE001 - the others still get their mirrors
                log.exception("cluster: the mirrors of queue '%s' in vhost '%s' could not be "
                              "worked out; left as they are", q["name"], q["vhost"])
                continue
            if mirrors != list(q.get("mirrors") or []):
                synced = [s for s in q.get("synced") or [] if s in mirrors]
                self._change(["queue_put", dict(q, mirrors=mirrors, synced=synced)])

    @handles(ops.QueueSynced)
    def op_queue_synced(self, rpc, vhost, name, member):
        q = self.queues.get((vhost, name))
        if q and member in (q.get("mirrors") or []) and member not in (q.get("synced") or []):
            new = dict(q, synced=[*(q.get("synced") or []), member])
            if self._is_quorum(q):  # its log counts from now on (until another replaces it)
                new["logs"] = quorum.trim_logs([*self._logs(q), member], q.get("home"),
                                               q.get("mirrors") or [], self._group_size(q))
            self._change(["queue_put", new])
        return None

    # --- quorum queues: choosing a leader (Raft's election, played by the cluster leader) ------
    def _is_quorum(self, q) -> bool:
        """A queue whose leader is elected: a quorum queue, or a (replicated) stream."""
        args = q.get("arguments")
        return self.cluster is not None and q["durable"] and (
            quorum.is_quorum(args) or stream.is_stream(args))

    def _group_size(self, q) -> int:
        if stream.is_stream(q.get("arguments")):
            return q.get("stream_size") or stream_replication.cluster_size(
                q.get("arguments"), len(self.config.cluster_nodes))
        return quorum.group_size(q.get("arguments"), len(self.config.cluster_nodes))

    @staticmethod
    def _logs(q) -> list:
        """The members besides the leader whose logs count, oldest first (a queue of before
        `logs` existed: its synchronised mirrors)."""
        logs = q.get("logs")
        return list(q.get("synced") or []) if logs is None else list(logs)

    def _voters(self, q) -> list:
        """The members whose logs count: the leader, then the others oldest first."""
        home = q.get("home")
        return [home, *quorum.trim_logs(self._logs(q), home, q.get("mirrors") or [],
                                        self._group_size(q))]

    def _elect(self, key) -> None:
        """Leader: quorum queue `key` has no leader (its node died, or its queue worker): ask
        every member whose logs count and whose node is up for its log's end (LogQuery; one
        round trip, ELECTION_WAIT_S at most); `_decide` once all answered or the time is up."""
        q = self.queues.get(key)
        if q is None or not q.get("electing") or not self.leading:
            self.elections.pop(key, None)
            return
        self.election_ref += 1
        voters = self._voters(q)
        asked = {v for v in voters if self.members.get(v, {}).get("up")
                 and self.members[v].get("metadata")}
        election = {"ref": self.election_ref, "voters": voters, "asked": asked,
                    "answers": {}, "deadline": time.monotonic() + ELECTION_WAIT_S,
                    "retry": None, "logged": self.elections.get(key, {}).get("logged")}
        self.elections[key] = election
        query = m.LogQuery(key[0], key[1], self.address, self.election_ref)
        for v in asked:
            if v == self.me:
                self._log_query(query)
            else:
                self.transport.send(self.members[v]["metadata"], query)
        if not asked:
            self._decide(key)

    def _log_query(self, msg: m.LogQuery) -> None:
        """Any node: the leader asks how far our log of a quorum queue goes (no answer when it
        cannot be read: a member that does not answer does not vote)."""
        try:
            q = self.queues.get((msg.vhost, msg.name))
            if q is not None and stream.is_stream(q.get("arguments")):
                pos = stream_log_position(self.config, msg.vhost, msg.name)
            else:
                pos = quorum_log.position(self.config, msg.vhost, msg.name)
        except Exception:  # noqa: BLE001 - an unreadable log is no vote
            log.exception("cluster: could not read the log of quorum queue '%s' in vhost '%s'",
                          msg.name, msg.vhost)
            return
        answer = m.LogPosition(msg.vhost, msg.name, self.me, msg.ref, pos)
        if msg.reply_to == self.address:
            self._log_position(answer)
        else:
            self.transport.send(msg.reply_to, answer)

    def _log_position(self, msg: m.LogPosition) -> None:
        key = (msg.vhost, msg.name)
        election = self.elections.get(key)
        if election is None or election["ref"] != msg.ref or msg.member not in election["asked"]:
            return  # (a late answer to an election decided or asked again)
        pos = msg.position
        if pos is not None and not (len(pos) == 2 and all(type(x) is int for x in pos)):
            return  # (not a position: no vote)
        election["answers"][msg.member] = None if pos is None else (pos[0], pos[1])
        if election["retry"] is None and set(election["answers"]) >= election["asked"]:
            self._decide(key)

    def _check_elections(self, now: float) -> None:
        for key, election in list(self.elections.items()):
            if election["retry"] is not None:
                if now >= election["retry"]:
                    self._elect(key)
            elif now >= election["deadline"]:
                self._decide(key)

    def _decide(self, key) -> None:
        """Leader: the answers are in (or the time is up): the member with the longest log
        among a majority of the members leads (one log entry); without such a majority the
        queue waits (its consumers and publishers as for a queue whose node is down) and the
        members are asked again ELECTION_RETRY_S later."""
        election = self.elections.get(key)
        q = self.queues.get(key)
        if election is None or q is None or not q.get("electing") or not self.leading:
            self.elections.pop(key, None)
            return
        size = self._group_size(q)
        winner = quorum.elect(election["voters"], election["answers"], size)
        if winner is None or not self.members.get(winner, {}).get("up"):
            election["retry"] = time.monotonic() + ELECTION_RETRY_S
            said = (len(election["answers"]), sum(1 for p in election["answers"].values() if p))
            if election.get("logged") != said:  # (once per outcome, not every retry)
                election["logged"] = said
                log.warning("cluster: %s '%s' in vhost '%s' has no leader and waits: "
                            "%d of its %d members answered (%d with a complete log), a "
                            "majority (%d) with a complete log is needed", _kind(q), q["name"],
                            q["vhost"], said[0], size, said[1], quorum.majority(size))
            return
        del self.elections[key]
        answers = {self._member_name(k): v for k, v in election["answers"].items()}
        with self._one_entry():
            if winner == q.get("home"):
                log.warning("cluster: %s '%s' in vhost '%s' restarts on %s, which "
                            "has the longest log (%s)", _kind(q), q["name"], q["vhost"],
                            self._member_name(winner), answers)
                # the next epoch too: its messages from now on must compare above those a
                # member that did not vote may hold beyond its log's end (the restarted
                # leader numbers from its own index's end, which a member may have passed:
                # Raft's new term for a leader elected again)
                self._change(["queue_put", dict(q, electing=False, address=None,
                                                epoch=int(q.get("epoch") or 0) + 1)])
            else:
                log.warning("cluster: %s '%s' in vhost '%s' moves to its member on "
                            "%s, which has the longest log (%s)", _kind(q), q["name"], q["vhost"],
                            self._member_name(winner), answers)
                self._promote_to(q, winner)
            self._remirror()

    def _promote_to(self, q, heir) -> None:
        """Leader: quorum queue `q`'s member on `heir` leads, as the next epoch (its members'
        logs of the former leader are compared below those of the new one); the former
        leader's log still counts (it is a member that is down)."""
        moved = self._moved_to(q, heir, electing=False, epoch=int(q.get("epoch") or 0) + 1)
        moved["logs"] = quorum.trim_logs([x for x in [q.get("home"), *self._logs(q)]
                                          if x != heir], heir, moved["mirrors"],
                                         self._group_size(q))
        self._change(["queue_put", moved])

    def _start_mirrors(self, q) -> None:
        """This node holds a mirror of `q`: start it on the queue worker the name picks."""
        if self.paused or self.me not in (q.get("mirrors") or ()) or q.get("home") == self.me:
            return
        w = self.workers.get(("queue", mirror_worker(q, self.n_queue_workers)))
        if w is not None:
            qdef = {k: v for k, v in q.items() if k != "address"}
            self.transport.send(w.control, m.StartQueue(qdef, self.address, False))


def _kind(q) -> str:
    """What the logs call a queue whose leader is elected."""
    return "stream" if stream.is_stream(q.get("arguments")) else "quorum queue"


def mirror_worker(q, n_workers: int) -> int:
    """The queue worker of a node that holds the mirror of `q` (and the master, if promoted)."""
    return zlib.crc32(f"{q['vhost']}\x1f{q['name']}".encode()) % max(1, n_workers)
