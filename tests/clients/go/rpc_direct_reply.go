package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rpcDirectReply: S3. The client consumes amq.rabbitmq.reply-to (no-ack) and publishes requests
// with reply_to "amq.rabbitmq.reply-to"; a server on another connection replies to the reply_to
// name it receives; every reply comes back with its correlation id.
func rpcDirectReply(url string) string {
	const n = 50
	serverConn := dial(url)
	server, err := serverConn.Channel()
	must(err, "channel")
	q := unique("rpc")
	at("server queue.declare")
	_, err = server.QueueDeclare(q, false, false, true, false, nil)
	must(err, "queue.declare")
	requests, err := server.Consume(q, "", false, false, false, false, nil)
	must(err, "server basic.consume")
	replyTos := make(chan string, n)
	go func() {
		for d := range requests {
			i, _ := strconv.Atoi(string(d.Body))
			replyTos <- d.ReplyTo
			if err := server.Publish("", d.ReplyTo, false, false, amqp.Publishing{
				CorrelationId: d.CorrelationId, Body: []byte(strconv.Itoa(i * i))}); err != nil {
				fail("server publish: %v", err)
			}
			must(d.Ack(false), "server ack")
		}
	}()

	clientConn := dial(url)
	client, err := clientConn.Channel()
	must(err, "channel")
	at("consume amq.rabbitmq.reply-to")
	replies, err := client.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	must(err, "basic.consume amq.rabbitmq.reply-to")
	at("calls")
	for i := 0; i < n; i++ {
		must(client.Publish("", q, false, false, amqp.Publishing{
			ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: fmt.Sprintf("c%d", i),
			Body: []byte(strconv.Itoa(i))}), "request publish")
	}
	got := map[string]string{}
	for len(got) < n {
		d := waitFor(replies, 20*time.Second, fmt.Sprintf("reply %d", len(got)+1))
		got[d.CorrelationId] = string(d.Body)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%d", i)
		check(got[id] == strconv.Itoa(i*i), "reply %s = %q", id, got[id])
	}
	rt := waitFor(replyTos, time.Second, "reply_to seen by the server")
	check(strings.HasPrefix(rt, "amq.rabbitmq.reply-to."), "server saw reply_to %q", rt)
	at("close")
	must(client.Close(), "client channel close")
	must(clientConn.Close(), "client connection close")
	must(server.Close(), "server channel close")
	must(serverConn.Close(), "server connection close")
	return fmt.Sprintf("%d replies", n)
}
