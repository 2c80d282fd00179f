package main

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consumeAck: A1, A2, A3, A4, P1. Delivery tags grow from 1; no more than the prefetch is
// outstanding; a rejected (requeue) message comes back redelivered; single and multiple acks
// empty the queue.
func consumeAck(url string) string {
	const n = 200
	const prefetch = 10
	conn := dial(url)
	pub, err := conn.Channel()
	must(err, "channel")
	must(pub.Confirm(false), "confirm.select")
	acks := pub.NotifyPublish(make(chan amqp.Confirmation, n))
	q := unique("consume")
	at("queue.declare")
	_, err = pub.QueueDeclare(q, false, false, false, false, nil)
	must(err, "queue.declare")
	for i := 0; i < n; i++ {
		must(pub.Publish("", q, false, false, amqp.Publishing{Body: []byte(fmt.Sprint(i))}), "publish")
	}
	at("confirms")
	for i := 0; i < n; i++ {
		check(waitFor(acks, 20*time.Second, "confirm").Ack, "nack")
	}

	ch, err := conn.Channel()
	must(err, "channel")
	must(ch.Qos(prefetch, 0, false), "basic.qos")
	at("basic.consume")
	deliveries, err := ch.Consume(q, "", false, false, false, false, nil)
	must(err, "basic.consume")
	seen := map[string]int{}
	var outstanding []amqp.Delivery
	var lastTag uint64
	rejected := ""
	redeliveredOK := false
	acked := 0
	for acked < n {
		d, ok := <-deliveries
		check(ok, "deliveries closed (consumer cancelled or channel closed) after %d acks", acked)
		check(d.DeliveryTag == lastTag+1, "delivery tag %d after %d", d.DeliveryTag, lastTag)
		lastTag = d.DeliveryTag
		body := string(d.Body)
		seen[body]++
		if rejected == "" {
			check(!d.Redelivered, "first delivery marked redelivered")
			rejected = body
			must(d.Reject(true), "basic.reject")
			continue
		}
		if body == rejected {
			check(d.Redelivered, "requeued message not marked redelivered")
			redeliveredOK = true
		}
		outstanding = append(outstanding, d)
		check(len(outstanding) <= prefetch, "%d unacked > prefetch %d", len(outstanding), prefetch)
		if len(outstanding) == prefetch || acked+len(outstanding) == n {
			if d.DeliveryTag%2 == 0 {
				must(d.Ack(true), "basic.ack multiple")
			} else {
				for _, o := range outstanding {
					must(o.Ack(false), "basic.ack")
				}
			}
			acked += len(outstanding)
			outstanding = nil
		}
	}
	check(redeliveredOK, "the rejected message never came back")
	check(len(seen) == n, "saw %d distinct bodies", len(seen))
	at("passive declare after acks")
	info, err := pub.QueueInspect(q)
	must(err, "passive declare")
	check(info.Messages == 0, "%d messages left after acking all", info.Messages)
	at("close")
	must(ch.Close(), "channel close")
	_, err = pub.QueueDelete(q, false, false, false)
	must(err, "queue.delete")
	must(conn.Close(), "connection close")
	return fmt.Sprintf("%d consumed, last tag %d", n, lastTag)
}
