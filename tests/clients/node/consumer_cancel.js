'use strict';
// Consumer cancel notification (RabbitMQ's consumer_cancel_notify capability): deleting a queue
// cancels its consumers with a basic.cancel from the broker, amqplib calls the consumer with null;
// the channel stays open and answers its next synchronous methods (the issue's "no reply will be
// forthcoming" was a channel broken by that cancel).
const { at, check, unique, run, connect } = require('./common');

run('consumer_cancel', async () => {
  const conn = await connect();
  const ch = await conn.createChannel();
  ch.on('error', (e) => { throw e; });
  let channelClosed = false;
  ch.on('close', () => { channelClosed = true; });
  const q = unique('cancel');
  at('assertQueue');
  await ch.assertQueue(q, { durable: false });
  let cancelled;
  const cancel = new Promise((r) => { cancelled = r; });
  at('consume');
  const { consumerTag } = await ch.consume(q, (msg) => { if (msg === null) cancelled(); });
  check(consumerTag.length > 0, 'no consumer tag');

  at('delete queue from another channel');
  const other = await conn.createChannel();
  await other.deleteQueue(q);
  at('wait for basic.cancel');
  await cancel;

  at('same channel after cancel');
  check(!channelClosed, 'channel closed after the cancel');
  const q2 = unique('cancel-after');
  await ch.assertQueue(q2, { exclusive: true });
  await ch.checkQueue(q2);
  at('consume again');
  const got = new Promise((r) => ch.consume(q2, (msg) => { if (msg) { ch.ack(msg); r(msg.content.toString()); } }));
  ch.sendToQueue(q2, Buffer.from('again'));
  check((await got) === 'again', 'wrong body');
  at('cancel own consumer');
  // a client-side cancel of an already-cancelled tag: RabbitMQ answers cancel-ok
  await ch.cancel(consumerTag);
  await ch.checkQueue(q2);
  at('close');
  await other.close();
  await ch.close();
  await conn.close();
  return 'channel usable after broker cancel';
});
