"""actors/runtime/eventloop.py: a reader callback and the work it defers run in one loop turn."""
import socket
import threading

from actors.runtime.eventloop import EventLoop


def _run_reader(loop: EventLoop, body) -> list:
    """Make a socket readable and let `body(order)` run as its reader callback; the order in
    which things ran, once the loop has settled."""
    a, b = socket.socketpair()
    order: list = []
    done = threading.Event()

    def readable():
        a.recv(1)
        loop.loop.remove_reader(a.fileno())
        # a plain call_soon runs on the next iteration: after everything deferred to this turn
        loop.loop.call_soon(lambda: (order.append("next iteration"), done.set()))
        body(order)

    loop.call(loop.add_reader, a.fileno(), readable)
    b.send(b"x")
    assert done.wait(5)
    a.close()
    b.close()
    return order


def test_deferred_work_runs_before_the_loop_polls_again():
    loop = EventLoop("turns")
    try:
        def body(order):
            order.append("read")
            loop.soon(lambda: (order.append("a"), loop.soon(lambda: order.append("b"))))
            loop.soon(lambda: order.append("c"))

        assert _run_reader(loop, body) == ["read", "a", "c", "b", "next iteration"]
    finally:
        loop.stop()


def test_a_failing_piece_does_not_lose_the_ones_after_it():
    loop = EventLoop("turns-fail")
    seen = []
    loop.loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx["exception"]))
    try:
        def body(order):
            loop.soon(lambda: 1 / 0)
            loop.soon(lambda: order.append("after the failure"))

        assert _run_reader(loop, body) == ["after the failure", "next iteration"]
        assert len(seen) == 1 and isinstance(seen[0], ZeroDivisionError)
    finally:
        loop.stop()


def test_outside_a_turn_soon_is_a_turn_of_its_own():
    loop = EventLoop("turns-outside")
    order = []
    done = threading.Event()
    try:
        def first():
            order.append("first")
            loop.soon(lambda: (order.append("deferred"), done.set()))

        loop.call(loop.soon, first)
        assert done.wait(5)
        assert order == ["first", "deferred"]
    finally:
        loop.stop()
