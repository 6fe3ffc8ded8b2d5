// A Node.js Redis Cluster client through topology changes, driven line by line:
//   node cluster_topology.mjs node-redis|ioredis <port>
// Connects through <port>, subscribes to "topology", prints {"ready": true},
// then reads commands from stdin, one per line, and answers each with one
// JSON line:
//   round  probes until one reaches the subscriber (the subscription is live on
//          every node), then publishes 20 numbered messages through the
//          cluster client, which picks a node per PUBLISH (node-redis
//          round-robin, ioredis at random); {"round": {"sent", "got",
//          "errors"}}: "got" is the numbered messages received, in arrival order
//   map    the client ports of the masters in a refreshed topology:
//          ioredis refreshSlotsCache() on the long-lived client; node-redis
//          has no public refresh (it rediscovers on MOVED, which bloomcast
//          never sends), so a fresh createCluster discovers it, and
//          "stale" is what the long-lived client still holds
//   quit   closes the clients and exits 0
import { createInterface } from "node:readline";
import { createCluster } from "redis";
import Redis from "ioredis";

const [kind, port] = process.argv.slice(2);
const got = [];
let probes = 0;
const onMessage = (msg) => (msg === "probe" ? probes++ : got.push(Number(msg)));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function nodeRedis() {
  const options = { rootNodes: [{ url: `redis://127.0.0.1:${port}` }] };
  const client = createCluster(options);
  client.on("error", () => {});
  await client.connect();
  await client.subscribe("topology", onMessage);
  const ports = (c) => c.masters.map((m) => m.port).sort((a, b) => a - b);
  return {
    publish: (msg) => client.publish("topology", msg),
    async map() {
      const fresh = createCluster(options);
      fresh.on("error", () => {});
      await fresh.connect();
      const masters = ports(fresh);
      await fresh.quit();
      return { masters, stale: ports(client) };
    },
    quit: () => client.quit(),
  };
}

async function ioredis() {
  const startup = [{ host: "127.0.0.1", port: Number(port) }];
  const pub = new Redis.Cluster(startup);
  const sub = new Redis.Cluster(startup);
  pub.on("error", () => {});
  sub.on("error", () => {});
  const ready = (c) => (c.status === "ready" ? null : new Promise((r) => c.once("ready", r)));
  await Promise.all([ready(pub), ready(sub)]);
  sub.on("message", (_ch, msg) => onMessage(msg));
  await sub.subscribe("topology");
  const refresh = (c) => new Promise((ok, no) => c.refreshSlotsCache((e) => (e ? no(e) : ok())));
  return {
    publish: (msg) => pub.publish("topology", msg),
    async map() {
      await Promise.all([refresh(pub), refresh(sub)]);
      return { masters: pub.nodes("master").map((n) => n.options.port).sort((a, b) => a - b) };
    },
    quit: async () => {
      pub.disconnect();
      sub.disconnect();
    },
  };
}

const client = kind === "node-redis" ? await nodeRedis() : await ioredis();
let sent = 0;
let errors = 0;

async function round() {
  const deadline = Date.now() + 20000;
  const before = probes;
  while (probes === before) {
    if (Date.now() > deadline) throw new Error("no probe reached the subscriber");
    try {
      await client.publish("probe");
    } catch {
      errors++; // a connection to a node that went away: the client recovers
    }
    await sleep(100);
  }
  const first = sent;
  for (let i = 0; i < 20; i++) await client.publish(String(sent++));
  const end = Date.now() + 15000;
  while (got.filter((x) => x >= first).length < sent - first && Date.now() < end) await sleep(20);
  return { sent: [first, sent], got: got.filter((x) => x >= first), errors };
}

console.log(JSON.stringify({ ready: true }));
for await (const line of createInterface({ input: process.stdin })) {
  try {
    if (line === "round") console.log(JSON.stringify({ round: await round() }));
    else if (line === "map") console.log(JSON.stringify({ map: await client.map() }));
    else if (line === "quit") break;
  } catch (err) {
    console.log(JSON.stringify({ error: String(err) }));
  }
}
await client.quit();
process.exit(0);
