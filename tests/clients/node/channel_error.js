'use strict';
// E5: a channel error closes only that channel. A passive declare of a missing queue is refused
// with 404 NOT_FOUND (RabbitMQ's text), the channel emits 'error' then 'close'; the connection
// lives on and a new channel on it works (declare, publish, get).
const { at, check, unique, run, connect } = require('./common');

run('channel_error', async () => {
  const conn = await connect();
  const ch = await conn.createChannel();
  const missing = unique('missing');
  const events = [];
  const closed = new Promise((r) => ch.on('close', () => { events.push('close'); r(); }));
  ch.on('error', (e) => events.push(`error ${e.code}`));
  at('checkQueue missing');
  let err = null;
  try {
    await ch.checkQueue(missing);
  } catch (e) {
    err = e;
  }
  check(err !== null, 'passive declare of a missing queue succeeded');
  check(err.code === 404, `code ${err.code}: ${err.message}`);
  const text = `NOT_FOUND - no queue '${missing}' in vhost '/'`;
  check(err.message.includes(text), `message ${JSON.stringify(err.message)} lacks ${text}`);
  at('channel close event');
  await closed;
  check(events.join(',') === 'error 404,close', `events ${events.join(',')}`);

  at('new channel');
  const ch2 = await conn.createChannel();
  const q = unique('after-error');
  await ch2.assertQueue(q, { exclusive: true });
  ch2.sendToQueue(q, Buffer.from('still works'));
  at('get');
  let got = false;
  for (let i = 0; i < 200 && !got; i++) {
    got = await ch2.get(q, { noAck: true });
    if (!got) await new Promise((r) => setTimeout(r, 10));
  }
  check(got && got.content.toString() === 'still works', 'the message never arrived');
  at('close');
  await ch2.close();
  await conn.close();
  return '404 then a working channel';
});
