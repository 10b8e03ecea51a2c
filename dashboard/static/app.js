// The wheelq dashboard page. Everything the server sends is data, and is
// written into the page as text (textContent, attributes), never as
// markup. Every URL is relative to the page, so the dashboard works under
// any path prefix.
"use strict";
(function () {
  const HEADER = "X-Wheelq-Dashboard";
  const main = document.getElementById("main");
  const state = { can: {}, readOnly: true, refreshMs: 0, timer: null, seq: 0, window: "hour" };

  // el builds an element: attrs sets attributes (on* and markup are never
  // set from data), children are nodes or strings (as text).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "onclick" || k === "onsubmit" || k === "onchange") e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  async function api(path) {
    const res = await fetch("api/" + path, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    return answer(res);
  }

  async function post(kind, body) {
    const res = await fetch("api/" + kind, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", [HEADER]: "1" },
      body: JSON.stringify(body),
    });
    return answer(res);
  }

  async function answer(res) {
    let body = null;
    try {
      body = await res.json();
    } catch (e) {
      body = null;
    }
    if (!res.ok) {
      const msg = body && body.error ? body.error : res.status + " " + res.statusText;
      const err = new Error(msg);
      err.status = res.status;
      throw err;
    }
    return body;
  }

  // iso isolates a name (a topic, an id, a schedule's name) in a sentence:
  // a right-to-left override in it cannot reorder the words around it.
  function iso(s) {
    return "\u2068" + s + "\u2069";
  }

  function flash(msg, isError) {
    const f = document.getElementById("flash");
    f.textContent = msg;
    f.className = isError ? "error" : "ok";
    f.hidden = false;
  }

  function clearFlash() {
    document.getElementById("flash").hidden = true;
  }

  // hexOf writes base64 bytes as hex, a space between bytes.
  function hexOf(b64) {
    return Array.from(atob(b64), (c) => c.charCodeAt(0).toString(16).padStart(2, "0")).join(" ");
  }

  function isZeroTime(s) {
    return !s || s.startsWith("0001-01-01");
  }

  function fmtTime(s) {
    if (isZeroTime(s)) return "—";
    const d = new Date(s);
    if (isNaN(d)) return String(s);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace(/Z$/, " UTC");
  }

  function fmtRel(s) {
    if (isZeroTime(s)) return "";
    const ms = new Date(s) - Date.now();
    const a = Math.abs(ms);
    let t;
    if (a < 1000) t = Math.round(a) + " ms";
    else if (a < 120e3) t = Math.round(a / 1000) + " s";
    else if (a < 7200e3) t = Math.round(a / 60e3) + " min";
    else if (a < 172800e3) t = Math.round(a / 3600e3) + " h";
    else t = Math.round(a / 86400e3) + " d";
    return ms >= 0 ? "in " + t : t + " ago";
  }

  function fmtMs(ms) {
    if (ms === 0) return "0";
    if (ms < 1) return (ms * 1000).toFixed(0) + " µs";
    if (ms < 1000) return ms.toFixed(ms < 10 ? 2 : 0) + " ms";
    if (ms < 120e3) return (ms / 1000).toFixed(1) + " s";
    return (ms / 60e3).toFixed(1) + " min";
  }

  function jobHref(topic, id) {
    return "#/job/" + encodeURIComponent(topic) + "/" + encodeURIComponent(id);
  }

  // actionButton returns a button doing kind on a job, or nothing when the
  // dashboard may not act.
  function actionButton(kind, label, job, after) {
    if (state.readOnly || !state.can[kind]) return null;
    return el("button", {
      type: "button",
      class: "act act-" + kind,
      "data-action": kind,
      "data-topic": job.topic,
      "data-id": job.id,
      onclick: async (ev) => {
        const b = ev.currentTarget;
        if (kind === "cancel" && !window.confirm("Cancel " + iso(job.topic + "/" + job.id) + "? It is deleted and never runs.")) return;
        b.disabled = true;
        try {
          const r = await post(kind, { topic: job.topic, id: job.id });
          flash(r.message, false);
        } catch (e) {
          flash(kind + " " + iso(job.topic + "/" + job.id) + ": " + e.message, true);
        }
        b.disabled = false;
        if (after) after();
      },
    }, label);
  }

  function jobActions(job, after) {
    const out = [];
    if (job.state === "dead") out.push(actionButton("requeue", "Requeue", job, after));
    if (job.state === "pending") out.push(actionButton("run", job.topicPaused ? "Run now (waits: topic paused)" : "Run now", job, after));
    if (job.state === "pending" || job.state === "dead" || job.state === "running") out.push(actionButton("cancel", "Cancel", job, after));
    return out.filter(Boolean);
  }

  // bulkButton acts on every dead job of a topic (requeue or cancel).
  function bulkButton(kind, label, topic, count, after) {
    if (state.readOnly || !state.can[kind] || count === 0) return null;
    return el("button", {
      type: "button",
      class: "act bulk act-" + kind + "-all",
      "data-action": kind + "-all",
      "data-topic": topic,
      onclick: async (ev) => {
        const b = ev.currentTarget;
        const what = kind === "requeue" ? "Requeue every dead job of " + iso(topic) + " (due now)?" : "Cancel every dead job of " + iso(topic) + "? They are deleted.";
        if (!window.confirm(what)) return;
        b.disabled = true;
        try {
          const r = await post(kind, { topic: topic, id: "", all: true });
          flash(r.message, false);
        } catch (e) {
          flash(kind + " every dead job of " + iso(topic) + ": " + e.message, true);
        }
        b.disabled = false;
        if (after) after();
      },
    }, label);
  }

  // pauseButton pauses or resumes a topic.
  function pauseButton(c, after) {
    const kind = c.paused ? "resume" : "pause";
    if (state.readOnly || !state.can[kind]) return null;
    return el("button", {
      type: "button",
      class: "act act-" + kind,
      "data-action": kind,
      "data-topic": c.topic,
      onclick: async (ev) => {
        const b = ev.currentTarget;
        if (kind === "pause" && !window.confirm("Pause " + iso(c.topic) + "? Its due jobs wait, in every process, until it is resumed.")) return;
        b.disabled = true;
        try {
          const r = await post(kind, { topic: c.topic, id: "" });
          flash(r.message, false);
        } catch (e) {
          flash(kind + " " + iso(c.topic) + ": " + e.message, true);
        }
        b.disabled = false;
        if (after) after();
      },
    }, kind === "pause" ? "Pause" : "Resume");
  }

  // recurringPanel lists the recurring schedules: when, next slot, the
  // latest slot's job, and a button that removes one.
  function recurringPanel(rs) {
    if (rs.length === 0) return null;
    return el("section", { class: "panel", id: "recurring" },
      el("h2", {}, "Recurring schedules"),
      el("table", { class: "jobs" },
        el("thead", {}, el("tr", {}, ["Name", "Topic", "When", "Next slot", "Last slot", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, rs.map((r) => el("tr", { "data-recurring": r.name },
          el("td", {}, r.name),
          el("td", {}, el("a", { href: topicHref(r.topic), class: "topic-link" }, r.topic)),
          el("td", {}, r.when),
          el("td", { title: r.next.length ? fmtTime(r.next[0]) : "" }, r.next.length ? fmtRel(r.next[0]) : "none (ended)"),
          el("td", {}, r.last ? el("a", { href: jobHref(r.topic, r.last.id), class: "job-link" }, r.last.state + ", " + fmtRel(r.last.due)) : "-"),
          el("td", { class: "actions" }, unrecurButton(r)))))));
  }

  function unrecurButton(r) {
    if (state.readOnly || !state.can.unrecur) return null;
    return el("button", {
      type: "button",
      class: "act act-unrecur",
      "data-action": "unrecur",
      "data-name": r.name,
      onclick: async (ev) => {
        const b = ev.currentTarget;
        if (!window.confirm("Remove the recurring schedule " + iso(r.name) + "? Its stored slots still to come are deleted.")) return;
        b.disabled = true;
        try {
          const res = await post("unrecur", { topic: r.topic, id: r.name });
          flash(res.message, false);
        } catch (e) {
          flash("unrecur " + iso(r.name) + ": " + e.message, true);
        }
        b.disabled = false;
        route();
      },
    }, "Remove");
  }

  function topicHref(topic, tab) {
    return "#/topic/" + encodeURIComponent(topic) + (tab ? "/" + tab : "");
  }

  function topicsPanel(topics) {
    return el("section", { class: "panel", id: "topics" },
      el("h2", {}, "Topics"),
      topics.length === 0 ? el("p", { class: "muted empty" }, "No job stored.") :
        el("table", { class: "jobs" },
          el("thead", {}, el("tr", {}, ["Topic", "Pending", "Overdue", "Running", "Dead", "State", ""].map((h, i) => el("th", { class: i > 0 && i < 5 ? "num" : "" }, h)))),
          el("tbody", {}, topics.map((c) => el("tr", { "data-topic": c.topic },
            el("td", {}, el("a", { href: topicHref(c.topic), class: "topic-link" }, c.topic)),
            el("td", { class: "num" }, el("a", { href: topicHref(c.topic, "pending") }, c.pending)),
            el("td", { class: "num" + (c.overdue > 0 ? " warn" : "") }, el("a", { href: topicHref(c.topic, "overdue") }, c.overdue)),
            el("td", { class: "num" }, el("a", { href: topicHref(c.topic, "running") }, c.running)),
            el("td", { class: "num" + (c.dead > 0 ? " bad" : "") }, el("a", { href: topicHref(c.topic, "dead") }, c.dead)),
            el("td", {}, el("span", { class: "state " + (c.paused ? "state-paused" : "state-active"), title: c.throttled > 0 ? "jobs its Limit holds back now" : "" },
              c.paused ? "paused" : c.throttled > 0 ? "active, " + c.throttled + " throttled" : "active")),
            el("td", { class: "actions" }, pauseButton(c, () => route())))))));
  }

  function fmtClock(d, bucketMs) {
    const iso = d.toISOString();
    if (bucketMs >= 3600e3) return iso.slice(5, 13).replace("T", " ") + "h";
    if (bucketMs >= 60e3) return iso.slice(11, 16);
    return iso.slice(11, 19);
  }

  async function timelinePanel(topic) {
    const t = await api("timeline?window=" + state.window + (topic ? "&topic=" + encodeURIComponent(topic) : ""));
    const top = Math.max(1, ...t.buckets);
    const from = new Date(t.from);
    const unit = { minute: "second", hour: "minute", day: "hour" }[t.window];
    const pick = el("span", { class: "windows" }, ["minute", "hour", "day"].map((w) => el("button", {
      type: "button", class: "window" + (w === t.window ? " active" : ""), "data-window": w,
      onclick: () => {
        state.window = w;
        route();
      },
    }, "next " + w)));
    return el("section", { class: "panel", id: "timeline" },
      el("h2", {}, "Upcoming ", pick),
      el("p", { class: "muted" }, (t.truncated ? "More than " + t.total : t.total) + " job(s) due in the next " + t.window + (topic ? " in " + topic : "") + ", by " + unit + "."),
      el("div", { class: "timeline" }, t.buckets.map((n, i) => el("div", {
        class: "col", title: fmtClock(new Date(from.getTime() + i * t.bucketMs), t.bucketMs) + " UTC: " + n + " job(s)",
      }, el("div", { class: "fill", "data-h": n === 0 ? "0" : Math.max(3, (100 * n) / top).toFixed(1) })))),
      el("div", { class: "axis muted" }, el("span", {}, "now"), el("span", {}, "+" + (t.buckets.length / 2) + " " + unit + "s"), el("span", {}, "+" + t.buckets.length + " " + unit + "s")),
      t.first && t.first.length ? el("table", { class: "jobs upcoming" }, el("tbody", {}, t.first.map((j) => el("tr", {},
        el("td", {}, j.topic), el("td", {}, el("a", { href: jobHref(j.topic, j.id), class: "job-link" }, j.id)), el("td", { title: fmtTime(j.due) }, fmtRel(j.due)))))) : null);
  }

  function card(label, value, extra, cls) {
    return el("div", { class: "card " + (cls || "") }, el("div", { class: "label" }, label), el("div", { class: "value" }, value), extra ? el("div", { class: "extra" }, extra) : null);
  }

  function latenessPanel(l) {
    const rows = [["p50", l.p50Ms], ["p99", l.p99Ms], ["max", l.maxMs]];
    // Bars on a log scale from 1 µs to the max (at least 1 ms).
    const top = Math.log10(Math.max(l.maxMs, 1) * 1000) + 0.3;
    const bar = (ms) => (ms <= 0 ? 0 : Math.max(2, Math.min(100, (100 * Math.log10(ms * 1000 + 1)) / top)));
    return el("section", { class: "panel", id: "lateness" },
      el("h2", {}, "Lateness"),
      el("p", { class: "muted" }, "How late handlers started after their due time, over the " + l.count + " run(s) the namespace's worker processes started since they did (bars on a log scale)."),
      l.count === 0 ? el("p", { class: "muted" }, "No run started yet.") :
        el("table", { class: "bars" }, rows.map(([name, ms]) => el("tr", {},
          el("th", {}, name),
          el("td", { class: "barcell" }, el("div", { class: "bar", style: null, "data-w": bar(ms).toFixed(1) })),
          el("td", { class: "num" }, fmtMs(ms))))));
  }

  // workersPanel: a row per started process, as it last published its
  // figures (every 2 s).
  function workersPanel(ws) {
    return el("section", { class: "panel", id: "workers" }, el("h2", {}, "Workers"),
      ws.length === 0 ? el("p", { class: "muted" }, "No worker process is started on this namespace.") :
        el("table", { class: "jobs" },
          el("thead", {}, el("tr", {}, ["Process", "Partitions", "Running", "Stuck", "Runs", "Retried", "Dead", "Late p50", "p99", "max", "Figures of"].map((h) => el("th", {}, h)))),
          el("tbody", {}, ws.map((w) => el("tr", { "data-member": w.member },
            el("td", {}, el("code", {}, w.member.length > 16 ? w.member.slice(0, 16) + "…" : w.member)),
            el("td", { class: "num" }, w.ownedPartitions), el("td", { class: "num" }, w.running),
            el("td", { class: "num" + (w.stuck > 0 ? " bad" : "") }, w.stuck), el("td", { class: "num" }, w.fired),
            el("td", { class: "num" }, w.retried), el("td", { class: "num" }, w.deadLettered),
            el("td", { class: "num" }, fmtMs(w.lateness.p50Ms)), el("td", { class: "num" }, fmtMs(w.lateness.p99Ms)),
            el("td", { class: "num" }, fmtMs(w.lateness.maxMs)), el("td", {}, fmtRel(new Date(w.atMs).toISOString())))))));
  }

  // widths are set from data-w after building (a style attribute would
  // need 'unsafe-inline' styles in the Content-Security-Policy).
  function sizeBars(root) {
    for (const b of root.querySelectorAll("[data-w]")) b.style.width = b.getAttribute("data-w") + "%";
    for (const b of root.querySelectorAll("[data-h]")) b.style.height = b.getAttribute("data-h") + "%";
  }

  async function renderOverview(seq) {
    const [o, timeline, recurring] = await Promise.all([api("overview"), timelinePanel(""), api("recurring")]);
    if (seq !== state.seq) return;
    const s = o.stats;
    const lookup = el("form", {
      class: "lookup",
      onsubmit: (ev) => {
        ev.preventDefault();
        const f = ev.currentTarget;
        const t = f.elements.topic.value.trim();
        const i = f.elements.id.value.trim();
        if (t && i) location.hash = jobHref(t, i);
      },
    }, el("label", {}, "Find a job: "), el("input", { name: "topic", placeholder: "topic", required: true }), el("input", { name: "id", placeholder: "id", required: true }), el("button", { type: "submit" }, "Show"));
    const page = el("div", { id: "overview" },
      el("div", { class: "cards" },
        card("Pending", s.pending),
        el("a", { href: "#/overdue", class: "cardlink" }, card("Overdue", s.overdue, s.overdue > 0 ? "oldest " + fmtMs(s.oldestOverdueMs) + " late" : "none more than 1 s late", s.overdue > 0 ? "warn" : "")),
        el("a", { href: "#/dead", class: "cardlink", id: "card-dead" }, card("Dead", s.dead, "dead-lettered", s.dead > 0 ? "bad" : "")),
        card("Running", o.all.running, o.all.stuck > 0 ? o.all.stuck + " stuck (ignoring their context; see the workers' logs)" : (o.workers || []).length + " worker process(es)", o.all.stuck > 0 ? "bad" : "")),
      topicsPanel(o.topics || []),
      recurringPanel(recurring.recurring || []),
      timeline,
      latenessPanel(o.all.lateness),
      workersPanel(o.workers || []),
      el("section", { class: "panel" }, lookup));
    sizeBars(page);
    main.replaceChildren(page);
  }

  function jobTable(jobs, after, opts) {
    if (jobs.length === 0) return el("p", { class: "muted empty" }, opts.empty);
    return el("table", { class: "jobs" },
      el("thead", {}, el("tr", {}, el("th", {}, "Topic"), el("th", {}, "ID"), el("th", {}, opts.dueLabel), el("th", { class: "num" }, "Attempts"), el("th", {}, "Last error"), el("th", {}, ""))),
      el("tbody", {}, jobs.map((j) => el("tr", { "data-topic": j.topic, "data-id": j.id },
        el("td", {}, j.topic),
        el("td", {}, el("a", { href: jobHref(j.topic, j.id), class: "job-link" }, j.id)),
        el("td", { title: fmtTime(j.due) }, fmtRel(j.due)),
        el("td", { class: "num" }, j.attempts + " / " + j.max_attempts),
        el("td", { class: "err" }, j.last_error || ""),
        el("td", { class: "actions" }, jobActions(j, after))))));
  }

  // The lists: tab is pending, overdue, running or dead.
  const tabs = ["pending", "overdue", "running", "dead"];

  function listQuery(topic, tab) {
    const q = ["limit=100"];
    if (topic) q.push("topic=" + encodeURIComponent(topic));
    q.push("state=" + (tab === "overdue" ? "pending&overdue=1" : tab));
    return q.join("&");
  }

  // renderList shows a list of jobs (a topic's, or every topic's), a page
  // at a time: "More" reads the next.
  async function renderList(seq, topic, tab) {
    const r = await api("jobs?" + listQuery(topic, tab));
    let counts = null;
    if (topic) {
      const o = await api("overview");
      counts = (o.topics || []).find((c) => c.topic === topic) || { topic: topic, pending: 0, overdue: 0, running: 0, dead: 0, paused: false };
    }
    if (seq !== state.seq) return;
    const reload = () => route();
    const dueLabel = tab === "dead" ? "Died" : "Due";
    const table = jobTable(r.jobs, reload, { empty: "No " + tab + " job" + (topic ? " in " + topic : "") + ".", dueLabel: dueLabel });
    const more = el("div", { class: "more" });
    let next = r.next;
    const moreButton = () => next ? el("button", {
      type: "button", id: "more",
      onclick: async () => {
        try {
          const p = await api("jobs?" + listQuery(topic, tab) + "&cursor=" + encodeURIComponent(next));
          const body = table.querySelector("tbody");
          for (const row of jobTable(p.jobs, reload, { empty: "", dueLabel: dueLabel }).querySelectorAll("tbody tr")) body.append(row);
          next = p.next;
          state.paged = true; // the reloads would drop the pages read: stop them here
          more.replaceChildren(moreButton() || "");
        } catch (e) {
          flash("More: " + e.message, true);
        }
      },
    }, "More") : null;
    more.replaceChildren(moreButton() || "");
    const title = topic ? ["Topic ", el("code", {}, topic)] : [tab === "dead" ? "Dead-lettered jobs" : tab === "overdue" ? "Overdue jobs" : tab[0].toUpperCase() + tab.slice(1) + " jobs"];
    const head = [el("h2", {}, title)];
    if (topic) {
      head.push(el("nav", { class: "tabs" }, tabs.map((t) => el("a", { href: topicHref(topic, t), class: t === tab ? "active" : "", "data-tab": t }, t + " (" + counts[t] + ")"))));
      head.push(el("div", { class: "topicstate" },
        el("span", { class: "state " + (counts.paused ? "state-paused" : "state-active"), id: "topic-state" }, counts.paused ? "paused" : "active"),
        counts.paused ? el("span", { class: "warn" }, "Its due jobs wait until it is resumed.") : null,
        pauseButton(counts, reload)));
    }
    const explain = {
      pending: "Soonest due first.",
      overdue: "Pending jobs more than a second past their due time, oldest first: no process ran them yet.",
      running: "Jobs with a run claimed: in progress, or about to start.",
      dead: "Oldest death first. Requeue sends a job back to pending, due now, with its attempts reset.",
    }[tab];
    const bulk = topic && tab === "dead" ? el("div", { class: "bulk" },
      bulkButton("requeue", "Requeue all " + counts.dead, topic, counts.dead, reload),
      bulkButton("cancel", "Cancel all " + counts.dead, topic, counts.dead, reload)) : null;
    main.replaceChildren(el("section", { class: "panel", id: "list", "data-tab": tab }, head, el("p", { class: "muted" }, explain), bulk, table, more));
  }

  const known = ["topic", "id", "state", "due", "attempts", "max_attempts", "last_error", "created", "finished", "payload", "payload_base64", "payload_size", "payload_truncated", "topicPaused"];

  async function renderJob(seq, topic, id) {
    let r;
    try {
      r = await api("job?topic=" + encodeURIComponent(topic) + "&id=" + encodeURIComponent(id));
    } catch (e) {
      if (seq !== state.seq) return;
      if (e.status === 404) {
        main.replaceChildren(el("section", { class: "panel", id: "job" }, el("h2", {}, "Job ", el("code", {}, topic + "/" + id)),
          el("p", { class: "empty" }, "Not found: " + e.message)));
        return;
      }
      throw e;
    }
    if (seq !== state.seq) return;
    const j = r.job;
    j.topicPaused = r.topicPaused; // for its Run now button
    const rows = [
      ["Topic", j.topic], ["ID", j.id],
      ["State", el("span", { class: "state state-" + j.state, id: "job-state" }, j.state)],
      [j.state === "dead" ? "Died" : "Due", isZeroTime(j.due) ? "—" : fmtTime(j.due) + " (" + fmtRel(j.due) + ")"],
      ["Attempts", j.attempts + " of " + j.max_attempts],
      ["Created", fmtTime(j.created)],
    ];
    if ("finished" in j && !isZeroTime(j.finished)) rows.push(["Finished", fmtTime(j.finished) + " (" + fmtRel(j.finished) + ")"]);
    if (j.last_error) rows.push(["Last error", el("span", { class: "err" }, j.last_error)]);
    // Fields this page does not know yet (added to JobInfo later).
    for (const [k, v] of Object.entries(j)) {
      if (known.includes(k) || v === null || v === undefined) continue; // a field with nothing in it (no headers)
      rows.push([k, typeof v === "string" ? (/^\d{4}-\d\d-\d\dT/.test(v) ? fmtTime(v) : v) : el("pre", {}, JSON.stringify(v, null, 2))]);
    }
    const payload = j.payload !== undefined ? j.payload : j.payload_base64 !== undefined ? hexOf(j.payload_base64) : "";
    const reload = () => route();
    const finished = j.state === "done" || j.state === "cancelled";
    main.replaceChildren(el("section", { class: "panel", id: "job" },
      el("h2", {}, "Job ", el("code", {}, j.topic + "/" + j.id)),
      el("table", { class: "kv" }, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)))),
      finished && j.payload_size === 0 ? el("h3", {}, "Payload ", el("span", { class: "muted" }, "not kept once a job finished (the run history keeps its outcome only)")) : [
        el("h3", {}, "Payload ", el("span", { class: "muted" }, j.payload_size + " bytes" + (j.payload_base64 !== undefined ? ", binary (hex)" : "") + (j.payload_truncated ? ", first 64 KiB shown" : ""))),
        el("pre", { class: "payload", id: "payload" }, payload)],
      el("div", { class: "actions" }, jobActions(j, reload), el("a", { href: topicHref(j.topic, j.state === "dead" ? "dead" : "pending") }, "Topic " + j.topic), " ", el("a", { href: "#/" }, "Overview"))));
  }

  async function route() {
    const seq = ++state.seq;
    const h = location.hash.replace(/^#/, "") || "/";
    const parts = h.split("/").slice(1).map((p) => {
      try {
        return decodeURIComponent(p);
      } catch (e) {
        return p;
      }
    });
    for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === "#/" + (parts[0] || ""));
    try {
      if (parts[0] === "dead" || parts[0] === "overdue") await renderList(seq, "", parts[0]);
      else if (parts[0] === "topic" && parts[1]) await renderList(seq, parts[1], tabs.includes(parts[2]) ? parts[2] : "pending");
      else if (parts[0] === "job" && parts.length >= 3) await renderJob(seq, parts[1], parts.slice(2).join("/"));
      else await renderOverview(seq);
      document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    } catch (e) {
      if (seq !== state.seq) return;
      main.replaceChildren(el("section", { class: "panel" }, el("p", { class: "error", id: "load-error" }, "Could not load: " + e.message)));
    }
  }

  async function start() {
    try {
      const o = await api("overview");
      state.can = o.can || {};
      state.readOnly = !!o.readOnly;
      state.refreshMs = o.refreshMs || 0;
      document.getElementById("mode").hidden = !state.readOnly;
    } catch (e) {
      flash("Could not load: " + e.message, true);
    }
    window.addEventListener("hashchange", () => {
      clearFlash();
      state.paged = false;
      route();
    });
    await route();
    if (state.refreshMs > 0) {
      // The next reload is timed from the end of the last one, so that slow
      // reloads (a large namespace) never overlap.
      const tick = async () => {
        const h = location.hash;
        const busy = document.activeElement && document.activeElement.tagName === "INPUT";
        if (!(h.startsWith("#/job/") || state.paged) && !busy) await route(); // job pages: reloaded by hand or after an action
        state.timer = setTimeout(tick, state.refreshMs);
      };
      state.timer = setTimeout(tick, state.refreshMs);
    }
  }

  start();
})();
