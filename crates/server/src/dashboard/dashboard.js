"use strict";
// The Stoa dashboard: polls the AdminServer's JSON commands (same origin)
// and shows what they say. Every value from the server reaches the page
// as text (textContent) or as a number this script computed, never as
// markup: a znode count is data, and so is a host name.

const POLL_MS = 2000;
const FETCH_TIMEOUT_MS = 5000;
// Three minutes of polls.
const HISTORY_POINTS = 90;
const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_WIDTH = 300;
const CHART_HEIGHT = 60;
const MODES = ["standalone", "leader", "follower", "observer", "read-only"];

const commandUrl = document.querySelector('meta[name="stoa-command-url"]').content;
const rateHistory = [];
const latencyHistory = [];
let previousSample = null;
let unreachableSince = null;
let lastSuccess = null;

function byId(id) {
  return document.getElementById(id);
}

function text(value) {
  return value === undefined || value === null || value === "" ? "–" : String(value);
}

function show(id, value) {
  byId(id).textContent = text(value);
}

function joined(...values) {
  return values.map(text).join(" / ");
}

// Zxids are 64-bit: an integer a double cannot hold is read from its
// source text where the browser offers it.
function parseJson(body) {
  return JSON.parse(body, (key, value, context) =>
    typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value) &&
      context && typeof context.source === "string"
      ? BigInt(context.source)
      : value);
}

function asBigInt(value) {
  if (typeof value === "bigint") return value;
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (typeof value === "string" && /^-?[0-9]+$/.test(value)) return BigInt(value);
  return null;
}

function hexZxid(value) {
  const zxid = asBigInt(value);
  if (zxid === null) return text(value);
  return zxid < 0n ? String(zxid) : "0x" + zxid.toString(16);
}

function epochOf(value) {
  const zxid = asBigInt(value);
  return zxid === null || zxid < 0n ? null : String(zxid >> 32n);
}

function bytes(value) {
  if (typeof value !== "number" || !Number.isFinite(value)) return text(value);
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let scaled = value;
  let unit = "";
  for (const next of units) {
    if (scaled < 1024) break;
    scaled /= 1024;
    unit = next;
  }
  return unit === "" ? value + " B" : value + " B (" + scaled.toFixed(1) + " " + unit + ")";
}

function duration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return text(ms);
  let seconds = Math.floor(ms / 1000);
  const parts = [];
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
    if (seconds >= size) {
      parts.push(Math.floor(seconds / size) + " " + unit);
      seconds %= size;
    }
  }
  parts.push(seconds + " s");
  return parts.join(" ");
}

function clock(date) {
  return date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

async function command(name) {
  const response = await fetch(commandUrl + "/" + name, {
    cache: "no-store",
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
  });
  if (!response.ok) throw new Error(name + " answered HTTP " + response.status);
  return parseJson(await response.text());
}

// The commands other than monitor answer only while the server serves
// clients; until then they carry an error, shown where their figures go.
async function poll() {
  let answers;
  try {
    answers = await Promise.all(
      ["monitor", "server_stats", "voting_view", "leader", "configuration"].map(command));
  } catch (error) {
    showUnreachable(error);
    return;
  }
  const [monitor, stats, voting, leader, configuration] = answers;
  lastSuccess = new Date();
  unreachableSince = null;
  document.body.dataset.state = "ok";
  byId("banner").hidden = true;
  show("updated", clock(lastSuccess));
  showServer(monitor, stats, leader);
  showFigures(monitor, stats);
  showMembers(voting, leader, configuration);
  showPartitions(monitor);
  showCharts(monitor);
}

function showUnreachable(error) {
  if (unreachableSince === null) unreachableSince = new Date();
  document.body.dataset.state = "unreachable";
  const banner = byId("banner");
  let message = "Unreachable since " + clock(unreachableSince) + " (" + error.message + ")";
  if (lastSuccess !== null) message += "; the figures below are from " + clock(lastSuccess);
  banner.textContent = message;
  banner.hidden = false;
}

function showServer(monitor, stats, leader) {
  const mode = monitor.server_state;
  const badge = byId("mode");
  badge.textContent = text(mode);
  badge.className = "mode" + (MODES.includes(mode) ? " " + mode : "");
  document.title = "Stoa " + location.host + " (" + text(mode) + ")";
  show("server_state", mode);
  if (mode === "standalone") {
    show("leader", "this server (standalone)");
  } else if (leader.error) {
    show("leader", leader.error);
  } else {
    const where = leader.is_leader ? "this server" : leader.leader_ip;
    show("leader", "id " + text(leader.leader_id) + " (" + text(where) + ")");
  }
  show("serving", stats.error ? "no: " + stats.error : "yes");
  show("read_only", stats.read_only === undefined ? null : stats.read_only ? "yes" : "no");
  show("uptime", duration(monitor.uptime));
  show("quorum_size", monitor.quorum_size);
  show("followers", mode === "leader"
    ? text(monitor.followers) + " (" + text(monitor.synced_followers) + " synced, lag up to " +
      text(monitor.stoa_follower_lag_entries_max) + " entries)"
    : null);
  show("version", monitor.version);
}

function showFigures(monitor, stats) {
  const zxid = stats.server_stats ? stats.server_stats.last_processed_zxid : null;
  show("znode_count", monitor.znode_count);
  show("approximate_data_size", bytes(monitor.approximate_data_size));
  show("zxid", zxid === null ? null : hexZxid(zxid));
  show("epoch", epochOf(zxid));
  show("txns_applied", monitor.stoa_txns_applied);
  show("watch_count", monitor.watch_count);
  show("ephemerals_count", monitor.ephemerals_count);
  show("num_alive_connections", monitor.num_alive_connections);
  show("global_sessions", monitor.global_sessions);
  show("outstanding_requests", monitor.outstanding_requests);
  show("latency", joined(monitor.min_latency, monitor.avg_latency, monitor.max_latency));
  show("packets", joined(monitor.packets_received, monitor.packets_sent));
  show("auth_failed_count", monitor.auth_failed_count);
  show("wal_fsyncs",
    text(monitor.stoa_wal_fsyncs) + " (" + text(monitor.stoa_wal_fsyncs_inline) + " inline)");
  show("wal_fsync_ms", joined(monitor.stoa_wal_fsync_avg_ms, monitor.stoa_wal_fsync_max_ms));
  show("wal_batches", monitor.stoa_wal_batches);
  show("wal_batch_entries",
    joined(monitor.stoa_wal_batch_entries_avg, monitor.stoa_wal_batch_entries_max));
  show("commit_latency",
    joined(monitor.stoa_commit_latency_avg_ms, monitor.stoa_commit_latency_max_ms));
}

function cell(row, value) {
  const td = document.createElement("td");
  td.textContent = text(value);
  row.appendChild(td);
}

function firstOf(list) {
  return Array.isArray(list) ? list[0] : list;
}

function showMembers(voting, leader, configuration) {
  const body = byId("members");
  const members = voting.current_config && typeof voting.current_config === "object"
    ? Object.entries(voting.current_config) : [];
  members.sort((a, b) => Number(a[0]) - Number(b[0]));
  const rows = members.map(([id, member]) => {
    const row = document.createElement("tr");
    row.dataset.member = id;
    let role = String(leader.leader_id) === id ? "leader" : "follower";
    if (String(configuration.server_id) === id) role += " (this server)";
    const view = member && typeof member === "object" ? member : {};
    for (const value of [id, role, view.learner_type, firstOf(view.server_addresses),
      firstOf(view.election_addresses), view.client_address]) {
      cell(row, value);
    }
    return row;
  });
  body.replaceChildren(...rows);
  let note = "Voting members (observers are not listed).";
  if (voting.error) note = voting.error;
  else if (rows.length === 0) note = "Standalone: no ensemble.";
  show("members_note", note);
}

function showPartitions(monitor) {
  const partitions = new Map();
  for (const [key, value] of Object.entries(monitor)) {
    const match = /^stoa_partition_([0-9]+)_([a-z_]+)$/.exec(key);
    if (!match) continue;
    if (!partitions.has(match[1])) partitions.set(match[1], {});
    partitions.get(match[1])[match[2]] = value;
  }
  const numbers = [...partitions.keys()].sort((a, b) => Number(a) - Number(b));
  const rows = numbers.map((number) => {
    const p = partitions.get(number);
    const row = document.createElement("tr");
    row.dataset.partition = number;
    for (const value of [number, p.term, p.leader, p.applied_index, p.last_index,
      hexZxid(p.last_zxid), p.znode_count]) {
      cell(row, value);
    }
    return row;
  });
  byId("partitions").replaceChildren(...rows);
}

function remember(history, value) {
  history.push(value);
  if (history.length > HISTORY_POINTS) history.shift();
}

// Packets per second from successive polls; a counter that went down was
// reset (srst), and that interval is left out.
function showCharts(monitor) {
  const sample = { at: performance.now(), packets: monitor.packets_received };
  if (previousSample !== null && typeof sample.packets === "number" &&
      typeof previousSample.packets === "number" && sample.packets >= previousSample.packets &&
      sample.at > previousSample.at) {
    const rate = (sample.packets - previousSample.packets) * 1000 / (sample.at - previousSample.at);
    remember(rateHistory, rate);
  }
  previousSample = sample;
  if (typeof monitor.avg_latency === "number" && Number.isFinite(monitor.avg_latency)) {
    remember(latencyHistory, monitor.avg_latency);
  }
  drawSparkline("chart_rate", rateHistory);
  drawSparkline("chart_latency", latencyHistory);
  const last = (history) => history.length ? history[history.length - 1] : null;
  const rate = last(rateHistory);
  show("rate_now", rate === null ? "" : "(now " + rate.toFixed(1) + ")");
  const latency = last(latencyHistory);
  show("latency_now", latency === null ? "" : "(now " + latency.toFixed(2) + ")");
}

function drawSparkline(id, history) {
  const svg = byId(id);
  const top = Math.max(...history, 1e-9);
  const points = history.map((value, i) => {
    const x = (i + HISTORY_POINTS - history.length) * CHART_WIDTH / (HISTORY_POINTS - 1);
    const y = CHART_HEIGHT - 2 - (value / top) * (CHART_HEIGHT - 4);
    return x.toFixed(1) + "," + y.toFixed(1);
  });
  const line = document.createElementNS(SVG_NS, "polyline");
  line.setAttribute("points", points.join(" "));
  const title = document.createElementNS(SVG_NS, "title");
  title.textContent = "highest " + top.toFixed(2);
  svg.replaceChildren(title, line);
}

async function loop() {
  await poll();
  setTimeout(loop, POLL_MS);
}

show("host", location.host);
if (commandUrl.startsWith("/") && !commandUrl.startsWith("//")) {
  byId("commands_link").setAttribute("href", commandUrl);
}
loop();
