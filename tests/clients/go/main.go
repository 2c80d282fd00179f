// Command leveret-clients runs amqp091-go programs against a broker, one per subcommand:
//
//	leveret-clients PROGRAM AMQP_URL
//
// Each prints "OK PROGRAM ..." and exits 0 on success, or "FAIL ..." on stderr and exits 1.
// tests/integration/test_clients_node_go.py builds it (GOPATH mode, against Debian's
// golang-github-rabbitmq-amqp091-go-dev) and runs every program against a Leveret node.
package main

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

var programs = map[string]func(url string) string{
	"confirms":         confirms,
	"consume_ack":      consumeAck,
	"rpc_direct_reply": rpcDirectReply,
	"channel_error":    channelError,
	"consumer_cancel":  consumerCancel,
	"concurrent_close": concurrentClose,
}

var (
	stepMu sync.Mutex
	step   = "start"
)

// at names the step the program is in, for the failure message.
func at(name string) {
	stepMu.Lock()
	step = name
	stepMu.Unlock()
}

func fail(format string, args ...interface{}) {
	stepMu.Lock()
	s := step
	stepMu.Unlock()
	fmt.Fprintf(os.Stderr, "FAIL %s (step: %s)\n", fmt.Sprintf(format, args...), s)
	os.Exit(1)
}

func check(cond bool, format string, args ...interface{}) {
	if !cond {
		fail(format, args...)
	}
}

func must(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func unique(prefix string) string {
	return fmt.Sprintf("%s-go-%d-%08x", prefix, os.Getpid(), rand.Uint32())
}

// waitFor receives from c or fails after the timeout.
func waitFor[T any](c <-chan T, timeout time.Duration, what string) T {
	select {
	case v := <-c:
		return v
	case <-time.After(timeout):
		fail("timed out after %s waiting for %s", timeout, what)
	}
	panic("unreachable")
}

func main() {
	names := make([]string, 0, len(programs))
	for n := range programs {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(os.Args) != 3 || programs[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: %s PROGRAM AMQP_URL\nprograms: %v\n", os.Args[0], names)
		os.Exit(2)
	}
	rand.Seed(time.Now().UnixNano())
	timeout := 30 * time.Second
	if ms := os.Getenv("CLIENT_TIMEOUT_MS"); ms != "" {
		if d, err := time.ParseDuration(ms + "ms"); err == nil {
			timeout = d
		}
	}
	// a program that hangs (a reply that never comes) fails with the step it was waiting in
	time.AfterFunc(timeout, func() { fail("timed out after %s", timeout) })
	detail := programs[os.Args[1]](os.Args[2])
	fmt.Printf("OK %s %s\n", os.Args[1], detail)
}

// dial opens a connection to the broker at url, or fails the program.
func dial(url string) *amqp.Connection {
	conn, err := amqp.Dial(url)
	must(err, "dial")
	return conn
}
