'use strict';
// E5 / connection.close: channels and then the connection are closed while other channels are
// still publishing (plain and confirm channels, message bodies split over several frames). Every
// close completes cleanly: no channel or connection error from the broker (the issue saw a 501
// from amqp091-go's version of this), the connection emits 'close' without an error, and the
// broker serves a new connection afterwards.
const { amqp, url, at, fail, check, unique, run } = require('./common');

const ROUNDS = 5;
const CHANNELS = 4;

function isClosedChannelError(e) {
  return /Channel (closed|closing|ended)|Connection closed|Connection closing/.test(String(e && e.message));
}

async function round(r, q) {
  const conn = await amqp.connect(url);
  let connError = null;
  conn.on('error', (e) => { connError = e; });
  const closedEvent = new Promise((res) => conn.on('close', (e) => res(e)));
  const chans = [];
  for (let i = 0; i < CHANNELS; i++) {
    // a small write buffer (in writes): amqplib's default holds ~2000 per channel, so a
    // channel.close would wait behind megabytes of this channel's own publishes
    const opts = { highWaterMark: 8 };
    const ch = i % 2 ? await conn.createConfirmChannel(opts) : await conn.createChannel(opts);
    ch.on('error', (e) => fail(`round ${r}: channel ${i} error from the broker: ${e.message}`));
    chans.push(ch);
  }
  const counts = new Array(CHANNELS).fill(0);
  const big = Buffer.alloc(200 * 1024, 'x'); // two body frames at frame_max 128 KiB
  const loops = chans.map(async (ch, i) => {
    let closed = false;
    ch.on('close', () => { closed = true; ch.emit('drain'); });
    for (;;) {
      let ok;
      try {
        const body = counts[i] % 20 === 0 ? big : Buffer.from(`r${r}c${i}n${counts[i]}`);
        if (i % 2) ok = ch.sendToQueue(q, body, {}, () => {}); // callbacks may see the close
        else ok = ch.sendToQueue(q, body);
        counts[i] += 1;
      } catch (e) {
        if (isClosedChannelError(e)) return;
        throw e;
      }
      // the socket's buffer is full: wait for it to drain, as a real publisher does
      if (!ok && !closed) await new Promise((res) => ch.once('drain', res));
      else if (counts[i] % 5 === 0) await new Promise((res) => setImmediate(res));
    }
  });
  at(`round ${r}: publishing`);
  while (Math.min(...counts) < 50) await new Promise((res) => setImmediate(res));
  at(`round ${r}: closing two channels while publishing`);
  await Promise.all([chans[0].close(), chans[1].close()]);
  at(`round ${r}: closing the connection while two channels publish`);
  await conn.close();
  await Promise.all(loops);
  const closeErr = await closedEvent;
  check(closeErr === undefined, `round ${r}: connection closed with error ${closeErr}`);
  check(connError === null, `round ${r}: connection error ${connError}`);
  return counts.reduce((a, b) => a + b, 0);
}

run('concurrent_close', async () => {
  const admin = await amqp.connect(url);
  admin.on('error', (e) => fail(`admin connection error: ${e.message}`));
  const ach = await admin.createChannel();
  const q = unique('cclose');
  await ach.assertQueue(q, { durable: false });
  let total = 0;
  for (let r = 0; r < ROUNDS; r++) total += await round(r, q);
  at('broker still serves');
  const info = await ach.checkQueue(q);
  check(info.messageCount > 0, 'nothing reached the queue');
  await ach.deleteQueue(q);
  await admin.close();
  return `${ROUNDS} rounds, ${total} publishes`;
});
