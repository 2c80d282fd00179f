'use strict';
// C1, C2, C4: publisher confirms with a ConfirmChannel. Every publish's callback is called exactly
// once with no error (basic.ack), waitForConfirms resolves, the queue holds every message; an
// unroutable mandatory publish is returned (312 NO_ROUTE) before it is confirmed.
const { at, check, unique, run, connect } = require('./common');

const N = 500;

run('confirms', async () => {
  const conn = await connect();
  at('createConfirmChannel');
  const ch = await conn.createConfirmChannel();
  ch.on('error', (e) => { throw e; });
  const q = unique('confirms');
  at('assertQueue');
  await ch.assertQueue(q, { durable: true });

  at('publish');
  const calls = new Array(N).fill(0);
  const errors = [];
  for (let i = 0; i < N; i++) {
    const body = Buffer.from(`m${i}`);
    const ok = ch.sendToQueue(q, body, { persistent: i % 2 === 0 }, (err) => {
      calls[i] += 1;
      if (err) errors.push(i);
    });
    if (!ok) await new Promise((r) => ch.once('drain', r));
  }
  at('waitForConfirms');
  await ch.waitForConfirms();
  check(errors.length === 0, `nacked: ${errors.slice(0, 10)}`);
  const bad = calls.findIndex((c) => c !== 1);
  check(bad === -1, `publish ${bad} confirmed ${calls[bad]} times`);

  at('checkQueue');
  const info = await ch.checkQueue(q);
  check(info.messageCount === N, `queue holds ${info.messageCount}, expected ${N}`);

  at('unroutable mandatory');
  const events = [];
  ch.on('return', (msg) => events.push(`return ${msg.fields.replyCode} ${msg.fields.replyText}`));
  await new Promise((resolve, reject) => {
    ch.publish('', unique('nowhere'), Buffer.from('x'), { mandatory: true }, (err) => {
      events.push(err ? 'nack' : 'ack');
      if (err) reject(new Error('unroutable publish was nacked'));
      else resolve();
    });
  });
  check(events.join(',') === 'return 312 NO_ROUTE,ack', `events: ${events.join(',')}`);

  at('deleteQueue');
  const del = await ch.deleteQueue(q);
  check(del.messageCount === N, `delete-ok message_count ${del.messageCount}`);
  at('close');
  await ch.close();
  await conn.close();
  return `${N} confirmed`;
});
