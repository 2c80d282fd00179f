'use strict';
// Shared by the amqplib programs: the broker URL from argv, a step log, a watchdog, and one way to
// fail (a message on stderr, exit status 1). Every program prints "OK <name> ..." on success.
const amqp = require('amqplib');

const url = process.argv[2];
if (!url) {
  console.error(`usage: node ${process.argv[1]} AMQP_URL`);
  process.exit(2);
}

let step = 'start';
function at(name) {
  step = name;
}

function fail(msg) {
  console.error(`FAIL ${msg} (step: ${step})`);
  process.exit(1);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

// A program that hangs (a reply that never comes) fails with the step it was waiting in.
const WATCHDOG_MS = Number(process.env.CLIENT_TIMEOUT_MS || 30000);
const watchdog = setTimeout(() => fail(`timed out after ${WATCHDOG_MS} ms`), WATCHDOG_MS);

function unique(prefix) {
  return `${prefix}-node-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
}

// Runs main(); exit 0 with "OK ..." when it resolves, 1 with the error when it rejects.
function run(name, main) {
  process.on('unhandledRejection', (e) => fail(`unhandled rejection: ${e && e.stack ? e.stack : e}`));
  main()
    .then((detail) => {
      clearTimeout(watchdog);
      console.log(`OK ${name}${detail ? ` ${detail}` : ''}`);
      process.exit(0);
    })
    .catch((e) => fail(e && e.stack ? e.stack : String(e)));
}

// A connection whose unexpected 'error' (a connection.close from the broker, a socket error)
// fails the program: none of these programs expects one.
async function connect() {
  const conn = await amqp.connect(url);
  conn.on('error', (e) => fail(`connection error: ${e.message}`));
  return conn;
}

module.exports = { amqp, url, at, fail, check, unique, run, connect };
