// The operator page of an mm2py worker: reads GET /ui/state, draws its own SVG charts, and sends
// the REST API's own calls for every action (their error messages are shown beside the field).
"use strict";

const BASE = location.pathname.replace(/\/ui\/?$/, "");  // the API's root (works behind a path prefix)
const FILTERS = ["topics", "topics.exclude", "groups", "groups.exclude"];
const TOP_PARTITIONS = 20;
const cards = new Map();  // flow name -> {el, flow, ...}
let current = null;       // the last /ui/state answer
let timer = null;
// a bearer token the user pasted into the sign-in form (an API that takes tokens and no Basic):
// kept for this tab only, sent with every call
let token = sessionStorage.getItem("mm2py.token") || "";

const $ = (sel, root = document) => root.querySelector(sel);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);

// -- numbers -------------------------------------------------------------------------------------
function num(v, digits = 0) {
  if (v === null || v === undefined) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  return v.toFixed(a > 0 && a < 10 ? digits : 0);
}
function bytes(v) {
  if (v === null || v === undefined) return "–";
  const units = ["B", "KB", "MB", "GB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return v.toFixed(v < 10 && i ? 1 : 0) + " " + units[i];
}
function secs(v) {
  if (v === null || v === undefined) return "–";
  if (v === 0) return "0 s";
  if (v > 300) return "> 5 min";  // latency above the histograms' last bucket
  if (v < 1) return (v * 1000).toFixed(v < 0.01 ? 1 : 0) + " ms";
  if (v < 120) return v.toFixed(1) + " s";
  return (v / 60).toFixed(1) + " min";
}

// -- the REST API ----------------------------------------------------------------------------------
async function api(method, path, body) {
  const init = {method, headers: {accept: "application/json"}};
  if (token) init.headers.authorization = `Bearer ${token}`;
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  // from the origin: a page opened as https://user:password@host/ui keeps the credentials in its own
  // address, and a fetch relative to it is refused; the browser sends the credentials it cached
  const r = await fetch(location.origin + BASE + path, init);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = {error: text}; }
  if (!r.ok) {
    const err = new Error((data && (data.error || data.message || data.detail)) || `${r.status} ${r.statusText}`);
    err.status = r.status;
    err.body = data || {};
    // the API asks for a token: the sign-in form, with why (an expired or refused token says so)
    if (r.status === 401 && /bearer/i.test(r.headers.get("www-authenticate") || "")) signIn(err.message);
    throw err;
  }
  return data;
}

function signIn(why) {
  const form = $("#sign-in");
  form.hidden = false;
  $(".form-error", form).textContent = token ? why : "";
}

$("#sign-in").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = ev.target.elements.token.value.trim();
  sessionStorage.setItem("mm2py.token", token);
  ev.target.elements.token.value = "";
  ev.target.hidden = true;
  refresh();
});

function flowPath(f) {  // from what the API lists: its path, or its name
  return f.path || `/flows/${encodeURIComponent(f.name)}`;
}

// The field an error is about: the API's "key" (an MM2 setting, "east->west.topics",
// "fast.topics.exclude") or a
// validation error's location; the form-wide message otherwise.
function fieldOf(err, form) {
  const names = new Set([...form.querySelectorAll("[name]")].map((i) => i.name));
  const candidates = [];
  if (err.body && err.body.key) {  // the key, then every suffix after a dot (the flow's name first)
    const parts = err.body.key.split(".");
    parts.forEach((_, i) => candidates.push(parts.slice(i).join(".")));
  }
  for (const d of (err.body && err.body.details) || []) {
    candidates.push(...(d.loc || []).filter((p) => p !== "body").reverse());  // the innermost name first
  }
  return candidates.find((c) => names.has(c)) || null;
}

function clearErrors(form) {
  form.querySelectorAll(".field-error, .form-error, .form-ok").forEach((e) => { e.textContent = ""; });
}

function showError(form, err) {
  const field = fieldOf(err, form);
  const spot = field ? form.querySelector(`.field-error[data-for="${field}"]`) : form.querySelector(".form-error");
  spot.textContent = err.message;
}

async function submit(form, call, ok) {
  clearErrors(form);
  try {
    const result = await call();
    form.querySelector(".form-ok").textContent = ok;
    refresh();
    return result;
  } catch (err) {
    showError(form, err);
    return null;
  }
}

const patterns = (text) => text.split(",").map((p) => p.trim()).filter((p) => p);

// -- charts: inline SVG polylines over the sampler's window -------------------------------------------
function ago(seconds) {
  return seconds >= 90 ? `−${Math.round(seconds / 60)} min` : `−${Math.round(seconds)} s`;
}

// The span drawn: from the first sample (a young worker) up to the sampler's window.
function chart(box, title, times, lines, fmt, windowSeconds) {
  const W = 300, H = 90, top = 12, bottom = 12;
  const end = times.length ? times[times.length - 1] : 0;
  const span = Math.min(windowSeconds, Math.max(end - (times.length ? times[0] : 0), 10));
  const start = end - span;
  let max = 0, points = 0;
  for (const l of lines) for (const v of l.values) if (v !== null && v > max) max = v;
  const scale = max > 0 ? max * 1.1 : 1;
  const x = (t) => ((t - start) / span) * W;
  const y = (v) => top + (1 - v / scale) * (H - top - bottom);
  let svg = `<line class="axis" x1="0" y1="${H - bottom}" x2="${W}" y2="${H - bottom}"/>`;
  lines.forEach((l, k) => {
    let run = [];
    const flush = () => {
      if (run.length === 1) run.push(run[0].replace(/^([\d.]+)/, (m) => String(Number(m) + 1)));
      if (run.length) svg += `<polyline class="s${k}" points="${run.join(" ")}"/>`;
      run = [];
    };
    l.values.forEach((v, i) => {
      if (v === null || times[i] === undefined || times[i] < start) { flush(); return; }
      run.push(`${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`);
      points++;
    });
    flush();
  });
  svg += `<text x="2" y="9">max ${esc(fmt(max))}</text>`;
  svg += `<text x="2" y="${H - 1}">${ago(span)}</text><text x="${W - 18}" y="${H - 1}">now</text>`;
  const keys = lines.map((l, k) => `<span class="key${k}">${esc(l.name)} ${esc(fmt(l.values[l.values.length - 1] ?? null))}</span>`).join(" ");
  box.innerHTML = `<div class="title"><span>${esc(title)}</span><span>${keys}</span></div>` +
    `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none" data-points="${points}">${svg}</svg>`;
}

// -- one flow's card -----------------------------------------------------------------------------------
const onScreen = new IntersectionObserver((entries) => {
  for (const entry of entries) {
    const card = cards.get(entry.target.dataset.flow);
    if (!card) continue;
    card.visible = entry.isIntersecting;
    if (card.visible && card.stale && card.state) renderDetails(card);
  }
}, {rootMargin: "300px"});

function makeCard(f) {
  const el = $("#flow-template").content.firstElementChild.cloneNode(true);
  el.dataset.flow = f.name;
  el.id = cardId(f.name);
  $(".flow-name", el).textContent = f.name;
  const card = {el, flow: f, selected: null, visible: cards.size < 2, stale: true, state: null};
  onScreen.observe(el);
  el.querySelectorAll("[data-action]").forEach((b) => b.addEventListener("click", () => action(card, b.dataset.action)));
  const filters = $(".filters-form", el);
  filters.querySelectorAll("input").forEach((i) => i.addEventListener("input", () => { i.dataset.dirty = "1"; }));
  filters.addEventListener("submit", (ev) => { ev.preventDefault(); saveFilters(card, filters); });
  $(".partition-filter", el).addEventListener("input", () => renderPartitions(card));
  $(".partition-all", el).addEventListener("change", () => renderPartitions(card));
  $(".partition-table tbody", el).addEventListener("click", (ev) => {
    const row = ev.target.closest("tr");
    if (row) { card.selected = {topic: row.dataset.topic, partition: Number(row.dataset.partition)}; partitionChart(card); renderPartitions(card); }
  });
  offsetsPanel(card);
  groupsPanel(card);
  failbackPanel(card);
  return card;
}

async function action(card, what) {
  const spot = $(".action-error", card.el);
  spot.textContent = "";
  try { await api("POST", `${flowPath(card.flow)}/${what}`); } catch (err) { spot.textContent = err.message; }
  refresh();
}

async function saveFilters(card, form) {
  const body = {};
  for (const name of FILTERS) {
    const value = patterns(form.elements[name].value);
    if (value.join(",") !== (card.flow.filters[name] || []).join(",")) body[name] = value;
  }
  const done = await submit(form, () => api("PATCH", flowPath(card.flow), body), "saved");
  if (done) form.querySelectorAll("input").forEach((i) => { delete i.dataset.dirty; });
}

function offsetsPanel(card) {
  const el = card.el, form = $(".offsets-form", el), tbody = $(".offsets-table tbody", el);
  const show = (body) => {
    tbody.innerHTML = body.offsets.map((o) => `<tr><td>${esc(o.topic)}-${o.partition}</td><td>${o.position ?? "–"}</td>` +
      `<td>${esc(o.target_topic)}</td><td>${o.target_offset ?? "–"}</td></tr>`).join("");
  };
  $(".offsets-read", el).addEventListener("click", () => submit(form, async () => show(await api("GET", `${flowPath(card.flow)}/offsets`)), "read"));
  $(".offsets-forget", el).addEventListener("click", () => submit(form, async () => show(await api("DELETE", `${flowPath(card.flow)}/offsets`)), "every position forgotten"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const m = /^(.+)-(\d+)$/.exec(form.elements.partition.value.trim());
    if (!m) { clearErrors(form); $('[data-for="partition"]', form).textContent = "as topic-partition, e.g. orders-0"; return; }
    const raw = form.elements.offset.value.trim();
    const offset = /^\d+$/.test(raw) ? Number(raw) : raw;
    const body = {offsets: [{topic: m[1], partition: Number(m[2]), offset}]};
    submit(form, async () => show(await api("PATCH", `${flowPath(card.flow)}/offsets`, body)), "moved");
  });
}

function groupsPanel(card) {
  const el = card.el, form = $(".groups-form", el), tbody = $(".groups-table tbody", el);
  const run = (execute) => {
    const group = form.elements.group.value.trim(), regex = form.elements.topic_regex.value.trim();
    if (!group) { clearErrors(form); $('[data-for="group"]', form).textContent = "a consumer group of the source"; return; }
    // group offsets are the pair's (every flow of the pair syncs into its one checkpoints topic)
    const pair = `/flows/${encodeURIComponent(card.flow.source)}/${encodeURIComponent(card.flow.target)}`;
    const path = `${pair}/groups/${encodeURIComponent(group)}/offsets`;
    const call = execute ? () => api("POST", path, {execute: true, topic_regex: regex || null})
      : () => api("GET", path + (regex ? `?topic_regex=${encodeURIComponent(regex)}` : ""));
    submit(form, async () => {
      const body = await call();
      tbody.innerHTML = body.rows.map((r) => `<tr><td>${esc(r.topic)}-${r.partition}</td><td>${r.source_offset}</td>` +
        `<td>${esc(r.target_topic)}</td><td>${r.target_offset}</td><td>${esc(r.via)}</td></tr>`).join("");
      $(".groups-notes", el).innerHTML = body.notes.map((n) => `<li>${esc(n)}</li>`).join("");
    }, execute ? "applied: the group resumes there on the target" : "dry run: nothing committed");
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(false); });
  $(".groups-apply", el).addEventListener("click", () => run(true));
}

// Failback: a group as committed on the target, back to the source. Opening the panel lists the
// groups committed on the target on the flow's topics (GET .../groups); clicking one, or typing a
// name, shows where each partition resumes there (a dry run: nothing committed); committing takes a
// second click on the confirmation naming the group, the cluster and the number of offsets.
function failbackPanel(card) {
  const el = card.el, form = $(".failback-form", el), tbody = $(".failback-table tbody", el);
  const confirm = $(".failback-confirm", el), list = $(".failback-groups", el);
  const pair = () => `/flows/${encodeURIComponent(card.flow.source)}/${encodeURIComponent(card.flow.target)}`;
  const path = () => `${pair()}/groups/${encodeURIComponent(form.elements.group.value.trim())}/failback`;
  const listGroups = async () => {
    const spot = $(".failback-list-error", el);
    spot.textContent = "";
    try {
      const body = await api("GET", `${pair()}/groups`);
      list.innerHTML = body.groups.map((g) => `<li><button type="button" class="failback-pick" data-group="${esc(g.group)}">` +
        `${esc(g.group)}</button> <span class="muted">${g.partitions.map(esc).join(", ")}</span></li>`).join("") ||
        `<li class="muted">none on ${esc(body.target_cluster)}</li>`;
    } catch (err) {
      list.innerHTML = "";
      spot.textContent = err.message;
    }
  };
  $(".failback", el).addEventListener("toggle", (ev) => { if (ev.target.open) listGroups(); });
  $(".failback-reload", el).addEventListener("click", listGroups);
  list.addEventListener("click", (ev) => {
    const pick = ev.target.closest(".failback-pick");
    if (!pick) return;
    form.elements.group.value = pick.dataset.group;
    form.requestSubmit();
  });
  const regex = () => form.elements.topic_regex.value.trim();
  const show = (body) => {
    tbody.innerHTML = body.rows.map((r) => `<tr><td>${esc(r.target_topic)}-${r.partition}</td><td>${r.target_offset}</td>` +
      `<td>${esc(r.topic)}-${r.partition}</td><td>${r.source_offset}</td></tr>`).join("");
    $(".failback-notes", el).innerHTML = body.notes.map((n) => `<li>${esc(n)}</li>`).join("");
  };
  form.querySelectorAll("input").forEach((i) => i.addEventListener("input", () => { confirm.hidden = true; }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    confirm.hidden = true;
    const group = form.elements.group.value.trim();
    if (!group) { clearErrors(form); $('[data-for="group"]', form).textContent = "a consumer group that consumed on the target"; return; }
    submit(form, async () => {
      const body = await api("GET", path() + (regex() ? `?topic_regex=${encodeURIComponent(regex())}` : ""));
      show(body);
      if (body.rows.length) {
        confirm.textContent = `Fail back ${group}: commit ${body.rows.length} offsets on ${card.flow.source}`;
        confirm.hidden = false;
      }
    }, "nothing committed yet: confirm to commit these offsets on the source");
  });
  confirm.addEventListener("click", () => {
    confirm.hidden = true;
    submit(form, async () => show(await api("POST", path(), {execute: true, topic_regex: regex() || null})),
      `failed back: the group resumes there on ${card.flow.source}`);
  });
}

function renderCard(card, f, state) {
  const el = card.el;
  card.flow = f;
  const badge = $(".state", el);
  badge.textContent = f.state;
  badge.className = `state ${f.state}`;
  $(".runtime", el).textContent = f.runtime === "spark" ? "Spark runtime" : "in-process runtime";
  $(".topic-count", el).textContent = `${f.topics} topics · ${f.partitions.length} partitions · ${f.tasks.length} tasks`;
  const halted = f.state === "PAUSED" || f.state === "STOPPED";
  el.querySelector('[data-action="pause"]').disabled = f.state === "PAUSED";
  el.querySelector('[data-action="stop"]').disabled = f.state === "STOPPED";
  el.querySelector('[data-action="resume"]').disabled = !halted;
  const trace = $(".flow-trace", el);
  trace.hidden = !f.trace;
  trace.textContent = f.trace || "";
  const n = f.now;
  $(".figures", el).innerHTML = [
    [num(n.records_per_s, 1), "records/s"], [bytes(n.bytes_per_s) + "/s", "throughput"],
    [num(n.lag_records), "lag (records)"], [secs(n.lag_seconds), "lag (time)"],
    [secs(n.p50), "latency p50"], [secs(n.p99), "latency p99"],
  ].map(([v, label]) => `<div class="figure"><b>${esc(v)}</b><span>${label}</span></div>`).join("");
  card.state = state;
  card.stale = true;
  if (card.visible) renderDetails(card);
}

// Charts and tables of a card on the screen (or near it); the others wait until scrolled to.
function renderDetails(card) {
  const el = card.el, f = card.flow, state = card.state;
  card.stale = false;
  renderCharts(card, f, state);
  for (const name of FILTERS) {
    const input = $(`.filters-form [name="${name}"]`, el);
    if (document.activeElement !== input && !input.dataset.dirty) input.value = (f.filters[name] || []).join(", ");
    input.readOnly = state.read_only;
  }
  $(".tasks tbody", el).innerHTML = f.tasks.map((t) => `<tr><td>${t.id}</td><td class="${t.state === "FAILED" ? "bad" : ""}">${esc(t.state)}</td>` +
    `<td>${t.partitions}</td><td>${num(t.records)}</td><td>${num(t.lag)}</td><td>${t.restarts}</td>` +
    `<td>${num(t.verified_batches)}</td><td class="${Object.keys(t.alarms || {}).length ? "bad" : ""}">` +
    `${esc(Object.entries(t.alarms || {}).map(([a, n]) => `${a} ${n}`).join(", ") || "none")}</td></tr>`).join("");
  $(".task-errors", el).innerHTML = f.tasks.filter((t) => t.trace).map((t) =>
    `<details class="task-error" open><summary class="error">task ${t.id}: last error</summary><pre class="trace">${esc(t.trace)}</pre></details>`).join("") +
    f.tasks.filter((t) => (t.recent_alarms || []).length).map((t) =>
    `<details class="task-error"><summary class="error">task ${t.id}: alarms</summary><pre class="trace">${esc(t.recent_alarms.join("\n"))}</pre></details>`).join("") +
    f.tasks.filter((t) => (t.held_partitions || []).length).map((t) =>
    `<details class="task-error" open><summary class="error">task ${t.id}: partitions held at a record the target refuses (see its alarms)</summary><pre class="trace">${esc(t.held_partitions.join("\n"))}</pre></details>`).join("") +
    f.tasks.filter((t) => (t.refused_partitions || []).length).map((t) =>
    `<details class="task-error" open><summary class="error">task ${t.id}: partitions the target refuses (each retried alone; the others flow)</summary><pre class="trace">${esc(t.refused_partitions.map((r) =>
      `${r.target_partition} (from ${r.partition}): ${r.cause}, ${r.refusals} refusals, next try in ${r.retry_in_seconds} s\n  ${r.meaning}\n  to fix: ${r.change}`).join("\n"))}</pre></details>`).join("") +
    f.tasks.filter((t) => (t.waiting_for_target || []).length).map((t) =>
    `<details class="task-wait" open><summary>task ${t.id}: waiting for the target (no alarm; the others flow)</summary><pre class="trace">${esc(t.waiting_for_target.map((w) =>
      `${w.broker !== undefined ? `broker ${w.broker}` : `${w.target_partition} (from ${w.partition})`}: ${w.cause}, next try in ${w.retry_in_seconds} s\n  ${w.meaning}\n  to change: ${w.change}`).join("\n"))}</pre></details>`).join("");
  renderPartitions(card);
  if (card.selected) partitionChart(card);
}

function renderCharts(card, f, state) {
  const boxes = $(".charts", card.el);
  if (!boxes.children.length) boxes.innerHTML = '<div class="chart"></div>'.repeat(4);
  const s = f.series, t = state.times, w = state.window_seconds;
  const [a, b, c, d] = boxes.children;
  chart(a, "throughput (records/s)", t, [{name: "records/s", values: s.records_per_s || []}], (v) => num(v, 1), w);
  chart(b, "lag (records)", t, [{name: "records", values: s.lag_records || []}], (v) => num(v), w);
  chart(c, "lag (time)", t, [{name: "behind", values: s.lag_seconds || []}], secs, w);
  chart(d, "replication latency", t, [{name: "p50", values: s.p50 || []}, {name: "p99", values: s.p99 || []}], secs, w);
}

function renderPartitions(card) {
  const f = card.flow, el = card.el;
  const needle = $(".partition-filter", el).value.trim();
  let rows = f.partitions;  // [topic, partition, task, lag_records, lag_seconds, records_per_s, p50, p99]
  if (needle) rows = rows.filter((r) => `${r[0]}-${r[1]}`.includes(needle));
  rows = rows.slice().sort((a, b) => (b[4] ?? 0) - (a[4] ?? 0) || b[3] - a[3] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
  const all = $(".partition-all", el).checked;
  $(".partition-count", el).textContent = `(${rows.length}${!all && rows.length > TOP_PARTITIONS ? `, the worst ${TOP_PARTITIONS} shown` : ""})`;
  const sel = card.selected;
  $(".partition-table tbody", el).innerHTML = (all ? rows : rows.slice(0, TOP_PARTITIONS)).map((r) => {
    const cls = sel && sel.topic === r[0] && sel.partition === r[1] ? ' class="selected"' : "";
    const lagCls = r[4] > 60 ? "bad" : r[4] > 5 ? "warn" : "";
    return `<tr${cls} data-topic="${esc(r[0])}" data-partition="${r[1]}"><td>${esc(r[0])}-${r[1]}</td><td>${r[2]}</td>` +
      `<td>${num(r[3])}</td><td class="${lagCls}">${secs(r[4])}</td><td>${num(r[5], 1)}</td><td>${secs(r[6])}</td><td>${secs(r[7])}</td></tr>`;
  }).join("");
}

async function partitionChart(card) {
  const box = $(".partition-chart", card.el), sel = card.selected;
  if (!sel) return;
  try {
    const q = new URLSearchParams({flow: card.flow.name, topic: sel.topic, partition: sel.partition});
    const p = await api("GET", `/ui/partition?${q}`);
    box.className = "partition-chart charts";
    box.innerHTML = '<div class="chart"></div>'.repeat(4);
    const [a, b, c, d] = box.children, w = current.window_seconds, title = `${sel.topic}-${sel.partition}`;
    chart(a, `${title}: records/s`, p.times, [{name: "", values: p.series.records_per_s}], (v) => num(v, 1), w);
    chart(b, `${title}: lag (records)`, p.times, [{name: "", values: p.series.lag_records}], (v) => num(v), w);
    chart(c, `${title}: lag (time)`, p.times, [{name: "", values: p.series.lag_seconds}], secs, w);
    chart(d, `${title}: latency p99`, p.times, [{name: "", values: p.series.p99}], secs, w);
  } catch (err) {
    box.textContent = err.message;
  }
}

// -- the flows at a glance: the ones in trouble first ---------------------------------------------------
function sparkline(values) {
  const W = 140, H = 22;
  let max = 0;
  for (const v of values) if (v !== null && v > max) max = v;
  const pts = [];
  values.forEach((v, i) => {
    if (v !== null) pts.push(`${(i / Math.max(1, values.length - 1) * W).toFixed(1)},${(H - 1 - (max ? v / max : 0) * (H - 2)).toFixed(1)}`);
  });
  return `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none"><polyline points="${pts.join(" ")}"/></svg>`;
}

function renderOverview(state) {
  const box = $("#overview");
  box.hidden = state.flows.length < 2;
  if (box.hidden) return;
  const trouble = (f) => (f.state === "FAILED" || f.tasks.some((t) => t.state === "FAILED") ? 2 : f.state === "RUNNING" ? 0 : 1);
  const flows = state.flows.slice().sort((a, b) => trouble(b) - trouble(a) || (b.now.lag_seconds ?? 0) - (a.now.lag_seconds ?? 0) ||
    (b.now.lag_records ?? 0) - (a.now.lag_records ?? 0) || (a.name < b.name ? -1 : 1));
  $("tbody", box).innerHTML = flows.map((f) => {
    const failed = trouble(f) === 2 ? "bad" : "";
    return `<tr><td><a href="#${cardId(f.name)}">${esc(f.name)}</a></td><td class="${failed}">${esc(f.state)}</td>` +
      `<td>${num(f.now.records_per_s, 1)}</td><td>${num(f.now.lag_records)}</td><td>${secs(f.now.lag_seconds)}</td>` +
      `<td>${secs(f.now.p99)}</td><td>${sparkline(f.series.lag_seconds || [])}</td></tr>`;
  }).join("");
}

const cardId = (name) => "flow-" + name.replace(/[^A-Za-z0-9_.-]/g, "_");

// -- the whole page ------------------------------------------------------------------------------------
function renderCreate(state) {
  const form = $("#create-form");
  for (const name of ["source", "target"]) {
    const select = form.elements[name];
    const have = [...select.options].map((o) => o.value).join(",");
    if (have !== state.clusters.join(",")) {
      const keep = select.value;
      select.innerHTML = state.clusters.map((c) => `<option>${esc(c)}</option>`).join("");
      select.value = state.clusters.includes(keep) ? keep : state.clusters[name === "target" ? Math.min(1, state.clusters.length - 1) : 0];
    }
  }
}

function render(state) {
  current = state;
  document.body.classList.toggle("read-only", state.read_only);
  renderCreate(state);
  const list = $("#flows"), seen = new Set();
  for (const f of state.flows) {
    seen.add(f.name);
    let card = cards.get(f.name);
    if (!card) { card = makeCard(f); cards.set(f.name, card); list.appendChild(card.el); }
    renderCard(card, f, state);
  }
  for (const [name, card] of cards) if (!seen.has(name)) { onScreen.unobserve(card.el); card.el.remove(); cards.delete(name); }
  $("#no-flows").hidden = state.flows.length > 0;
  renderOverview(state);
  const parts = state.flows.reduce((n, f) => n + f.partitions.length, 0);
  const failing = state.flows.filter((f) => f.state === "FAILED" || f.tasks.some((t) => t.state === "FAILED")).length;
  $("#summary").textContent = `${state.flows.length} flows · ${parts} partitions` + (failing ? ` · ${failing} failing` : "") +
    (state.read_only ? " · read-only" : "");
}

async function refresh() {
  const started = performance.now();
  clearTimeout(timer);
  try {
    const state = await api("GET", "/ui/state");
    const fetched = performance.now();
    render(state);
    document.body.dataset.renderMs = (performance.now() - fetched).toFixed(1);
    document.body.dataset.fetchMs = (fetched - started).toFixed(1);
    $("#load-error").textContent = "";
    // since the navigation started: the page's load time, its files and first state included
    if (!document.body.dataset.loadedMs) document.body.dataset.loadedMs = performance.now().toFixed(1);
  } catch (err) {
    $("#load-error").textContent = `cannot read the worker: ${err.message}`;
  }
  const ms = performance.now() - started;
  document.body.dataset.refreshMs = ms.toFixed(1);
  document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  $("#updated").textContent = `updated ${new Date().toLocaleTimeString()} (${ms.toFixed(0)} ms)`;
  timer = setTimeout(refresh, Math.max(1000, ((current && current.sample_seconds) || 5) * 1000));
  return ms;
}

$("#create-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const form = ev.target, el = form.elements;
  const body = {source: el.source.value, target: el.target.value, settings: {}};
  if (el.topics.value.trim()) body.topics = patterns(el.topics.value);
  if (el["topics.exclude"].value.trim()) body["topics.exclude"] = patterns(el["topics.exclude"].value);
  if (el["tasks.max"].value) body.settings["tasks.max"] = Number(el["tasks.max"].value);
  submit(form, () => api("POST", "/flows", body), "created");
});

window.mm2py = {refresh};
refresh();
