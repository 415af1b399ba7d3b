// tender-pool admin web: live slots (overview), live run progress (run page), confirmation of
// actions. No framework, nothing fetched but our own SSE endpoints; every text goes in through
// textContent, never as HTML, so job data cannot become markup. A hidden tab closes its stream.
"use strict";
(function () {
  const root = document.body.dataset.root || "";
  const q = (s) => encodeURIComponent(s);

  // --- actions ask first --------------------------------------------------------------------------
  document.addEventListener("submit", (e) => {
    const msg = e.target.dataset && e.target.dataset.confirm;
    if (msg && !window.confirm(msg)) e.preventDefault();
  });

  // --- filter forms show what the URL says: after Back, the browser would otherwise restore the
  // boxes as they were last edited, not as the page's URL filters
  window.addEventListener("pageshow", () => {
    for (const f of document.querySelectorAll("form[autocomplete=off]")) f.reset();
  });

  // --- an EventSource that pauses while the tab is hidden or the browser is offline ---------------
  function stream(url, handlers, opts) {
    let es = null;
    let last = null;   // the last event id seen: a reopened stream resumes after it (?since=)
    let ended = false;
    const mark = document.getElementById("live-state");
    const show = (cls) => { if (mark) mark.className = "live " + cls; };
    function open() {
      if (es || ended || document.hidden || !navigator.onLine) return;
      const u = last && opts && opts.resume ? url + (url.includes("?") ? "&" : "?") + "since=" + q(last) : url;
      es = new EventSource(u);
      es.onopen = () => show("on");
      es.onerror = () => show("off");
      for (const [name, fn] of Object.entries(handlers)) {
        es.addEventListener(name, (ev) => {
          if (ev.lastEventId) last = ev.lastEventId;
          if (fn(JSON.parse(ev.data), ev) === "end") stop(true);
        });
      }
    }
    function stop(end) { if (es) { es.close(); es = null; } if (end) ended = true; show(""); }
    document.addEventListener("visibilitychange", () => (document.hidden ? stop(false) : open()));
    window.addEventListener("offline", () => stop(false));
    window.addEventListener("online", open);
    open();
    return { stop };
  }

  const el = (tag, text, cls) => {
    const n = document.createElement(tag);
    if (text !== undefined && text !== null) n.textContent = String(text);
    if (cls) n.className = cls;
    return n;
  };
  const secs = (s) => s == null ? "" : s < 60 ? s.toFixed(1) + " s" : s < 3600 ? Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s" : Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  const bytes = (n) => { if (n == null) return ""; const u = ["B", "KiB", "MiB", "GiB"]; let i = 0; while (n >= 1024 && i < 3) { n /= 1024; i++; } return i ? n.toFixed(1) + " " + u[i] : n + " B"; };
  const pct = (p) => p == null ? "" : Math.round(p) + " %";
  const link = (href, text) => { const a = el("a", text); a.href = href; return a; };
  const done = (c) => c.completed + c.failed + c.cancelled + c.skipped;

  // --- overview --------------------------------------------------------------------------------------
  const overview = document.getElementById("overview");
  if (overview) {
    stream(overview.dataset.live, { status: (st) => renderStatus(st) });
  }

  function renderStatus(st) {
    const err = document.getElementById("status-error");
    err.hidden = !st.error; err.textContent = st.error || "";
    for (const dd of document.querySelectorAll("[data-field]")) {
      const v = dd.dataset.field.split(".").reduce((o, k) => (o == null ? o : o[k]), st);
      dd.textContent = v == null ? "–" : String(v);
    }
    const tbody = document.getElementById("slots");
    const rows = (st.slots || []).map((s) => {
      const tr = el("tr", null, "state-" + s.state);
      tr.dataset.slot = s.id;
      tr.append(el("td", s.id));
      const st_ = el("td"); st_.append(el("span", s.state, "badge " + s.state)); tr.append(st_);
      tr.append(el("td", s.kind || ""));
      const job = el("td"); if (s.job_id) job.append(link(root + "/jobs/" + q(s.job_id), s.job_id)); tr.append(job);
      tr.append(el("td", s.user || ""), el("td", s.file || "", "file"), el("td", secs(s.elapsed_s)),
        el("td", secs(s.heartbeat_age_s)), el("td", pct(s.tree_cpu_percent)), el("td", bytes(s.tree_rss_bytes)),
        el("td", s.heaviest || ""));
      return tr;
    });
    if (!rows.length) { const tr = el("tr", null, "empty"); const td = el("td", "no slots"); td.colSpan = 11; tr.append(td); rows.push(tr); }
    tbody.replaceChildren(...rows);
    const probs = document.getElementById("problems");
    probs.replaceChildren(...(st.problems || []).map((p) => el("li", p, "problem")),
      ...(st.warnings || []).map((w) => el("li", w, "warning")));
    const runs = document.getElementById("active-runs");
    const rr = (st.runs || []).map((r) => {
      const tr = el("tr");
      const a = el("td"); a.append(link(root + "/runs/" + q(r.id), r.id));
      const p = el("td"); const bar = el("progress"); bar.max = r.counts.total; bar.value = done(r.counts);
      p.append(bar, " " + done(r.counts) + "/" + r.counts.total);
      tr.append(a, el("td", r.user), el("td", r.kind), p);
      return tr;
    });
    if (!rr.length) { const tr = el("tr", null, "empty"); const td = el("td", "none"); td.colSpan = 4; tr.append(td); rr.push(tr); }
    runs.replaceChildren(...rr);
    const consumers = document.getElementById("consumers");
    if (consumers) {
      consumers.replaceChildren(...(st.consumers || []).map((c) => {
        const tr = el("tr");
        tr.append(el("td", c.group), el("td", c.lag), el("td", c.pending), el("td", secs(c.oldest_pending_age_s)),
          el("td", c.gap ? "yes" : ""));
        return tr;
      }));
    }
  }

  // --- a run ---------------------------------------------------------------------------------------
  const run = document.getElementById("run");
  if (run) {
    const seen = new Set();
    const log = document.getElementById("events");
    const types = ["snapshot", "run_started", "job_started", "job_progress", "job_completed", "job_failed",
      "job_skipped", "job_cancelled", "run_finished"];
    const handlers = {};
    for (const t of types) handlers[t] = (ev) => onEvent(ev);
    if (run.dataset.final !== "true") stream(run.dataset.events, handlers, { resume: true });

    function onEvent(ev) {
      if (seen.has(ev.id)) return;   // never twice, whatever the network did
      seen.add(ev.id);
      if (ev.counts) {
        const c = ev.counts;
        const bar = document.getElementById("run-progress");
        bar.max = c.total; bar.value = done(c);
        document.getElementById("run-done").textContent = done(c);
        document.getElementById("run-total").textContent = c.total;
        for (const dd of document.querySelectorAll("[data-count]")) dd.textContent = c[dd.dataset.count];
      }
      if (ev.state) {
        const b = document.getElementById("run-state");
        b.textContent = ev.state; b.className = "badge " + ev.state;
      }
      for (const j of ev.jobs || []) setJob(j.id, j.state);
      if (ev.job_id && ev.job_state) setJob(ev.job_id, ev.job_state);
      if (ev.type === "job_progress" && ev.job_id && ev.progress != null) {
        const row = document.querySelector('tr[data-job="' + CSS.escape(ev.job_id) + '"] td.jobprogress');
        if (row) row.textContent = Math.round(ev.progress * 100) + " %" + (ev.message ? " " + ev.message : "");
      }
      const li = el("li", ev.type + (ev.key ? " " + ev.key : "") + (ev.job_state ? " → " + ev.job_state : ""));
      li.dataset.id = ev.id;
      log.prepend(li);
      if (ev.type === "run_finished" || (ev.type === "snapshot" && ["completed", "partial_success", "failed", "cancelled"].includes(ev.state))) {
        for (const f of document.querySelectorAll("form[data-while-running]")) f.hidden = true;
        return "end";
      }
    }
    function setJob(id, state) {
      const cell = document.querySelector('tr[data-job="' + CSS.escape(id) + '"] td.state');
      if (cell) cell.replaceChildren(el("span", state, "badge " + state));
    }
  }
})();
