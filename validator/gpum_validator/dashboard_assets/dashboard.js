// gpu-market validator dashboard: renders this node's JSON API (same origin only).
//
// Every figure lands in an element with data-field="<path in the JSON>"; its text is the
// formatted value (data-format says how; data-empty what a null shows) and data-raw the exact
// value from the API ("" for null), so scripts and tests can read figures back. Values are only ever set with textContent:
// nothing from the chain (GPU models, regions, endpoints) is parsed as HTML.
"use strict";

(() => {
  const REFRESH_MS = 5000;
  const WINDOWS = 120;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const BASE58 = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;
  const page = document.body.dataset.page;
  let decimals = null; // {payment, stake} of the last answer

  // ------------------------------------------------------------------ fetching

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function getJSON(url, allow404) {
    const r = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
    let body = null;
    try {
      body = await r.json();
    } catch (e) {
      body = null;
    }
    if (r.ok) return body;
    if (allow404 && r.status === 404) return null;
    const message = body && body.message ? body.message : `HTTP ${r.status} from ${url}`;
    throw new ApiError(r.status, body && body.error, message);
  }

  // ------------------------------------------------------------------ formatting

  const group = (digits) => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");

  function num(v) {
    if (v === null || v === undefined) return "—";
    return Number.isInteger(v) ? group(String(v)) : v.toLocaleString("en-US");
  }

  // A token amount in base units as a decimal number of tokens (exact for integers).
  function amount(v, dec) {
    if (v === null || v === undefined) return "—";
    const n = Math.round(Number(v));
    if (dec === null || dec === undefined) return `${group(String(n))} units`;
    const neg = n < 0;
    const s = String(Math.abs(n)).padStart(dec + 1, "0");
    const whole = group(s.slice(0, s.length - dec));
    const frac = s.slice(s.length - dec).replace(/0+$/, "");
    return (neg ? "-" : "") + whole + (frac ? `.${frac}` : "");
  }

  const pad2 = (n) => String(n).padStart(2, "0");

  function duration(v) {
    if (v === null || v === undefined) return "—";
    let s = Math.max(0, Math.round(v));
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    s %= 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${pad2(m)}m`;
    if (m) return `${m}m ${pad2(s)}s`;
    return `${s}s`;
  }

  function timeText(v) {
    if (!v) return "—";
    return `${new Date(v * 1000).toISOString().replace("T", " ").slice(0, 19)} UTC`;
  }

  // "2026-11-27 13:40 UTC (12 min ago)", one part a line: when a provider was last seen alive.
  function seenText(v) {
    const s = Math.max(0, Math.round(Date.now() / 1000 - v));
    let ago = "just now";
    if (s >= 86400) ago = `${Math.floor(s / 86400)} d ago`;
    else if (s >= 3600) ago = `${Math.floor(s / 3600)} h ago`;
    else if (s >= 60) ago = `${Math.floor(s / 60)} min ago`;
    const span = document.createElement("span");
    span.className = "seen";
    span.title = timeText(v);
    const when = timeText(v);
    const time = document.createElement("span");
    time.textContent = `${when.slice(11, 16)} UTC`;
    const small = document.createElement("small");
    small.textContent = `(${ago})`;
    span.append(when.slice(0, 10), " ", time, " ", small);
    return span;
  }

  const short = (s) => (s && s.length > 14 ? `${s.slice(0, 6)}…${s.slice(-6)}` : s || "—");

  function badge(text, status) {
    const span = document.createElement("span");
    span.className = `badge s-${status}`;
    span.textContent = text;
    return span;
  }

  function link(href, text, title) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    if (title) a.title = title;
    return a;
  }

  const jobHref = (addr) => `/dashboard/job/${encodeURIComponent(addr)}`;
  const providerHref = (addr) => `/dashboard/provider/${encodeURIComponent(addr)}`;

  // format name -> (value) => string | Node; null values show "—" for every format.
  const FORMATS = {
    int: num,
    text: (v) => String(v),
    endpoint: (v) => v || "none published",
    amount: (v) => amount(v, decimals && decimals.payment),
    stake: (v) => amount(v, decimals && decimals.stake),
    seconds: (v) => `${num(v)} s`,
    duration,
    time: timeText,
    clock: (v) => {
      const span = document.createElement("span");
      span.textContent = v ? `${new Date(v * 1000).toISOString().slice(11, 19)}` : "—";
      span.title = timeText(v);
      return span;
    },
    bp: (v) => `${(v / 100).toFixed(2).replace(/\.?0+$/, "")} %`,
    bool: (v) => (v ? "yes" : "no"),
    address: (v) => String(v),
    provider: (v) => link(providerHref(v), String(v)),
    job: (v) => link(jobHref(v), short(String(v)), String(v)),
    list: (v) => v.join(", ") || "—",
    status: (v) => badge(String(v), String(v)),
    paused: (v) => (v ? badge("paused", "paused") : badge("open for jobs", "active")),
    health: (v) => (v ? badge("healthy", "ok") : badge("degraded", "down")),
    reachable: (v) => (v ? "reachable" : "unreachable"),
    signature: (v) => {
      const code = document.createElement("code");
      code.textContent = short(String(v));
      code.title = String(v);
      return code;
    },
    score: (v) => (typeof v === "number" ? v.toFixed(3) : String(v)),
    mib: (v) => `${num(Math.round(v / 1024))} GiB`,
    truncated: (v) => (v ? "More offers exist; the best 200 are shown." : ""),
    "truncated-jobs": (v) => (v ? "the newest 200 are shown." : "all are shown."),
    ago: (v) => {
      const span = document.createElement("span");
      const s = Math.round(Date.now() / 1000 - v);
      span.textContent = s >= 0 ? `${duration(s)} ago` : `in ${duration(-s)}`;
      span.title = timeText(v);
      return span;
    },
    online: (v) => (v ? badge("online", "ok") : badge("offline", "down")),
    seen: seenText,
  };

  function rawText(v) {
    if (v === null || v === undefined) return "";
    if (Array.isArray(v)) return v.join(",");
    return String(v);
  }

  // Show value v in element el (format from data-format, default "text").
  function put(el, v, format) {
    el.dataset.raw = rawText(v);
    el.replaceChildren();
    const f = FORMATS[format || el.dataset.format || "text"] || FORMATS.text;
    const shown = v === null || v === undefined ? el.dataset.empty || "—" : f(v);
    if (shown instanceof Node) el.appendChild(shown);
    else el.textContent = shown;
    if (el.dataset.format === "status" || el.dataset.format === "paused" ||
        el.dataset.format === "health") {
      el.classList.remove("badge");
    }
  }

  // The value at a dotted path; undefined when the path does not exist, null when a step is null.
  function at(obj, path) {
    let cur = obj;
    for (const key of path.split(".")) {
      if (cur === null) return null;
      if (typeof cur !== "object" || !(key in cur)) return undefined;
      cur = cur[key];
    }
    return cur;
  }

  // Fill every static [data-field] of the page from one API answer.
  function fill(data, root) {
    for (const el of (root || document).querySelectorAll("[data-field]")) {
      if (el.closest("tbody")) continue;
      const v = at(data, el.dataset.field);
      if (v !== undefined) put(el, v);
    }
  }

  function setField(name, v, format) {
    for (const el of document.querySelectorAll(`[data-field="${name}"]`)) put(el, v, format);
  }

  function cell(value, format, field, cls) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    if (field) td.dataset.field = field;
    put(td, value, format);
    return td;
  }

  function fillTable(role, rows, emptyText, columns) {
    const body = document.querySelector(`[data-role="${role}"] tbody`);
    if (!body) return;
    // Each cell carries its column's name: a phone shows a row as a card of "name value" lines.
    const heads = [...body.closest("table").querySelectorAll("thead th")].map((th) => th.textContent);
    const trs = rows.map((row) => {
      const tr = document.createElement("tr");
      columns(row).forEach((c, i) => {
        c.dataset.label = heads[i] || "";
        tr.appendChild(c);
      });
      return tr;
    });
    if (!trs.length) {
      const tr = document.createElement("tr");
      tr.className = "empty";
      const td = document.createElement("td");
      td.colSpan = body.closest("table").querySelectorAll("thead th").length;
      td.textContent = emptyText;
      tr.appendChild(td);
      trs.push(tr);
    }
    body.replaceChildren(...trs);
  }

  function show(role, visible) {
    const el = document.querySelector(`[data-role="${role}"]`);
    if (el) el.hidden = !visible;
  }

  // ------------------------------------------------------------------ charts

  // fixed: the y-range whatever the values; minSpan: the least span of a y-range (a flat
  // 77-78 °C line stays a line, not a cliff); fromZero: the range starts at 0.
  const CHARTS = {
    util: { value: (g) => (g.util_gpu_avg_bp == null ? null : g.util_gpu_avg_bp / 100),
            unit: "%", fixed: [0, 100] },
    temp: { value: (g) => g.temp_max_c, unit: "°C", minSpan: 20 },
    power: { value: (g) => (g.power_avg_mw == null ? null : g.power_avg_mw / 1000), unit: "W",
             fromZero: true, minSpan: 10 },
  };
  const W = 420;
  const H = 190;
  const PAD = { left: 34, right: 10, top: 10, bottom: 22 };

  function niceStep(x) {
    if (!(x > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(x));
    const n = x / p;
    return (n <= 1 ? 1 : n <= 2 ? 2 : n <= 5 ? 5 : 10) * p;
  }

  function range(values, spec) {
    if (spec.fixed) return { lo: spec.fixed[0], hi: spec.fixed[1], step: (spec.fixed[1] - spec.fixed[0]) / 4 };
    if (!values.length) return { lo: 0, hi: spec.minSpan || 1, step: (spec.minSpan || 1) / 4 };
    let min = Math.min(...values);
    let max = Math.max(...values);
    if (spec.fromZero) min = 0;
    const span = spec.minSpan || 0;
    if (max - min < span) { // centre the values in a range of at least minSpan
      const mid = (max + min) / 2;
      min = spec.fromZero ? 0 : Math.max(0, mid - span / 2);
      max = min + span;
    }
    const step = niceStep((max - min) / 4 || Math.abs(max) / 4 || 1);
    const lo = Math.floor(min / step) * step;
    let hi = Math.ceil(max / step) * step;
    if (hi <= lo) hi = lo + step;
    return { lo, hi, step };
  }

  // A time on the x-axis, UTC, as precise as the span needs: "14:05:20" within 10 minutes,
  // "14:05" within a day, else "Nov 27 14:05".
  function timeTick(t, span) {
    const iso = new Date(Math.round(t) * 1000).toISOString();
    if (span <= 600) return iso.slice(11, 19);
    const hm = iso.slice(11, 16);
    if (span <= 86400) return hm;
    const d = new Date(Math.round(t) * 1000);
    const month = d.toLocaleString("en-US", { month: "short", timeZone: "UTC" });
    return `${month} ${d.getUTCDate()} ${hm}`;
  }

  function svg(tag, attrs) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }

  function gpuOrder(windows) {
    const seen = [];
    for (const w of windows) for (const g of w.gpus) if (!seen.includes(g.uuid)) seen.push(g.uuid);
    return seen;
  }

  function drawChart(figure, kind, windows, uuids) {
    const spec = CHARTS[kind];
    const series = uuids.map((uuid) => windows.map((w) => {
      const g = w.gpus.find((x) => x.uuid === uuid);
      return g ? spec.value(g) : null;
    }));
    const values = series.flat().filter((v) => v !== null);
    const { lo, hi, step } = range(values, spec);
    const n = windows.length;
    // x is time: each window at its end, the axis from the first window's start.
    const t0 = n ? windows[0].window_start : 0;
    const t1 = n ? windows[n - 1].window_end : 1;
    const x = (i) => PAD.left + (n < 1 || t1 <= t0 ? (W - PAD.left - PAD.right) / 2
      : ((windows[i].window_end - t0) * (W - PAD.left - PAD.right)) / (t1 - t0));
    const y = (v) => PAD.top + (1 - (v - lo) / (hi - lo)) * (H - PAD.top - PAD.bottom);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
                              "aria-label": `${kind} over time (UTC)`,
                              "data-field": `chart.${kind}`, "data-raw": n,
                              "data-lo": lo, "data-hi": hi });
    for (let v = lo; v <= hi + step / 1000; v += step) {
      root.appendChild(svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v),
                                     class: "grid-line" }));
      const label = svg("text", { x: PAD.left - 6, y: y(v) + 3, "text-anchor": "end",
                                  class: "axis-label" });
      label.textContent = `${+v.toFixed(2)}`;
      root.appendChild(label);
    }
    if (n) {
      root.dataset.t0 = t0;
      root.dataset.t1 = t1;
      const ticks = [[t0, "start"], [(t0 + t1) / 2, "middle"], [t1, "end"]];
      for (const [t, anchor] of ticks) {
        const at = PAD.left + ((t - t0) * (W - PAD.left - PAD.right)) / Math.max(1, t1 - t0);
        const label = svg("text", { x: at, y: H - 6, "text-anchor": anchor,
                                    class: "axis-label x-label" });
        label.textContent = timeTick(t, t1 - t0);
        root.appendChild(label);
      }
      windows.forEach((w, i) => {
        if (w.decision !== "accepted") {
          const mark = svg("rect", { x: x(i) - 2, y: H - PAD.bottom + 1, width: 4, height: 4,
                                     class: "rejected" });
          const t = svg("title");
          t.textContent = `window #${w.seq} rejected`;
          mark.appendChild(t);
          root.appendChild(mark);
        }
      });
    } else {
      const t = svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty-label" });
      t.textContent = "no windows";
      root.appendChild(t);
    }
    series.forEach((vals, s) => {
      let d = "";
      let pen = false;
      let points = 0;
      vals.forEach((v, i) => {
        if (v === null) {
          pen = false;
          return;
        }
        d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
        points += 1;
      });
      if (!points) return;
      if (points === 1) d += "h0.01"; // a lone point still shows with round caps
      const path = svg("path", { d, class: `series c${s % 8}`, "data-gpu": uuids[s],
                                 "data-points": points });
      const t = svg("title");
      t.textContent = `${uuids[s]} ${spec.unit}`;
      path.appendChild(t);
      root.appendChild(path);
    });
    figure.querySelector("svg")?.remove();
    figure.appendChild(root);
  }

  function drawLegend(windows, uuids) {
    const legend = document.querySelector('[data-role="legend"]');
    const last = windows[windows.length - 1];
    legend.replaceChildren(...uuids.map((uuid, s) => {
      const item = document.createElement("span");
      const sw = document.createElement("span");
      sw.className = `sw c${s % 8}`;
      item.appendChild(sw);
      const g = last && last.gpus.find((x) => x.uuid === uuid);
      const now = g ? [g.util_gpu_avg_bp == null ? null : `${(g.util_gpu_avg_bp / 100).toFixed(0)} %`,
        g.temp_max_c == null ? null : `${g.temp_max_c} °C`,
        g.power_avg_mw == null ? null : `${(g.power_avg_mw / 1000).toFixed(0)} W`].filter(Boolean) : [];
      const text = document.createElement("span");
      text.textContent = `${uuid}${now.length ? ` — now ${now.join(", ")}` : ""}`;
      item.appendChild(text);
      return item;
    }));
  }

  // ------------------------------------------------------------------ pages

  function addressFromPath() {
    const parts = location.pathname.split("/").filter(Boolean);
    return decodeURIComponent(parts[parts.length - 1] || "");
  }

  async function market() {
    const m = await getJSON("/v1/dashboard/market");
    decimals = m.decimals;
    fill(m);
  }

  // The online cell: online / offline, or why it is not known.
  function liveCell(r, field, unknown) {
    const td = cell(r.online, "online", field);
    if (r.online === null) td.textContent = unknown;
    return td;
  }

  function seenCell(r, field) {
    const td = cell(r.last_seen, "seen", field);
    if (r.last_seen === null && r.online === false) td.textContent = "never";
    return td;
  }

  async function offers() {
    const o = await getJSON(`/v1/dashboard/offers${filterQuery()}`);
    decimals = o.decimals;
    fill(o);
    show("offline-hint", o.offline > 0 && !o.all);
    const none = o.offline && !o.all ? "No provider online offers GPUs; tick show offline to see the others."
      : "No provider offers GPUs in this market yet.";
    fillTable("offers", o.offers, none, (r) => {
      const f = (name) => `offers.${r.provider}.${name}`;
      const who = cell(r.provider, "text", f("provider"), "mono");
      who.replaceChildren(link(providerHref(r.provider), short(r.provider), r.provider));
      const free = cell(r.gpus_free, "int", f("gpus_free"), "num");
      free.append(` / ${num(r.gpus_total)}`);
      const jobs = cell(r.jobs_completed, "int", f("jobs_completed"), "num");
      jobs.append(` / ${num(r.jobs_failed)}`);
      return [
        cell(r.rank, "int", f("rank"), "num"), who, cell(r.gpu_model, "text", f("gpu_model")),
        free, cell(r.vram_mib, "mib", f("vram_mib"), "num"), cell(r.region, "text", f("region")),
        cell(r.price_per_gpu_hour, "amount", f("price_per_gpu_hour"), "num"),
        cell(r.stake, "stake", f("stake"), "num"),
        cell(r.verified_hours, "int", f("verified_hours"), "num"), jobs,
        cell(r.slashes, "int", f("slashes"), "num"), cell(r.score, "score", f("score"), "num"),
        cell(r.jailed ? "jailed" : "active", "status", f("status")),
        liveCell(r, f("online"), r.endpoint ? "checking" : "no worker"),
        seenCell(r, f("last_seen")),
      ];
    });
    markOffline("offers", o.offers);
  }

  function markOffline(role, rows) {
    const trs = document.querySelectorAll(`[data-role="${role}"] tbody tr`);
    rows.forEach((r, i) => {
      if (trs[i]) trs[i].classList.toggle("offline", r.online === false);
    });
  }

  async function job() {
    const addr = addressFromPath();
    setField("job", addr, "address");
    const [j, w] = await Promise.all([
      getJSON(`/v1/dashboard/jobs/${encodeURIComponent(addr)}`),
      getJSON(`/v1/jobs/${encodeURIComponent(addr)}/windows?limit=${WINDOWS}`, true),
    ]);
    decimals = j.decimals;
    fill(j);
    if (!j.on_chain) setField("chain.status", "closed", "status");
    show("closed", !j.on_chain && !!j.closed);
    show("receipt", !!j.closed);
    // A closed job has no live figures: its receipt stands for them.
    for (const el of document.querySelectorAll('[data-role="live"]')) el.hidden = !j.on_chain && !!j.closed;
    fillTable("settlements", j.settlements, "This node has not settled this job.", (s) => {
      const f = (name) => `settlements.${s.seq}.${name}`;
      return [
        cell(s.seq, "int", f("seq"), "num"),
        cell(s.approved_seconds, "int", f("approved_seconds"), "num"),
        cell(s.status, "status", f("status")),
        cell(s.signature, "signature", f("signature")),
        cell(Math.round(s.updated_at), "clock", f("updated_at")),
      ];
    });
    const windows = w ? w.windows : [];
    show("no-windows", !windows.length);
    setField("windows.count", windows.length, "int");
    const uuids = gpuOrder(windows);
    for (const fig of document.querySelectorAll("figure[data-chart]")) {
      drawChart(fig, fig.dataset.chart, windows, uuids);
    }
    drawLegend(windows, uuids);
    fillTable("windows", windows.slice(-15).reverse(), "No window stored.", (x) => {
      const f = (name) => `windows.${x.seq}.${name}`;
      return [
        cell(x.seq, "int", f("seq"), "num"), cell(x.window_end, "clock", f("window_end")),
        cell(x.billable_seconds, "int", f("billable_seconds"), "num"),
        cell(x.approved_seconds, "int", f("approved_seconds"), "num"),
        cell(x.decision, "status", f("decision")),
        cell(x.workload_state, "text", f("workload_state")),
      ];
    });
  }

  async function provider() {
    const addr = addressFromPath();
    const p = await getJSON(`/v1/dashboard/providers/${encodeURIComponent(addr)}`);
    decimals = p.decimals;
    fill(p);
    fillTable("jobs", p.jobs, "No job of this provider is on chain.", (j) => {
      const f = (name) => `jobs.${j.job}.${name}`;
      return [
        cell(j.job, "job", f("job"), "mono"), cell(j.status, "status", f("status")),
        cell(j.gpu_count, "int", f("gpu_count"), "num"),
        cell(j.paid_seconds, "int", f("paid_seconds"), "num"),
        cell(j.paid_provider, "amount", f("paid_provider"), "num"),
        cell(j.deposited, "amount", f("deposited"), "num"),
        cell(j.created_at, "time", f("created_at")),
      ];
    });
  }

  async function validator() {
    const v = await getJSON("/v1/dashboard/validator");
    decimals = v.decimals;
    fill(v);
    fillTable("recent", v.recent_settlements, "No settlement yet.", (s) => {
      const f = (name) => `recent.${s.job}.${s.seq}.${name}`;
      return [
        cell(s.job, "job", f("job"), "mono"), cell(s.seq, "int", f("seq"), "num"),
        cell(s.approved_seconds, "int", f("approved_seconds"), "num"),
        cell(s.status, "status", f("status")), cell(s.signature, "signature", f("signature")),
        cell(Math.round(s.updated_at), "time", f("updated_at")),
      ];
    });
  }

  // The page's filters: read from the URL's query, sent as-is to the JSON API (which checks
  // them), written back into the form.
  function filterQuery() {
    const form = document.querySelector('[data-role="filters"]');
    const q = new URLSearchParams(location.search);
    const out = new URLSearchParams();
    for (const el of form ? form.elements : []) {
      if (!el.name) continue;
      const v = q.get(el.name) || "";
      if (el.type === "checkbox") el.checked = v === el.value;
      else if (document.activeElement !== el) el.value = v;
      if (v) out.set(el.name, v);
    }
    const s = out.toString();
    return s ? `?${s}` : "";
  }

  function setupFilters() {
    const form = document.querySelector('[data-role="filters"]');
    if (!form) return;
    const apply = (ev) => {
      if (ev) ev.preventDefault();
      const q = new URLSearchParams();
      for (const el of form.elements) {
        if (el.type === "checkbox" && !el.checked) continue;
        if (el.name && el.value.trim()) q.set(el.name, el.value.trim());
      }
      const s = q.toString();
      history.replaceState(null, "", `${location.pathname}${s ? `?${s}` : ""}`);
      LOADERS[page]().then(() => {
        document.querySelector('[data-role="error"]').hidden = true;
      }, showError);
    };
    form.addEventListener("submit", apply);
    for (const el of form.querySelectorAll("select, input[type=checkbox]")) el.addEventListener("change", apply);
  }

  async function jobs() {
    const l = await getJSON(`/v1/dashboard/jobs${filterQuery()}`);
    decimals = l.decimals;
    fill(l);
    const none = l.total ? "No job matches these filters." : "No job of this market is on chain.";
    fillTable("jobs", l.jobs, none, (r) => {
      const f = (name) => `jobs.${r.job}.${name}`;
      const prov = cell(r.provider, "text", f("provider"), "mono");
      prov.replaceChildren(link(providerHref(r.provider), short(r.provider), r.provider));
      const user = cell(r.user, "text", f("user"), "mono");
      user.replaceChildren(link(`/dashboard/jobs?user=${encodeURIComponent(r.user)}`, short(r.user), r.user));
      return [
        cell(r.job, "job", f("job"), "mono"), cell(r.status, "status", f("status")), prov, user,
        cell(r.gpu_count, "int", f("gpu_count"), "num"),
        cell(r.spent, "amount", f("spent"), "num"), cell(r.escrow, "amount", f("escrow"), "num"),
        cell(r.created_at, "time", f("created_at")),
      ];
    });
  }

  function fillOptions(role, values) {
    const list = document.querySelector(`[data-role="${role}"]`);
    if (!list) return;
    list.replaceChildren(...values.map((v) => {
      const o = document.createElement("option");
      o.value = v;
      return o;
    }));
  }

  async function providers() {
    const l = await getJSON(`/v1/dashboard/providers${filterQuery()}`);
    decimals = l.decimals;
    fill(l);
    fillOptions("models", l.models);
    fillOptions("regions", l.regions);
    const none = l.total ? "No provider matches these filters." : "No provider in this market yet.";
    fillTable("providers", l.providers, none, (r) => {
      const f = (name) => `providers.${r.provider}.${name}`;
      const who = cell(r.provider, "text", f("provider"), "mono");
      who.replaceChildren(link(providerHref(r.provider), short(r.provider), r.provider));
      const free = cell(r.gpus_free, "int", f("gpus_free"), "num");
      free.append(` / ${num(r.gpus_total)}`);
      const live = liveCell(r, f("online"), "unknown");
      return [
        who, cell(r.status, "status", f("status")), live, cell(r.gpu_model, "text", f("gpu_model")),
        free, cell(r.vram_mib, "mib", f("vram_mib"), "num"), cell(r.region, "text", f("region")),
        cell(r.price_per_gpu_hour, "amount", f("price_per_gpu_hour"), "num"),
        cell(r.stake, "stake", f("stake"), "num"),
        cell(r.jobs_completed, "int", f("jobs_completed"), "num"),
        cell(r.slashes, "int", f("slashes"), "num"),
        seenCell(r, f("last_seen")),
      ];
    });
    markOffline("providers", l.providers);
  }

  const LOADERS = { market, offers, job, provider, validator, jobs, providers };

  // ------------------------------------------------------------------ wiring

  function setupLookup() {
    const form = document.querySelector('[data-role="lookup"]');
    if (!form) return;
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const addr = form.elements.addr.value.trim();
      const kind = ev.submitter ? ev.submitter.value : "job";
      const hint = document.querySelector('[data-role="lookup-error"]');
      if (!BASE58.test(addr)) {
        hint.textContent = "That is not a base58 account address.";
        return;
      }
      location.href = kind === "provider" ? providerHref(addr) : jobHref(addr);
    });
  }

  // A 4xx answer is final (no job at the address, a bad filter): said in place of the tables,
  // which never stay "loading…"; anything else is a banner and the next refresh retries.
  function showError(err) {
    const message = err && err.message ? err.message : String(err);
    const final = err instanceof ApiError && err.status >= 400 && err.status < 500 &&
      err.status !== 429;
    const box = document.querySelector('[data-role="notfound"]');
    if (final && box && (err.status === 404 || err.status === 400)) {
      document.querySelector('[data-role="notfound-message"]').textContent = message;
      box.hidden = false;
      show("job-body", false);
      show("closed", false);
      show("receipt", false);
      setField("chain.status", err.status === 404 ? "not found" : "bad address", "status");
    }
    const inBox = final && box && !box.hidden;
    for (const td of document.querySelectorAll("tbody tr.empty td")) {
      if (td.textContent === "loading…") td.textContent = final ? message : "not loaded yet";
    }
    const banner = document.querySelector('[data-role="error"]');
    banner.textContent = message;
    banner.dataset.code = (err && err.code) || "";
    banner.hidden = inBox; // said once, in the page's own panel
  }

  async function tick() {
    if (!LOADERS[page]) return; // the error page shows what the server said, nothing to load
    try {
      await LOADERS[page]();
      document.querySelector('[data-role="error"]').hidden = true;
      const now = new Date();
      setField("updated", Math.floor(now.getTime() / 1000), "text");
      for (const el of document.querySelectorAll('[data-field="updated"]')) {
        el.textContent = `${pad2(now.getHours())}:${pad2(now.getMinutes())}:${pad2(now.getSeconds())}`;
      }
    } catch (err) {
      showError(err);
    } finally {
      setTimeout(tick, REFRESH_MS);
    }
  }

  for (const a of document.querySelectorAll(`[data-nav="${page}"]`)) a.classList.add("active");
  setupLookup();
  setupFilters();
  tick();
})();
