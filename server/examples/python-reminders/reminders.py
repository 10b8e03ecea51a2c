#!/usr/bin/python3
"""Appointment reminders through wheelq-server, from Python's standard
library only (urllib, json).

    WHEELQ_URL=http://127.0.0.1:8780 WHEELQ_TOKEN=wq_... python3 reminders.py

against a server that pulls its topic: wheelq-server ... -pull reminders

A clinic books appointments and schedules a reminder before each, at an
absolute time (RFC 3339), in one batch request; a rebooked appointment
moves its reminder (reschedule); a cancelled one drops it (cancel). The
reminder sender reserves each reminder at its time and acks it once sent.
A daily digest is a recurring schedule (cron, in the clinic's time zone).
"""
import datetime
import json
import os
import urllib.error
import urllib.request

BASE = os.environ.get("WHEELQ_URL", "http://127.0.0.1:8780")
TOKEN = os.environ.get("WHEELQ_TOKEN", "")


class WheelqError(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code = status, code


def wq(method, path, body=None):
    req = urllib.request.Request(BASE + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if TOKEN:
        req.add_header("Authorization", "Bearer " + TOKEN)
    try:
        with urllib.request.urlopen(req, timeout=70) as resp:
            raw = resp.read()
            return json.loads(raw) if raw else {}
    except urllib.error.HTTPError as e:
        err = json.loads(e.read())["error"]
        raise WheelqError(e.code, err["code"], err["message"]) from None


def iso(t):
    return t.isoformat().replace("+00:00", "Z")


now = datetime.datetime.now(datetime.timezone.utc)
lead = float(os.environ.get("REMINDER_IN_MS", "700")) / 1000
appointments = {  # patient -> when the reminder is due
    "ana": now + datetime.timedelta(seconds=lead),
    "bo": now + datetime.timedelta(seconds=lead + 0.3),
    "cy": now + datetime.timedelta(seconds=lead + 0.6),
}
res = wq("POST", "/v1/batch", {"jobs": [
    {"topic": "reminders", "id": f"appt-{p}", "at": iso(t),
     "payload": json.dumps({"patient": p, "text": f"Your appointment, {p}, is soon"}),
     "headers": {"clinic": "north"}}
    for p, t in appointments.items()]})
print("booked", [r["id"] for r in res["results"] if r["status"] == 201], "failed", res["failed"])

# bo rebooks: the reminder moves 0.5 s later; cy cancels.
appointments["bo"] += datetime.timedelta(seconds=0.5)
wq("POST", "/v1/jobs/reminders/appt-bo/reschedule", {"at": iso(appointments["bo"])})
wq("DELETE", "/v1/jobs/reminders/appt-cy")
del appointments["cy"]
try:
    wq("GET", "/v1/jobs/reminders/appt-zed")
except WheelqError as e:
    print("appt-zed:", e.code)

# A daily digest at 07:00 clinic time: every instance of the app may
# declare it at start (the same again changes nothing); each day's slot
# runs once however many declare it.
digest = {"topic": "reminders", "cron": "0 7 * * *", "time_zone": "Europe/Berlin",
          "payload": json.dumps({"patient": "*digest*", "text": "today's appointments"})}
first = wq("PUT", "/v1/recurring/clinic-digest", digest)
again = wq("PUT", "/v1/recurring/clinic-digest", digest)
print("digest next", first["next"][0], "same again:", again["next"] == first["next"])
print("schedules", [r["name"] for r in wq("GET", "/v1/recurring")["recurring"]])

sent = {}
deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=30)
while len(sent) < len(appointments) and datetime.datetime.now(datetime.timezone.utc) < deadline:
    got = wq("POST", "/v1/reserve", {"topics": ["reminders"], "max": 10, "wait_ms": 2000})
    for job in got["jobs"]:
        at = datetime.datetime.now(datetime.timezone.utc)
        msg = json.loads(job["payload"])
        p = msg["patient"]
        if p not in appointments:  # the digest, if 07:00 came meanwhile
            wq("POST", f"/v1/jobs/reminders/{job['id']}/ack", {"token": job["token"]})
            continue
        late_ms = (at - appointments[p]).total_seconds() * 1000
        print(f"sent {job['id']} to {p} via {job['headers']['clinic']}: late {late_ms:.1f} ms")
        if late_ms < 0:
            print(f"EARLY {job['id']}")
        wq("POST", f"/v1/jobs/reminders/{job['id']}/ack", {"token": job["token"]})
        sent[p] = at
print("sent", sorted(sent))
wq("DELETE", "/v1/recurring/clinic-digest")
print("schedules left", len(wq("GET", "/v1/recurring")["recurring"]))
