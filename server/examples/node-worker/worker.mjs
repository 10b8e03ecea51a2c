// A worker pulling jobs from wheelq-server and acking them, in Node with
// its built-in fetch (Node 18+; nothing to install).
//
//   WHEELQ_URL=http://127.0.0.1:8780 WHEELQ_TOKEN=wq_... node worker.mjs
//
// against a server that pulls its topic: wheelq-server ... -pull work
//
// It schedules a few "work" jobs (one of them fails on its first attempt),
// then works: reserve (long poll), do the job, ack; on failure nack with
// a retry delay, and the job comes back as attempt 2. A long job touches
// its reservation to keep it.
const base = process.env.WHEELQ_URL ?? 'http://127.0.0.1:8780';
const token = process.env.WHEELQ_TOKEN ?? '';

async function wq(method, path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const resp = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await resp.text();
  const data = text ? JSON.parse(text) : {};
  if (!resp.ok) throw new Error(`wheelq ${resp.status} ${data.error.code}: ${data.error.message}`);
  return data;
}

const jobs = ['resize-1', 'resize-2', 'flaky', 'long'];
for (const [i, id] of jobs.entries()) {
  await wq('POST', '/v1/jobs/work', { id, payload: JSON.stringify({ id }), delay_ms: 100 * i });
}
console.log(`scheduled ${jobs.length}`);

const done = new Set();
const deadline = Date.now() + 30000;
while (done.size < jobs.length && Date.now() < deadline) {
  const { jobs: got } = await wq('POST', '/v1/reserve', { topics: ['work'], max: 4, wait_ms: 2000, ttr_ms: 1000 });
  for (const job of got) {
    const path = `/v1/jobs/work/${encodeURIComponent(job.id)}`;
    if (job.id === 'flaky' && job.attempt === 1) {
      await wq('POST', `${path}/nack`, { token: job.token, error: 'upstream timeout', retry_after_ms: 200 });
      console.log(`failed ${job.id} attempt ${job.attempt}: retry in 200 ms`);
      continue;
    }
    if (job.id === 'long') {
      // Longer than its 1 s time-to-run: touch keeps the reservation.
      await new Promise((r) => setTimeout(r, 600));
      await wq('POST', `${path}/touch`, { token: job.token, ttr_ms: 2000 });
      await new Promise((r) => setTimeout(r, 600));
    }
    await wq('POST', `${path}/ack`, { token: job.token });
    console.log(`done ${job.id} attempt ${job.attempt}${job.last_error ? ` (after: ${job.last_error})` : ''}`);
    done.add(job.id);
  }
}
const info = await wq('GET', '/v1/jobs/work/flaky');
console.log(`flaky: ${info.state} after ${info.attempts} attempts`);
