// The raftq status page: polls /api/status every second and redraws.
// Plain JavaScript, no build step, no third-party code (works offline).
"use strict";

const POLL_MS = 1000;
const HISTORY = 60; // samples per sparkline (one a second)
const rates = {}; // queue -> {last: {t, sent, received}, sends: [], receives: []}
let failures = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c));
  return node;
}

function fmtAge(s) {
  if (s === null || s === undefined) return "\u2014";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function fmtNum(n) {
  return Number(n).toLocaleString("en-US");
}

function sparkline(values) {
  const w = 90, h = 22;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("class", "spark");
  if (values.length > 1) {
    const max = Math.max(1, ...values);
    const step = w / (HISTORY - 1);
    const off = (HISTORY - values.length) * step;
    const pts = values.map((v, i) =>
      (off + i * step).toFixed(1) + "," + (h - 1 - (v / max) * (h - 3)).toFixed(1));
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
}

function nodeStatus(n) {
  if (!n.reachable) return ["down", "down"];
  if (!n.ready) return ["not-ready", "not ready"];
  return ["up", "up"];
}

function drawNodes(doc) {
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren(...doc.nodes.map((n) => {
    const [cls, label] = nodeStatus(n);
    const roles = [];
    if (n.metadata_leader) roles.push("metadata leader");
    else if (n.controller) roles.push("controller");
    else roles.push("broker");
    if (n.id === doc.node) roles.push("serving this page");
    const metrics = n.metrics_address
      ? el("a", {href: "http://" + n.metrics_address + "/"}, n.metrics_address) : "\u2014";
    return el("tr", {"data-node": n.id, "data-status": cls, class: "node-" + cls},
      el("td", {}, el("strong", {}, n.id)),
      el("td", {}, el("span", {class: "badge " + cls}, label)),
      el("td", {}, n.state),
      el("td", {}, roles.join(", ")),
      el("td", {class: "num"}, fmtAge(n.heartbeat_age_s)),
      el("td", {}, el("code", {}, n.address)),
      el("td", {}, metrics));
  }));
}

function trackRates(doc) {
  for (const q of doc.queues) {
    const r = rates[q.name] || (rates[q.name] = {last: null, sends: [], receives: []});
    if (r.last) {
      const dt = Math.max(0.001, doc.time - r.last.t);
      r.sends.push(Math.max(0, (q.sent - r.last.sent) / dt));
      r.receives.push(Math.max(0, (q.received - r.last.received) / dt));
      if (r.sends.length > HISTORY) r.sends.shift();
      if (r.receives.length > HISTORY) r.receives.shift();
    }
    r.last = {t: doc.time, sent: q.sent, received: q.received};
  }
}

function rateCell(values) {
  const now = values.length ? values[values.length - 1] : 0;
  return el("td", {class: "rate"}, el("span", {class: "num"}, now.toFixed(1)), sparkline(values));
}

// A count summed over the partitions that have a leader: unknown without any,
// a lower bound while some have none.
function partial(q, text) {
  if (q.leaders === 0) return "?";
  return q.leaders < q.partitions ? "\u2265 " + text : text;
}

function drawQueues(doc) {
  const body = document.querySelector("#queues tbody");
  document.getElementById("no-queues").hidden = doc.queues.length > 0;
  body.replaceChildren(...doc.queues.map((q) => {
    const r = rates[q.name];
    const led = q.leaders < q.partitions
      ? el("span", {class: "badge down"}, q.leaders + "/" + q.partitions + " led") : q.partitions;
    return el("tr", {"data-queue": q.name, "data-depth": q.messages},
      el("td", {}, el("strong", {}, q.name)),
      el("td", {}, led),
      el("td", {class: "num", title: "as reported by the partitions' leaders"},
        partial(q, fmtNum(q.messages))),
      el("td", {class: "num"}, fmtNum(q.in_flight)),
      el("td", {class: "num"}, fmtNum(q.delayed)),
      el("td", {class: "num" + (q.dead ? " warn" : "")}, fmtNum(q.dead)),
      el("td", {class: "num"}, q.messages ? fmtAge(q.oldest_age_s) : "\u2014"),
      rateCell(r.sends), rateCell(r.receives));
  }));
}

function drawPartitions(doc) {
  const body = document.querySelector("#partitions tbody");
  const down = new Set(doc.nodes.filter((n) => !n.reachable).map((n) => n.id));
  body.replaceChildren(...doc.partitions.map((p) => {
    const replicas = el("td", {});
    for (const r of p.replicas) {
      const role = down.has(r.node) ? "down" : r.role;
      replicas.append(el("span", {class: "replica " + role, title: role}, r.node + " " + role), " ");
    }
    const leader = p.leader ? p.leader : el("span", {class: "badge down"}, "no leader");
    return el("tr", {"data-partition": p.queue + "/" + p.partition},
      el("td", {}, p.queue + " [" + p.partition + "]"),
      el("td", {}, leader), replicas,
      el("td", {class: "num" + (p.lag > 1000 ? " warn" : "")}, fmtNum(p.lag)),
      el("td", {class: "num"}, fmtNum(p.commit_index)));
  }));
}

function drawSummary(doc) {
  const up = doc.nodes.filter((n) => n.reachable && n.ready).length;
  const leaderless = doc.partitions.filter((p) => !p.leader).length;
  const parts = [up + "/" + doc.nodes.length + " nodes up",
    doc.queues.length + " queues", doc.partitions.length + " partitions",
    "metadata leader " + (doc.metadata_leader || "none")];
  if (leaderless) parts.push(leaderless + " without a leader");
  const summary = document.getElementById("summary");
  summary.textContent = parts.join(" \u00b7 ");
  summary.className = up < doc.nodes.length || leaderless ? "bad" : "good";
  document.getElementById("updated").textContent =
    "updated " + new Date(doc.time * 1000).toLocaleTimeString() + " by " + doc.node;
}

async function poll() {
  try {
    const resp = await fetch("/api/status", {credentials: "same-origin", cache: "no-store"});
    if (resp.status === 401) {
      window.location = "/login";
      return;
    }
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    const doc = await resp.json();
    failures = 0;
    trackRates(doc);
    drawSummary(doc);
    drawNodes(doc);
    drawQueues(doc);
    drawPartitions(doc);
  } catch (err) {
    failures += 1;
    const summary = document.getElementById("summary");
    summary.textContent = "this node does not answer (" + err.message + "), retrying\u2026";
    summary.className = "bad";
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
