#!/usr/bin/python3
"""A worker on wheelq-server's Redis protocol front end, with redis-py
(Debian's python3-redis) and nothing else: schedule, cancel, reserve with
a block, nack once, then ack.

    WHEELQ_RESP=127.0.0.1:8781 WHEELQ_TOKEN=wq_... python3 worker.py

against a server that pulls its topic: wheelq-server ... -pull py
"""
import os
import time

import redis

host, port = os.environ.get("WHEELQ_RESP", "127.0.0.1:8781").rsplit(":", 1)
r = redis.Redis(host=host, port=int(port), password=os.environ.get("WHEELQ_TOKEN") or None)

print("ping", r.ping())
r.execute_command("WQ.SCHEDULE", "py", b"\x00binary\xff", "ID", "job-1", "DELAY", 200)
r.execute_command("WQ.SCHEDULE", "py", "never", "ID", "job-2", "DELAY", 60000)
print("cancel job-2", r.execute_command("WQ.CANCEL", "py", "job-2"))
try:
    r.execute_command("WQ.SCHEDULE", "py", "again", "ID", "job-1")
except redis.ResponseError as e:
    print("again job-1:", str(e).split()[0])

start = time.time()
done = False
while not done and time.time() - start < 30:
    jobs = r.execute_command("WQ.RESERVE", "COUNT", 10, "BLOCK", 2000, "TOPICS", "py")
    for topic, jid, token, payload, attempt, due, deadline in jobs or []:
        late = time.time() * 1000 - due
        if attempt == 1:
            r.execute_command("WQ.NACK", topic, jid, token, "RETRY", 100, "ERROR", "flaky")
            print(f"nacked {jid.decode()} attempt {attempt}")
            continue
        r.execute_command("WQ.ACK", topic, jid, token)
        print(f"acked {jid.decode()} attempt {attempt} payload {payload!r} early={late < -1}")
        done = True
fields = r.execute_command("WQ.GET", "py", "job-1")
info = dict(zip(fields[::2], fields[1::2]))
print("state", info[b"state"].decode(), "attempts", info[b"attempts"])
