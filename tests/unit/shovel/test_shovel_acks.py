"""Ack-mode bookkeeping: which source deliveries a shovel acks given what the destination
confirmed (rabbit_amqp091_shovel's unacked map, confirm_to_inbound/4)."""

from __future__ import annotations

from actors.shovel.acks import NO_ACK, ON_CONFIRM, ON_PUBLISH, AckBook, SourceAck


def test_on_confirm_acks_nothing_until_the_destination_confirms():
    book = AckBook(ON_CONFIRM)
    assert book.published(7) == [] and book.published(8) == []
    assert book.in_flight == 2
    assert book.confirmed(1, False, True) == ([SourceAck(7, False, True)], 1)
    assert book.confirmed(2, False, True) == ([SourceAck(8, False, True)], 1)
    assert book.in_flight == 0


def test_a_multiple_confirm_acks_the_source_once_with_multiple():
    book = AckBook(ON_CONFIRM)
    for tag in (1, 2, 3, 4):
        book.published(tag)
    assert book.confirmed(3, True, True) == ([SourceAck(3, True, True)], 3)
    assert book.in_flight == 1


def test_a_multiple_confirm_never_covers_a_tag_still_waiting():
    """Were a lower source tag still waiting behind the confirmed ones (published later),
    a multiple ack up to the highest would ack it too: each tag is acked on its own."""
    book = AckBook(ON_CONFIRM)
    for tag in (5, 9, 1):  # seqs 1, 2, 3
        book.published(tag)
    acks, n = book.confirmed(2, True, True)
    assert n == 2 and acks == [SourceAck(5, False, True), SourceAck(9, False, True)]


def test_a_multiple_confirm_after_a_single_one_skips_what_was_settled():
    book = AckBook(ON_CONFIRM)
    for tag in (1, 2, 3):
        book.published(tag)
    assert book.confirmed(2, False, True) == ([SourceAck(2, False, True)], 1)
    assert book.confirmed(3, True, True) == ([SourceAck(3, True, True)], 2)


def test_a_nack_from_the_destination_nacks_the_source_with_requeue():
    book = AckBook(ON_CONFIRM)
    book.published(4)
    assert book.confirmed(1, False, False) == ([SourceAck(4, False, False)], 1)


def test_an_unknown_or_repeated_confirm_settles_nothing():
    book = AckBook(ON_CONFIRM)
    book.published(4)
    assert book.confirmed(9, False, True) == ([], 0)
    assert book.confirmed(1, False, True)[1] == 1
    assert book.confirmed(1, False, True) == ([], 0)
    assert book.confirmed(1, True, True) == ([], 0)


def test_on_publish_acks_at_once_and_no_ack_never():
    assert AckBook(ON_PUBLISH).published(3) == [SourceAck(3, False, True)]
    assert AckBook(NO_ACK).published(3) == []
    assert AckBook(ON_PUBLISH).confirmed(1, True, True) == ([], 0)
