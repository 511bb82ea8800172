// An AMQP 1.0 client that is not Python: rhea (Node.js). Sends messages with properties
// and application properties to a queue, takes back what 0-9-1 put there, and makes a
// request/reply round trip through a dynamic reply queue; prints one JSON line.
// Run by tests/integration/test_amqp10_rhea.py: node amqp10_rhea.js PORT QUEUE PIKA_COUNT
"use strict";
const rhea = require("rhea");

const [port, queue, pikaCount] = process.argv.slice(2);
const container = rhea.create_container({ id: "rhea-test" });
const result = { sent: 0, accepted: 0, received: [], replies: [], reply_to: null };
const conn = container.connect({
  host: "127.0.0.1",
  port: Number(port),
  username: "guest",
  password: "guest",
  reconnect: false,
});
const timer = setTimeout(() => {
  result.error = "timed out";
  console.log(JSON.stringify(result));
  process.exit(1);
}, 20000);

function done() {
  clearTimeout(timer);
  console.log(JSON.stringify(result));
  conn.close();
}

// 1. Take what pika published (application properties come from its headers).
const fromPika = conn.open_receiver({ source: `/queues/${queue}.in`, autoaccept: true });
fromPika.on("message", (ctx) => {
  result.received.push({
    // A 0-9-1 body is a data section: rhea gives it as {typecode: 0x75, content}.
    body: Buffer.from(ctx.message.body.content || ctx.message.body).toString(),
    app: ctx.message.application_properties,
    message_id: ctx.message.message_id,
    durable: ctx.message.durable === true,
  });
  if (result.received.length === Number(pikaCount)) {
    fromPika.close();
    send();
  }
});

// 2. Send three messages for pika to consume; count the broker's accepted dispositions.
function send() {
  const sender = conn.open_sender({ target: `/queues/${queue}.out` });
  sender.on("sendable", () => {
    while (result.sent < 3 && sender.sendable()) {
      result.sent += 1;
      sender.send({
        body: rhea.message.data_section(Buffer.from(`rhea ${result.sent}`)),
        message_id: `rhea-${result.sent}`,
        content_type: "text/plain",
        application_properties: { n: result.sent, kind: "js" },
        durable: true,
      });
    }
  });
  sender.on("accepted", () => {
    result.accepted += 1;
    if (result.accepted === 3) {
      sender.close();
      rpc();
    }
  });
}

// 3. Request/reply: a server on the queue answers to each request's reply-to, the
//    requester receives on a dynamic (broker-named) queue.
function rpc() {
  const service = conn.open_receiver({ source: `/queues/${queue}.rpc` });
  const anonymous = conn.open_sender({ target: {} });
  service.on("message", (ctx) => {
    anonymous.send({ to: ctx.message.reply_to, body: ctx.message.body.toUpperCase() });
  });
  const replies = conn.open_receiver({ source: { dynamic: true } });
  replies.on("receiver_open", (ctx) => {
    result.reply_to = ctx.receiver.source.address;
    const requests = conn.open_sender({ target: `/queues/${queue}.rpc` });
    requests.on("sendable", () => {
      if (requests.sent) return;
      requests.sent = true;
      for (const text of ["one", "two"]) {
        requests.send({ body: text, reply_to: result.reply_to });
      }
    });
  });
  replies.on("message", (ctx) => {
    result.replies.push(ctx.message.body);
    if (result.replies.length === 2) done();
  });
}

conn.on("connection_error", (ctx) => {
  result.error = String(ctx.connection.error && ctx.connection.error.condition);
  console.log(JSON.stringify(result));
  process.exit(1);
});
