package main

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// concurrentClose: E5. Channels, then the connection, are closed while other goroutines are still
// publishing (plain and confirm channels, some bodies over several frames). Each close is clean:
// no error from the broker, Close() returns nil, NotifyClose channels are closed without an
// error, and the broker serves on. The connection's Close used to fail with a 501: the broker
// closed the socket right after close-ok, resetting it under the publishing goroutines.
func concurrentClose(url string) string {
	const rounds = 5
	const channels = 4
	admin := dial(url)
	ach, err := admin.Channel()
	must(err, "channel")
	q := unique("cclose")
	_, err = ach.QueueDeclare(q, false, false, false, false, nil)
	must(err, "queue.declare")
	big := make([]byte, 200*1024) // two body frames at frame_max 128 KiB
	var total int64
	for r := 0; r < rounds; r++ {
		at(fmt.Sprintf("round %d: open", r))
		conn := dial(url)
		connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
		chans := make([]*amqp.Channel, channels)
		chClosed := make([]chan *amqp.Error, channels)
		counts := make([]int64, channels)
		for i := range chans {
			chans[i], err = conn.Channel()
			must(err, "channel")
			if i%2 == 1 {
				must(chans[i].Confirm(false), "confirm.select")
			}
			chClosed[i] = chans[i].NotifyClose(make(chan *amqp.Error, 1))
		}
		// channels 0 and 1 publish until told to stop, then close themselves while 2 and 3 go on
		// publishing; 2 and 3 publish until the connection is closed under them. (A channel is
		// closed by the goroutine that publishes on it: amqp091-go 1.5.0's Channel.Close does not
		// take the lock Publish holds across its frames, so a Close from another goroutine can
		// put channel.close between a publish's header and body frames, which RabbitMQ, and
		// Leveret, answer with 505 UNEXPECTED_FRAME on the connection.)
		stop := make(chan struct{})
		closeErrs := make(chan error, 2)
		var wg sync.WaitGroup
		for i := range chans {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for k := 0; ; k++ {
					if i < 2 {
						select {
						case <-stop:
							closeErrs <- chans[i].Close()
							return
						default:
						}
					}
					body := []byte(fmt.Sprintf("r%dc%dn%d", r, i, k))
					if k%20 == 0 {
						body = big
					}
					err := chans[i].Publish("", q, false, false, amqp.Publishing{Body: body})
					if errors.Is(err, amqp.ErrClosed) && i >= 2 {
						return
					}
					if err != nil {
						fail("round %d channel %d: publish: %v", r, i, err)
					}
					atomic.AddInt64(&counts[i], 1)
				}
			}(i)
		}
		at(fmt.Sprintf("round %d: publishing", r))
		waitCounts := func(n int64) {
			for {
				min := atomic.LoadInt64(&counts[0])
				for i := range counts {
					if c := atomic.LoadInt64(&counts[i]); c < min {
						min = c
					}
				}
				if min >= n {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		waitCounts(50)
		at(fmt.Sprintf("round %d: closing two channels while two others publish", r))
		close(stop)
		for i := 0; i < 2; i++ {
			must(<-closeErrs, "channel close")
		}
		before := atomic.LoadInt64(&counts[2]) + atomic.LoadInt64(&counts[3])
		for atomic.LoadInt64(&counts[2])+atomic.LoadInt64(&counts[3]) < before+20 {
			time.Sleep(time.Millisecond)
		}
		at(fmt.Sprintf("round %d: closing the connection while two channels publish", r))
		must(conn.Close(), "connection close")
		wg.Wait()
		for i := range chClosed {
			if e, ok := <-chClosed[i]; ok {
				fail("round %d: channel %d closed with %v", r, i, e)
			}
		}
		if e, ok := <-connClosed; ok {
			fail("round %d: connection closed with %v", r, e)
		}
		for i := range counts {
			total += counts[i]
		}
	}
	at("broker still serves")
	info, err := ach.QueueInspect(q)
	must(err, "passive declare")
	check(info.Messages > 0, "nothing reached the queue")
	_, err = ach.QueueDelete(q, false, false, false)
	must(err, "queue.delete")
	must(admin.Close(), "connection close")
	return fmt.Sprintf("%d rounds, %d publishes", rounds, total)
}
