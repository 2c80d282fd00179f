'use strict';
// S3: RPC over direct reply-to. The client consumes amq.rabbitmq.reply-to (noAck) and publishes
// requests with replyTo "amq.rabbitmq.reply-to"; the server (another connection) replies to the
// reply_to name it receives; every reply arrives with its correlation id.
const { at, check, unique, run, connect } = require('./common');

const N = 50;

run('rpc_direct_reply', async () => {
  const serverConn = await connect();
  const server = await serverConn.createChannel();
  const q = unique('rpc');
  at('server assertQueue');
  await server.assertQueue(q, { exclusive: true });
  let replyTo = null;
  await server.consume(q, (msg) => {
    replyTo = msg.properties.replyTo;
    const n = Number(msg.content.toString());
    server.sendToQueue(msg.properties.replyTo, Buffer.from(String(n * n)),
      { correlationId: msg.properties.correlationId });
    server.ack(msg);
  });

  const clientConn = await connect();
  const client = await clientConn.createChannel();
  client.on('error', (e) => { throw e; });
  const pending = new Map();
  at('consume amq.rabbitmq.reply-to');
  await client.consume('amq.rabbitmq.reply-to', (msg) => {
    const p = pending.get(msg.properties.correlationId);
    if (!p) return;
    pending.delete(msg.properties.correlationId);
    p(msg.content.toString());
  }, { noAck: true });

  at('calls');
  const calls = [];
  for (let i = 0; i < N; i++) {
    const id = `c${i}`;
    calls.push(new Promise((resolve) => pending.set(id, resolve)));
    client.sendToQueue(q, Buffer.from(String(i)),
      { replyTo: 'amq.rabbitmq.reply-to', correlationId: id });
  }
  const results = await Promise.all(calls);
  results.forEach((r, i) => check(r === String(i * i), `reply ${i} = ${r}`));
  check(replyTo && replyTo.startsWith('amq.rabbitmq.reply-to.'),
    `server saw reply_to ${replyTo}`);
  at('close');
  await client.close();
  await clientConn.close();
  await server.close();
  await serverConn.close();
  return `${N} replies`;
});
