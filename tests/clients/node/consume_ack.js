'use strict';
// A1, A2, A3, A4, P1: a consumer with manual acks and prefetch. Delivery tags grow from 1 on the
// channel; no more than `prefetch` deliveries are outstanding; a rejected (requeue) message comes
// back with redelivered=true; acks (single and multiple) empty the queue.
const { at, check, unique, run, connect } = require('./common');

const N = 200;
const PREFETCH = 10;

run('consume_ack', async () => {
  const conn = await connect();
  const pub = await conn.createConfirmChannel();
  const q = unique('consume');
  at('assertQueue');
  await pub.assertQueue(q, { durable: false, autoDelete: false });
  for (let i = 0; i < N; i++) pub.sendToQueue(q, Buffer.from(String(i)));
  at('waitForConfirms');
  await pub.waitForConfirms();

  const ch = await conn.createChannel();
  ch.on('error', (e) => { throw e; });
  await ch.prefetch(PREFETCH);
  const seen = new Map(); // body -> deliveries
  let outstanding = [];
  let lastTag = 0;
  let rejected = null;
  let redeliveredOk = false;
  let acked = 0;
  at('consume');
  const done = new Promise((resolve, reject) => {
    ch.consume(q, (msg) => {
      try {
        check(msg !== null, 'consumer cancelled by the broker');
        const tag = msg.fields.deliveryTag;
        check(tag === lastTag + 1, `delivery tag ${tag} after ${lastTag}`);
        lastTag = tag;
        const body = msg.content.toString();
        seen.set(body, (seen.get(body) || 0) + 1);
        outstanding.push(msg);
        check(outstanding.length <= PREFETCH, `${outstanding.length} unacked > prefetch ${PREFETCH}`);
        if (rejected === null) {
          // the first delivery: reject it, it must come back redelivered
          check(msg.fields.redelivered === false, 'first delivery marked redelivered');
          rejected = body;
          outstanding.pop();
          ch.reject(msg, true);
          return;
        }
        if (body === rejected) {
          check(msg.fields.redelivered === true, 'requeued message not marked redelivered');
          redeliveredOk = true;
        }
        if (outstanding.length === PREFETCH || acked + outstanding.length === N) {
          // alternate: a multiple ack of everything outstanding, or single acks
          if (tag % 2 === 0) ch.ack(msg, true);
          else outstanding.forEach((m) => ch.ack(m));
          acked += outstanding.length;
          outstanding = [];
        }
        if (acked === N) resolve();
      } catch (e) {
        reject(e);
      }
    }, { noAck: false }).catch(reject);
  });
  await done;
  check(redeliveredOk, 'the rejected message never came back');
  check(seen.size === N, `saw ${seen.size} distinct bodies`);
  at('checkQueue after acks');
  const info = await pub.checkQueue(q);
  check(info.messageCount === 0, `${info.messageCount} messages left after acking all`);
  at('close');
  await ch.close();
  await pub.deleteQueue(q);
  await conn.close();
  return `${N} consumed, last tag ${lastTag}`;
});
