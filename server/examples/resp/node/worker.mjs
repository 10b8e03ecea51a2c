// A worker on wheelq-server's Redis protocol front end, with node-redis
// (the npm package "redis") and nothing else: schedule, cancel, reserve
// with a block, nack once, then ack; then the same server in RESP3, where
// WQ.GET is a map.
//
//     npm ci && WHEELQ_RESP=127.0.0.1:8781 WHEELQ_TOKEN=wq_... node worker.mjs
//
// against a server that pulls its topic: wheelq-server ... -pull node
import { createClient } from "redis";

const [host, port] = (process.env.WHEELQ_RESP || "127.0.0.1:8781").split(":");
const password = process.env.WHEELQ_TOKEN || undefined;
const url = `redis://${host}:${port}`;

const r = await createClient({ url, password }).connect();
console.log("ping", await r.ping());
await r.sendCommand(["WQ.SCHEDULE", "node", "hello from node", "ID", "job-1", "DELAY", "200"]);
await r.sendCommand(["WQ.SCHEDULE", "node", "never", "ID", "job-2", "DELAY", "60000"]);
console.log("cancel job-2", await r.sendCommand(["WQ.CANCEL", "node", "job-2"]));
try {
  await r.sendCommand(["WQ.SCHEDULE", "node", "again", "ID", "job-1"]);
} catch (e) {
  console.log("again job-1:", e.message.split(" ")[0]);
}

const start = Date.now();
let done = false;
while (!done && Date.now() - start < 30000) {
  const jobs = (await r.sendCommand(["WQ.RESERVE", "COUNT", "10", "BLOCK", "2000", "TOPICS", "node"])) || [];
  for (const [topic, id, token, payload, attempt, due] of jobs) {
    const early = Date.now() < due;
    if (attempt === 1) {
      await r.sendCommand(["WQ.NACK", topic, id, token, "RETRY", "100", "ERROR", "flaky"]);
      console.log(`nacked ${id} attempt ${attempt}`);
      continue;
    }
    await r.sendCommand(["WQ.ACK", topic, id, token]);
    console.log(`acked ${id} attempt ${attempt} payload ${payload} early=${early}`);
    done = true;
  }
}
await r.quit();

// RESP3: HELLO 3 on connect; WQ.GET is a map.
const r3 = await createClient({ url, password, RESP: 3 }).connect();
const info = await r3.sendCommand(["WQ.GET", "node", "job-1"]);
const get = (k) => (info instanceof Map ? info.get(k) : info[k]);
console.log("resp3 state", get("state"), "attempts", get("attempts"));
await r3.quit();
