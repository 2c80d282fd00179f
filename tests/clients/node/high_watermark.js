'use strict';
// R1: amqplib's own "find high watermark" / "set high watermark" tests, which once hung against
// Leveret: publish to an exclusive queue without consumers until the channel's write buffer is
// full (sendToQueue returns false: amqplib's default highWaterMark), then, on a channel whose
// highWaterMark is twice that, publish that many in one go; every message reaches the queue
// and closing the connection behind them completes.
const { at, check, unique, run, connect } = require('./common');

async function count(ch, q, want) {
  for (let i = 0; i < 3000; i++) {
    const { messageCount } = await ch.checkQueue(q);
    if (messageCount === want) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  const { messageCount } = await ch.checkQueue(q);
  check(false, `queue ${q} holds ${messageCount}, expected ${want}`);
}

run('high_watermark', async () => {
  const msg = unique('body');
  at('find high watermark');
  const conn1 = await connect();
  const ch1 = await conn1.createChannel();
  const { queue: q1 } = await ch1.assertQueue('', { exclusive: true });
  let baseline = 0;
  while (ch1.sendToQueue(q1, Buffer.from(msg))) baseline++;
  baseline++; // the publish that returned false was buffered too
  check(baseline > 1, `high watermark ${baseline}`);
  await count(ch1, q1, baseline);
  at('close after find high watermark');
  await conn1.close();

  at('set high watermark');
  const conn2 = await connect();
  const ch2 = await conn2.createChannel({ highWaterMark: baseline * 2 });
  const { queue: q2 } = await ch2.assertQueue('', { exclusive: true });
  for (let i = 0; i < baseline * 2; i++) {
    check(ch2.sendToQueue(q2, Buffer.from(msg)) === true, `publish ${i} of ${baseline * 2} refused`);
  }
  await count(ch2, q2, baseline * 2);
  at('close after set high watermark');
  await conn2.close();
  return `high watermark ${baseline}`;
});
