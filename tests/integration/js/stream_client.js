// A stream-protocol client that is not Python: RabbitMQ's Node.js stream client
// (rabbitmq-stream-js-client) publishes with a publisher reference, reads everything back
// from the first offset and checks the de-duplication sequence. Run by
// tests/integration/test_stream_protocol.py: node stream_client.js PORT STREAM
"use strict";
const rabbit = require("rabbitmq-stream-js-client");

async function main() {
  const [port, stream] = process.argv.slice(2);
  const client = await rabbit.connect({
    hostname: "127.0.0.1",
    port: Number(port),
    username: "guest",
    password: "guest",
    vhost: "/",
  });
  await client.createStream({ stream, arguments: {} });
  const publisher = await client.declarePublisher({ stream, publisherRef: "js-pub" });
  for (let i = 0; i < 10; i++) {
    await publisher.send(Buffer.from(`js-${i}`));
  }
  await publisher.flush();
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${got.length} messages`)), 10000);
    client
      .declareConsumer({ stream, offset: rabbit.Offset.first() }, (message) => {
        got.push(message.content.toString());
        if (got.length === 10) {
          clearTimeout(timer);
          resolve();
        }
      })
      .catch(reject);
  });
  // Give the confirms of the last publishes time to come back before asking.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const sequence = await publisher.getLastPublishingId();
  console.log(JSON.stringify({ got, sequence: Number(sequence) }));
  await client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
