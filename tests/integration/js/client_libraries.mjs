// Drive node-redis 5 (the npm alias "redis5") in cluster mode, for
// tests/integration/test_js_client_libraries.py:
//   node client_libraries.mjs '<json>'
// json: {"ports": [...], "resp": 2|3, "username": null|name, "password": pw,
//        "channel": hex, "pattern": hex, "shard": hex}   (UTF-8 names as hex)
// plus "crossslot": [hex, hex] for the sSubscribe-across-slots check.
//
// Pub/sub: subscribe / pSubscribe / sSubscribe with Buffer listeners (each
// awaited: node-redis resolves on the server's confirmation). Names are
// strings: node-redis 5.9 keys its listeners by the name given and looks them
// up by the received name's toString(), so a message on a channel subscribed
// as a Buffer never reaches its listener (against Redis too); Buffer payloads
// work. Then print {"ready": true}, read one line {"expect": N} from stdin,
// publish all 256 byte values on the channel and the shard channel through the
// cluster client, collect N messages (10 s at most) and print
// {"received": [[kind, channelHex, patternHex|null, "length:sha256[:16]"], ...]}.
// Crossslot: sSubscribe([a, b]) once, print {"crossslot": "ok" | error text}.
import { createHash } from "node:crypto";
import readline from "node:readline";
import { createCluster } from "redis5";

const cfg = JSON.parse(process.argv[2]);
const hex = (h) => Buffer.from(h, "hex");
const text = (h) => hex(h).toString();
const digest = (buf) =>
  `${buf.length}:${createHash("sha256").update(buf).digest("hex").slice(0, 16)}`;
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const cluster = createCluster({
  rootNodes: [{ url: `redis://127.0.0.1:${cfg.ports[0]}` }],
  defaults: {
    username: cfg.username ?? undefined,
    password: cfg.password,
    RESP: cfg.resp,
  },
});
cluster.on("error", (err) => process.stderr.write(`cluster error: ${err}\n`));
await cluster.connect();

async function crossslot() {
  try {
    await cluster.sSubscribe(cfg.crossslot.map(text), () => {}, true);
    print({ crossslot: "ok" });
  } catch (err) {
    print({ crossslot: err.message });
  }
}

async function pubsub() {
  const received = [];
  let expect = Infinity;
  let done;
  const complete = new Promise((resolve) => (done = resolve));
  const record = (kind, pattern) => (message, channel) => {
    received.push([kind, channel.toString("hex"), pattern, digest(message)]);
    if (received.length >= expect) done();
  };
  await cluster.subscribe(text(cfg.channel), record("message", null), true);
  await cluster.pSubscribe(text(cfg.pattern), record("pmessage", cfg.pattern), true);
  await cluster.sSubscribe(text(cfg.shard), record("smessage", null), true);
  print({ ready: true });

  const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  expect = JSON.parse((await lines.next()).value).expect;
  const all = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
  await cluster.publish(text(cfg.channel), all);
  await cluster.sPublish(text(cfg.shard), all);
  if (received.length >= expect) done();
  let timer;
  await Promise.race([complete, new Promise((r) => (timer = setTimeout(r, 10000)))]);
  clearTimeout(timer);
  print({ received });
}

await (cfg.crossslot ? crossslot() : pubsub());
await cluster.close();
process.exit(0);
