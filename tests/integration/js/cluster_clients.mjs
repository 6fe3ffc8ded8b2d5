// Drive a Node.js Redis Cluster client against a bloomcast cluster:
//   node cluster_clients.mjs node-redis|ioredis <port> [<port> ...]
// Connects through the first port, subscribes to a channel and a pattern on
// one connection (and to a shard channel where the client supports it),
// publishes through the cluster client, and prints one JSON line:
// {"client", "nodes", "received": [[kind, channel, message], ...]}.
// Exit 0 when every expected message arrived within 10 s, else 1.
import { createCluster } from "redis";
import Redis from "ioredis";

const [kind, ...ports] = process.argv.slice(2);
const expected = [
  ["message", "news", "hello"],
  ["pmessage", "news", "hello"],
  ["smessage", "orders{7}", "o1"],
];
const received = [];
const done = () => received.length >= expected.length;

async function waitFor(pred, ms) {
  const end = Date.now() + ms;
  while (!pred() && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
}

async function nodeRedis() {
  const cluster = createCluster({
    rootNodes: ports.map((p) => ({ url: `redis://127.0.0.1:${p}` })),
  });
  cluster.on("error", () => {});
  await cluster.connect();
  const nodes = cluster.masters.length;
  await cluster.subscribe("news", (msg, ch) => received.push(["message", ch, msg]));
  await cluster.pSubscribe("n*", (msg, ch) => received.push(["pmessage", ch, msg]));
  await cluster.sSubscribe("orders{7}", (msg, ch) => received.push(["smessage", ch, msg]));
  await new Promise((r) => setTimeout(r, 1000)); // the filters reach every node
  await cluster.publish("news", "hello");
  await cluster.sPublish("orders{7}", "o1");
  await waitFor(done, 10000);
  await cluster.quit();
  return nodes;
}

async function ioredis() {
  const startup = ports.map((p) => ({ host: "127.0.0.1", port: Number(p) }));
  const pub = new Redis.Cluster(startup);
  const sub = new Redis.Cluster(startup, { shardedSubscribers: true });
  const ready = (c) => (c.status === "ready" ? null : new Promise((r) => c.once("ready", r)));
  await Promise.all([ready(pub), ready(sub)]);
  const nodes = pub.nodes("master").length;
  sub.on("message", (ch, msg) => received.push(["message", ch, msg]));
  sub.on("pmessage", (_p, ch, msg) => received.push(["pmessage", ch, msg]));
  sub.on("smessage", (ch, msg) => received.push(["smessage", ch, msg]));
  await sub.subscribe("news");
  await sub.psubscribe("n*");
  await sub.ssubscribe("orders{7}");
  await new Promise((r) => setTimeout(r, 1000));
  await pub.publish("news", "hello");
  await pub.spublish("orders{7}", "o1");
  await waitFor(done, 10000);
  pub.disconnect();
  sub.disconnect();
  return nodes;
}

const nodes = kind === "node-redis" ? await nodeRedis() : await ioredis();
received.sort();
console.log(JSON.stringify({ client: kind, nodes, received }));
const ok = JSON.stringify(received) === JSON.stringify([...expected].sort());
process.exit(ok ? 0 : 1);
