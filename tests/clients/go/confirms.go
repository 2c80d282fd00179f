package main

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// confirms: C1, C2, C4. Every publish on a confirm channel is confirmed exactly once with an ack,
// in order of delivery tag; the queue holds every message; an unroutable mandatory publish is
// returned (312 NO_ROUTE) before its ack.
func confirms(url string) string {
	const n = 500
	conn := dial(url)
	ch, err := conn.Channel()
	must(err, "channel")
	at("confirm.select")
	must(ch.Confirm(false), "confirm.select")
	acks := ch.NotifyPublish(make(chan amqp.Confirmation, n+1))
	q := unique("confirms")
	at("queue.declare")
	_, err = ch.QueueDeclare(q, true, false, false, false, nil)
	must(err, "queue.declare")

	at("publish")
	for i := 0; i < n; i++ {
		mode := amqp.Transient
		if i%2 == 0 {
			mode = amqp.Persistent
		}
		must(ch.Publish("", q, false, false, amqp.Publishing{
			Body: []byte(fmt.Sprintf("m%d", i)), DeliveryMode: mode}), "publish")
	}
	at("confirms")
	// amqp091-go resequences multiple acks into one Confirmation per tag
	for i := 1; i <= n; i++ {
		c := waitFor(acks, 20e9, fmt.Sprintf("confirm %d", i))
		check(c.DeliveryTag == uint64(i), "confirm for tag %d, expected %d", c.DeliveryTag, i)
		check(c.Ack, "publish %d nacked", i)
	}

	at("queue.declare passive")
	info, err := ch.QueueInspect(q)
	must(err, "passive declare")
	check(info.Messages == n, "queue holds %d, expected %d", info.Messages, n)

	at("unroutable mandatory")
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	must(ch.Publish("", unique("nowhere"), true, false, amqp.Publishing{Body: []byte("x")}), "publish")
	// the return comes before the ack: both are dispatched in order by the same reader, so once
	// the ack is in, the return must already be waiting
	c := waitFor(acks, 20e9, "confirm of the unroutable publish")
	check(c.Ack && c.DeliveryTag == n+1, "unroutable publish: %+v", c)
	select {
	case r := <-returns:
		check(r.ReplyCode == 312 && r.ReplyText == "NO_ROUTE", "return %d %s", r.ReplyCode, r.ReplyText)
	default:
		fail("the ack of the unroutable publish came before its basic.return")
	}

	at("queue.delete")
	count, err := ch.QueueDelete(q, false, false, false)
	must(err, "queue.delete")
	check(count == n, "delete-ok message_count %d", count)
	at("close")
	must(ch.Close(), "channel close")
	must(conn.Close(), "connection close")
	return fmt.Sprintf("%d confirmed", n)
}
