// The Sluice console: reads this server's /stats and /healthz every second and shows them by
// the role /stats names (relay, bootstrap, sink). Text goes in with textContent only.
"use strict";

const POLL_MS = 1000;
const SCHEMAS_MS = 15000;
const state = { failingSince: null, schemas: {}, schemasAt: 0 };

// -- small DOM helpers ---------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : String(c));
  }
  return node;
}
const svgNs = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(svgNs, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}
function section(title, id, wide, ...children) {
  return el("section", { id, class: wide ? "wide" : null }, el("h2", {}, title), ...children);
}
function facts(pairs) {
  const dl = el("dl");
  for (const [k, v, id] of pairs) dl.append(el("dt", {}, k), el("dd", { id }, v ?? "–"));
  return dl;
}
function link(url, text) {
  if (!url || !/^https?:\/\//.test(url)) return text || url || "–";
  return el("a", { href: url }, text || url);
}

// -- formatting ----------------------------------------------------------------------------
const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
function rate(n, unit) {
  if (n === null || n === undefined) return "–";
  return `${Number(n).toLocaleString("en-US", { maximumFractionDigits: 1 })} ${unit}/s`;
}
// "1 chunk", "2 chunks"
const plural = (n, word) => `${num(n)} ${word}${Number(n) === 1 ? "" : "s"}`;
// Why /healthz is not 200: a sink lists its problems, a relay and a bootstrap server say
// status and error; "unhealthy" alone says nothing the badge does not.
function healthReason(body, status) {
  const b = body || {};
  if (Array.isArray(b.problems) && b.problems.length) return b.problems.join("; ");
  const said = b.status && b.status !== "unhealthy" ? b.status : null;
  if (said && b.error && said !== b.error) return `${said}: ${b.error}`;
  return said || b.error || `HTTP ${status}`;
}
const clock = (ms) => new Date(ms).toLocaleTimeString("sv-SE");
function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
function time(ms) {
  if (!ms) return "–";
  return new Date(ms).toLocaleString("sv-SE");
}
function ago(ms) {
  if (!ms) return "";
  return duration((Date.now() - ms) / 1000) + " ago";
}
function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}
function bar(fraction, id) {
  const pct = Math.max(0, Math.min(1, fraction || 0)) * 100;
  return el("div", { class: "bar", id, "data-fraction": (fraction || 0).toFixed(4) },
    el("div", { "data-w": pct.toFixed(1) }));
}

// The chart: events per second over the last minutes, an SVG polyline (no library).
function chart(points, id, unit) {
  const w = 600, h = 120, pad = 18;
  const box = svg("svg", { class: "chart", viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: "none",
    id, "data-points": points.length, "data-last-t": points.length ? points[points.length - 1][0] : "" });
  if (points.length < 2) {
    return el("div", {}, box, el("div", { class: "muted" }, "collecting: a point every 5 s"));
  }
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const top = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => ((t - t0) / Math.max(1, t1 - t0)) * (w - 2) + 1;
  const y = (v) => h - pad - (v / top) * (h - 2 * pad);
  const line = points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
  box.append(svg("polygon", { class: "area", points: `${x(t0)},${h - pad} ${line} ${x(t1)},${h - pad}` }));
  box.append(svg("polyline", { points: line }));
  // the time axis: when the first, middle and last points were (the server's clock, s)
  const ticks = [t0, (t0 + t1) / 2, t1].map((t) => el("span", { "data-t": Math.round(t) }, clock(t * 1000)));
  return el("div", {}, box, el("div", { class: "axis", id: id && `${id}-axis` }, ticks),
    el("div", { class: "muted" }, `peak ${rate(top, unit)} · ${duration(t1 - t0)} shown`));
}

// -- polling -------------------------------------------------------------------------------
async function getJson(path) {
  const resp = await fetch(path, { cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  return { status: resp.status, body };
}

async function poll() {
  try {
    const [stats, health] = await Promise.all([getJson("../stats?tables=1"), getJson("../healthz")]);
    if (stats.status !== 200 || !stats.body) throw new Error(`/stats answered HTTP ${stats.status}`);
    if (stats.body.role === "relay") await refreshSchemas(stats.body.sources || []);
    reachable(stats.body, health);
  } catch (err) {
    unreachable(err);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

async function refreshSchemas(sources) {
  if (Date.now() - state.schemasAt < SCHEMAS_MS) return;
  state.schemasAt = Date.now();
  for (const source of sources) {
    try {
      const r = await getJson(`../schemas/${encodeURIComponent(source)}`);
      if (r.status === 200 && r.body) state.schemas[source] = r.body.versions || [];
    } catch (e) { /* shown again on the next round */ }
  }
}

function reachable(stats, health) {
  state.failingSince = null;
  document.getElementById("banner").hidden = true;
  const healthy = health.status === 200;
  setStatus(healthy ? "ok" : "unhealthy", healthy ? "healthy" : `unhealthy: ${healthReason(health.body, health.status)}`);
  document.getElementById("role").textContent = stats.role || "?";
  document.getElementById("name").textContent = stats.name || "";
  document.title = `${stats.name || stats.role} · Sluice console`;
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString("sv-SE")}`;
  const main = document.getElementById("main");
  const render = { relay: relayPage, bootstrap: bootstrapPage, sink: sinkPage, state: statePage }[stats.role];
  main.dataset.role = stats.role || "";
  main.replaceChildren(...(render ? render(stats, health.body || {}) : [section("Stats", "raw", true, el("pre", {}, JSON.stringify(stats, null, 2)))]));
  for (const b of main.querySelectorAll(".bar > div")) b.style.width = `${b.dataset.w}%`;
}

function unreachable(err) {
  if (state.failingSince === null) state.failingSince = Date.now();
  const banner = document.getElementById("banner");
  banner.hidden = false;
  banner.textContent = `Cannot reach ${location.host} since ${new Date(state.failingSince).toLocaleTimeString("sv-SE")} ` +
    `(${err && err.message ? err.message : err}); retrying every ${POLL_MS / 1000} s. What is shown below is from before.`;
  setStatus("unreachable", "unreachable");
}

function setStatus(key, text) {
  const s = document.getElementById("status");
  s.dataset.state = key;
  s.textContent = text;
}

// -- relay ---------------------------------------------------------------------------------
function relayPage(s, health) {
  const cap = s.capture || {};
  const span = s.span || {};
  const tput = s.throughput || [];
  const now = tput.length ? tput[tput.length - 1][1] : 0;
  const captureState = cap.error ? "stopped" : cap.paused ? "paused" : cap.connected ? "capturing" : "connecting";
  return [
    section("Source", "source", false, facts([
      ["address", (s.source || {}).address, "source-address"],
      ["kind", (s.source || {}).kind, "source-kind"],
      ["capture", el("span", { class: cap.error || cap.paused ? "error" : "ok" }, captureState), "capture-state"],
      ["error", cap.error || cap.paused || "none", "capture-error"],
      ["reconnects", num(cap.reconnects)],
      ["silent for", `${num(cap.silent_ms)} ms`],
      ["stopped tables", Object.keys(cap.stopped_sources || {}).length || "none", "stopped-count"],
      ["uptime", duration(s.uptime_s)],
    ])),
    section("Newest change", "position", false, facts([
      ["SCN", el("span", { class: "big" }, num(s.max_scn)), "max-scn"],
      ["committed", `${time(span.newest_ts_ms)} (${ago(span.newest_ts_ms)})`, "newest-time"],
      ["capture lag", `${num(cap.lag_ms)} ms`, "lag"],
      ["source end SCN", num(cap.source_end_scn)],
      ["persisted SCN", num((s.persist || {}).persisted_scn)],
    ])),
    section("Throughput", "throughput", false,
      el("div", { class: "big", id: "rate-now" }, rate(now, "events")),
      el("div", { class: "muted" }, "captured events per second, last 10 minutes"),
      chart(tput, "chart", "events")),
    section("Buffer", "buffer", false,
      bar(span.fill, "buffer-fill"),
      facts([
        ["span", `${num(span.oldest_scn)} → ${num(span.newest_scn)}`, "buffer-span"],
        ["time", `${time(span.oldest_ts_ms)} → ${time(span.newest_ts_ms)}`],
        ["fill", `${bytes(s.bytes)} of ${bytes(s.buffer_capacity)} (${((span.fill || 0) * 100).toFixed(1)}%)`],
        ["windows", num(s.windows)],
        ["events", num(s.events)],
        ["in files", `${num((s.window_files || {}).windows)} windows, ${bytes((s.window_files || {}).bytes)}`],
      ])),
    section("Clients", "clients", false, facts([
      ["streams", num(s.clients), "client-count"],
      ["catching up", num(s.catching_up)],
      ["turn waits", num(s.turn_waits)],
      ["rejected", num(s.rejected_clients)],
      ["queued", bytes(s.queued_bytes)],
      ["served", bytes(s.bytes_served)],
    ]), followersTable(s.followers || [], s.links || [])),
    section("Tables", "tables", true, relayTables(s, cap)),
  ];
}

function followersTable(followers, links) {
  const rows = [];
  for (const f of followers) {
    rows.push(el("tr", { "data-follower": f.name },
      el("td", {}, link(f.console, f.name)),
      el("td", {}, f.connected ? "following" : `left ${ago(f.last_seen_ms)}`),
      el("td", {}, f.address || "")));
  }
  for (const l of links) {
    rows.push(el("tr", { "data-link": l.name }, el("td", {}, link(l.console, l.name)), el("td", {}, "configured"), el("td", {}, "")));
  }
  if (!rows.length) return el("p", { class: "muted" }, "No follower has said who it is (sinks do; --link NAME=URL adds others).");
  return el("table", { id: "followers" }, el("tr", {}, el("th", {}, "follows this relay"), el("th", {}, "state"), el("th", {}, "from")), rows);
}

function relayTables(s, cap) {
  const stopped = cap.stopped_sources || {};
  const rates = s.table_rates || {};
  const head = el("tr", {}, ["table", "state", "events/s", "schema versions", "changes between versions"].map((h) => el("th", {}, h)));
  const rows = (s.sources || []).map((source) => {
    const versions = state.schemas[source] || [];
    const isStopped = source in stopped;
    return el("tr", { "data-source": source, "data-state": isStopped ? "stopped" : "capturing" },
      el("td", {}, el("code", {}, source)),
      el("td", { class: isStopped ? "state error" : "state ok", title: stopped[source] || "" },
        isStopped ? `stopped: ${stopped[source]}` : "capturing"),
      el("td", {}, rate(rates[source] || 0, "events")),
      el("td", {}, versions.length ? `v${versions[versions.length - 1]["sluice.version"]} (${versions.length})` : "–"),
      el("td", {}, schemaChanges(versions)));
  });
  return el("table", { id: "source-table" }, head, rows);
}

function columns(version) {
  const out = new Map();
  for (const f of version.fields || []) out.set(f["sluice.column"] || f.name, f["sluice.source_type"] || JSON.stringify(f.type));
  return out;
}

function schemaChanges(versions) {
  if (versions.length < 2) return "none";
  const lines = [];
  for (let i = 1; i < versions.length; i++) {
    const a = columns(versions[i - 1]), b = columns(versions[i]);
    const parts = [];
    for (const [name, type] of b) if (!a.has(name)) parts.push(`+${name} ${type}`);
    for (const name of a.keys()) if (!b.has(name)) parts.push(`−${name}`);
    for (const [name, type] of b) if (a.has(name) && a.get(name) !== type) parts.push(`${name}: ${a.get(name)} → ${type}`);
    lines.push(el("div", {}, `v${versions[i]["sluice.version"]}: ${parts.join(", ") || "same columns"}`));
  }
  return el("div", {}, lines);
}

// -- bootstrap server ----------------------------------------------------------------------
function bootstrapPage(s) {
  const fold = s.fold || {};
  return [
    section("Store", "store", false, facts([
      ["relays", relayLinks(s.relays), "relays"],
      ["store", s.store, "store-uri"],
      ["log", `${num(s.log_start_scn)} → ${num(s.max_scn)}`, "log-range"],
      ["log files", num(s.log_files)],
      ["snapshot SCN", num(s.snapshot_scn), "snapshot-scn"],
      ["clients", num(s.clients)],
      ["rows served", num(s.rows_served)],
    ])),
    section("Fold", "fold", false, facts([
      ["last success", fold.ok_at ? `${time(fold.ok_at * 1000)} (${ago(fold.ok_at * 1000)})` : "–"],
      ["failures in a row", num(fold.failures || 0)],
      ["last error", el("span", { class: fold.error ? "error" : "" }, fold.error || "none"), "fold-error"],
      ["health", fold.problem ? el("span", { class: "error" }, fold.problem) : "ok"],
    ])),
    section("Snapshot generations", "generations", false, generationsTable(s.generations || [])),
    section("Tables", "tables", true, bootstrapTables(s.tables || {})),
  ];
}

function relayLinks(relays) {
  if (!relays || !relays.length) return "not named (bootstrap serve --relay URL links them here)";
  return el("span", {}, relays.map((r) => el("div", {}, link(`${r.replace(/\/$/, "")}/ui/`, r))));
}

// Snapshot generations, oldest first, numbered as the store keeps them (older ones are pruned):
// a store's generation "k" counts only republishes at one SCN, 1 for nearly every snapshot.
function generationsTable(gens) {
  if (!gens.length) return el("p", { class: "muted" }, "No snapshot yet: the first fold makes one.");
  const head = el("tr", {}, ["SCN", "snapshot", "folder", ""].map((h) => el("th", {}, h)));
  return el("table", { id: "generations-table" }, head, gens.map((g, i) => el("tr", { "data-generation": g.dir },
    el("td", {}, num(g.scn)),
    el("td", {}, i === gens.length - 1 ? "newest" : `${gens.length - 1 - i} older`,
      g.generation > 1 ? ` (republished at the same SCN, #${g.generation})` : ""),
    el("td", {}, el("code", {}, g.dir)),
    el("td", {}, g.current ? "served" : ""))));
}

function seedState(seeded, seeding) {
  const parts = [];
  if (seeded) parts.push(`gen ${seeded.generation}: ${num(seeded.rows)} rows in ${plural(seeded.chunks, "chunk")}, ${ago(seeded.finished_at * 1000)}`);
  if (seeding) parts.push(`gen ${seeding.generation}: ${seeding.state === "planning" ? "planning chunks" : "seeding now"}`);
  return parts.length ? parts.join("; ") : "not seeded";
}

function bootstrapTables(tables) {
  const head = el("tr", {}, ["table", "seed", "progress", "log from", "gaps", "snapshot SCN"].map((h) => el("th", {}, h)));
  const rows = Object.entries(tables).map(([source, t]) => {
    const seeded = t.seeded;
    const seeding = t.seeding;
    let progress = "–";
    if (seeding) {
      const frac = seeding.chunks ? seeding.chunks_done / seeding.chunks : 0;
      const eta = seeding.eta_s === null || seeding.eta_s === undefined ? "after the first chunks" : duration(seeding.eta_s);
      progress = el("div", {}, bar(frac, null),
        seeding.state === "planning" ? "planning chunks" :
          `${num(seeding.chunks_done)}/${plural(seeding.chunks, "chunk")}, ${plural(seeding.rows, "row")}, ${rate(seeding.rows_per_s, "rows")}, ETA ${eta}`);
    }
    const gaps = (t.log || {}).gaps || [];
    return el("tr", { "data-source": source },
      el("td", {}, el("code", {}, source)),
      el("td", { class: "seed" }, seedState(seeded, seeding)),
      el("td", { class: "progress" }, progress),
      el("td", {}, num((t.log || {}).first_scn)),
      el("td", { class: gaps.length ? "error" : "" }, gaps.length ? gaps.map((g) => `${num(g[0])}–${num(g[1])}`).join(", ") : "none"),
      el("td", {}, num(t.snapshot_scn)));
  });
  return el("table", { id: "source-table" }, head, rows);
}

// -- sink ----------------------------------------------------------------------------------
function sinkPage(s) {
  const ts = s.target_stats || {};
  const tput = s.throughput || [];
  return [
    section("Target", "target", false, facts([
      ["target", s.target, "target"],
      ["kind", s.target_kind],
      ["delivery", s.delivery],
      ["state", el("span", { class: s.state === "failed" ? "error" : "ok" }, s.state), "sink-state"],
      ["target up", s.target_up ? "yes" : el("span", { class: "error" }, `no, for ${duration(s.target_down_s)}: ${s.target_error}`)],
      ["error", s.error || "none"],
    ])),
    section("Position", "position", false, facts([
      ["checkpoint SCN", el("span", { class: "big" }, num(s.checkpoint_scn)), "checkpoint-scn"],
      ["relay's newest SCN", num(s.relay_max_scn)],
      ["lag", `${num(s.lag_scn)} SCN, ${s.lag_s === null ? "–" : duration(s.lag_s)}`, "lag"],
      ["relays", relayLinks(s.relays)],
      ["relay problem", s.relay_stats_error || "none"],
    ])),
    section("Throughput", "throughput", false,
      el("div", { class: "big", id: "rate-now" }, rate(s.events_per_s, "events")),
      el("div", { class: "muted" }, "events delivered per second, last 10 minutes"),
      chart(tput, "chart", "events")),
    section("Delivery", "delivery", false, facts([
      ["events", num(s.events)],
      ["windows", num(s.windows)],
      ["filtered", num(s.filtered_events)],
      ["retries", num(s.retries), "retries"],
      ["rewinds", num(s.rewinds)],
      ["dead letters", num(ts.dead_letters || 0), "dead-letters"],
    ])),
    section("Target counters", "target-stats", true,
      el("table", {}, Object.entries(ts).map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", {}, typeof v === "number" ? num(v) : JSON.stringify(v)))))),
    ...(s.group ? [groupSection(s.group)] : []),
  ];
}

// -- state (sluice state serve) -------------------------------------------------------------
function statePage(s) {
  const keys = Object.entries(s.keys || {});
  return [
    section("Store", "store", false, facts([
      ["store", s.store],
      ["phase", el("span", { class: s.store_scn === null ? "error" : "ok" }, s.store_scn === null ? `restoring (${s.phase})` : s.phase), "state-phase"],
      ["store SCN", el("span", { class: "big" }, num(s.store_scn)), "store-scn"],
      ["relays", relayLinks(s.relays)],
      ["error", s.error || "none"],
    ])),
    section("Lookups", "lookups", false, facts([
      ["lookups", num(s.lookups)],
      ["misses", num(s.misses)],
      ["waits timed out", num(s.waits_timed_out)],
      ["windows applied", num(s.windows)],
      ["changes applied", num(s.changes)],
    ])),
    section("Tables", "state-tables", true,
      el("table", { id: "state-table" },
        el("tr", {}, el("th", {}, "table"), el("th", {}, "keys")),
        keys.map(([t, n]) => el("tr", { "data-table": t }, el("td", {}, el("code", {}, t)), el("td", {}, num(n))))),
      (s.keyless_skipped || []).length ? el("p", { class: "muted" }, `Not kept (no primary key): ${s.keyless_skipped.join(", ")}`) : null),
  ];
}

// A group member (--group): the group, its members, and the partitions held here.
function groupSection(g) {
  const held = Object.entries(g.held || {});
  const members = el("ul", { id: "group-members" }, (g.members || []).map((m) =>
    el("li", { "data-member": m.id, class: m.id === g.member ? "ok" : null },
      `${m.id}${m.id === g.member ? " (this one)" : ""} on ${m.host || "?"}, pid ${m.pid ?? "?"}`)));
  const head = el("tr", {}, ["partition", "epoch", "state", "checkpoint SCN", "lag", "events"].map((h) => el("th", {}, h)));
  const rows = held.map(([p, h]) => el("tr", { "data-partition": p },
    el("td", {}, p), el("td", {}, num(h.epoch)),
    el("td", { class: h.state === "failed" || !h.target_up ? "error" : "" }, h.state),
    el("td", {}, num(h.checkpoint_scn)),
    el("td", {}, `${num(h.lag_scn)} SCN, ${h.lag_s === null ? "–" : duration(h.lag_s)}`),
    el("td", {}, num(h.events))));
  return section("Group", "group", true,
    facts([
      ["group", g.group, "group-name"],
      ["coordinator", `${g.coordinator} (${g.coordinator_state})`],
      ["this member", g.member || "joining", "group-member"],
      ["partitions here", `${held.length} of ${g.partitions}`, "group-held"],
      ["quorum", `${(g.members || []).length} members, quorum ${g.quorum}`],
      ["waiting", g.waiting ? el("span", { class: "error" }, g.waiting) : "no", "group-waiting"],
      ["session losses / rebalances", `${num(g.session_losses)} / ${num(g.rebalances)}`],
      ["coordinator problem", g.coordinator_error || "none"],
    ]),
    members,
    held.length ? el("table", { id: "group-partitions" }, head, rows) : el("p", { class: "muted" }, "No partition held here."));
}

poll();
