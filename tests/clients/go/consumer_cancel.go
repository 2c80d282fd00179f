package main

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consumerCancel: deleting a queue cancels its consumers with a basic.cancel from the broker
// (consumer_cancel_notify); NotifyCancel gets the tag, the deliveries channel closes, and the
// channel stays open and answers its next synchronous methods.
func consumerCancel(url string) string {
	conn := dial(url)
	ch, err := conn.Channel()
	must(err, "channel")
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	cancels := ch.NotifyCancel(make(chan string, 1))
	q := unique("cancel")
	at("queue.declare")
	_, err = ch.QueueDeclare(q, false, false, false, false, nil)
	must(err, "queue.declare")
	at("basic.consume")
	deliveries, err := ch.Consume(q, "ctag-1", false, false, false, false, nil)
	must(err, "basic.consume")

	at("delete the queue from another channel")
	other, err := conn.Channel()
	must(err, "channel")
	_, err = other.QueueDelete(q, false, false, false)
	must(err, "queue.delete")
	at("basic.cancel from the broker")
	tag := waitFor(cancels, 10*time.Second, "basic.cancel")
	check(tag == "ctag-1", "cancelled %q", tag)
	_, open := <-deliveries
	check(!open, "a delivery after the cancel")

	at("same channel after the cancel")
	select {
	case e := <-chClosed:
		fail("channel closed after the cancel: %v", e)
	default:
	}
	q2 := unique("cancel-after")
	_, err = ch.QueueDeclare(q2, false, false, true, false, nil)
	must(err, "queue.declare after the cancel")
	d2, err := ch.Consume(q2, "ctag-2", false, false, false, false, nil)
	must(err, "basic.consume after the cancel")
	must(ch.Publish("", q2, false, false, amqp.Publishing{Body: []byte("again")}), "publish")
	d := waitFor(d2, 10*time.Second, "delivery after the cancel")
	check(string(d.Body) == "again", "body %q", d.Body)
	must(d.Ack(false), "ack")
	at("basic.cancel of the tag the broker cancelled")
	// RabbitMQ answers cancel-ok for a tag it does not know
	must(ch.Cancel("ctag-1", false), "basic.cancel")
	_, err = ch.QueueDeclarePassive(q2, false, false, true, false, nil)
	must(err, "passive declare after the cancel")
	at("close")
	must(other.Close(), "channel close")
	must(ch.Close(), "channel close")
	must(conn.Close(), "connection close")
	return "channel usable after broker cancel"
}
