"""Fault injection for tests/faults/test_internal_messages.py, not production code: a Python
process started with this folder on PYTHONPATH imports it at start-up (site.py). In a Leveret
process it makes a message for the actor named "crash-the-receive-loop" raise out of the
transport's receive path, as a bug there would: the production code has no such hook, and after
the checks on receipt no message can make it raise."""

try:
    from actors import transport as _transport
except ImportError:  # not a Leveret process
    _transport = None

if _transport is not None:
    _deliver_local = _transport.Transport._deliver_local

    def _faulty_deliver_local(self, name, msg):
        if name == "crash-the-receive-loop":
            raise RuntimeError("injected fault in the receive loop")
        return _deliver_local(self, name, msg)

    _transport.Transport._deliver_local = _faulty_deliver_local
