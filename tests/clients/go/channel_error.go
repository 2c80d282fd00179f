package main

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// channelError: E5. A passive declare of a missing queue is refused with 404 NOT_FOUND and
// RabbitMQ's text; the channel is closed (NotifyClose gets the error); the connection lives on
// and a new channel on it works.
func channelError(url string) string {
	conn := dial(url)
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch, err := conn.Channel()
	must(err, "channel")
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	missing := unique("missing")
	at("passive declare of a missing queue")
	_, err = ch.QueueDeclarePassive(missing, false, false, false, false, nil)
	check(err != nil, "passive declare of a missing queue succeeded")
	var aerr *amqp.Error
	check(errors.As(err, &aerr), "not an AMQP error: %v", err)
	text := fmt.Sprintf("NOT_FOUND - no queue '%s' in vhost '/'", missing)
	check(aerr.Code == 404 && aerr.Reason == text, "got %d %q, expected 404 %q", aerr.Code, aerr.Reason, text)
	at("channel NotifyClose")
	cerr := waitFor(chClosed, 10*time.Second, "channel close notification")
	check(cerr != nil && cerr.Code == 404, "channel closed with %v", cerr)
	check(ch.IsClosed(), "channel not closed")

	at("new channel")
	ch2, err := conn.Channel()
	must(err, "channel after the error")
	q := unique("after-error")
	_, err = ch2.QueueDeclare(q, false, false, true, false, nil)
	must(err, "queue.declare")
	must(ch2.Publish("", q, false, false, amqp.Publishing{Body: []byte("still works")}), "publish")
	at("basic.get")
	var got string
	for i := 0; i < 200 && got == ""; i++ {
		d, ok, err := ch2.Get(q, true)
		must(err, "basic.get")
		if ok {
			got = string(d.Body)
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	check(got == "still works", "got %q", got)
	select {
	case e := <-connClosed:
		fail("connection closed: %v", e)
	default:
	}
	at("close")
	must(ch2.Close(), "channel close")
	must(conn.Close(), "connection close")
	return "404 then a working channel"
}
