// The Leveret management UI: plain JavaScript over the /api the page is served with
// (RabbitMQ's management API). No build step, no third-party code.
"use strict";

const state = { auth: sessionStorage.getItem("leveret-auth"), tab: "overview", timer: null, detail: null, exchange: null };
const $ = (sel, root = document) => root.querySelector(sel);

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}
function enc(value) { return encodeURIComponent(value); }
function num(value) { return value === undefined || value === null ? "" : Number(value).toLocaleString("en"); }
function rate(details) { return details && typeof details.rate === "number" ? details.rate.toFixed(1) + "/s" : ""; }

async function api(path, options = {}) {
  // X-Requested-With: the server then leaves out WWW-Authenticate from a 401, so the
  // browser shows our login form instead of its own dialog.
  const headers = { Authorization: "Basic " + state.auth, "X-Requested-With": "XMLHttpRequest", ...(options.headers || {}) };
  let body = options.body;
  if (body !== undefined && !(body instanceof FormData) && typeof body !== "string") {
    body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch("api/" + path, { method: options.method || "GET", headers, body });
  if (response.status === 401) {
    const reason = await response.json().catch(() => ({}));
    throw Object.assign(new Error(reason.reason || "Login failed"), { status: 401 });
  }
  if (!response.ok) {
    const reason = await response.json().catch(() => ({}));
    throw new Error(reason.reason || response.statusText);
  }
  return response.status === 204 || response.status === 201 ? null : response.json();
}

function table(columns, rows, id) {
  const head = columns.map((c) => `<th>${esc(c[0])}</th>`).join("");
  const body = rows.map((row) => "<tr>" + columns.map((c) => {
    const value = c[1](row);
    return `<td class="${c[2] || ""}">${value}</td>`;
  }).join("") + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function showError(error) {
  $("#status").textContent = error.message;
  $("#status").classList.add("error");
  if (error.status === 401) logout();
}

// -- charts: samples newest first, drawn oldest to newest ---------------------------------

function chart(canvas, series) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  const all = series.flatMap((s) => s.samples.map((p) => p.value));
  const max = Math.max(1, ...all);
  const times = series.flatMap((s) => s.samples.map((p) => p.timestamp));
  const t0 = Math.min(...times), t1 = Math.max(...times);
  ctx.font = "11px sans-serif";
  ctx.fillStyle = "#666";
  ctx.fillText(String(Math.round(max * 10) / 10), 2, 11);
  series.forEach((s) => {
    ctx.strokeStyle = s.color;
    ctx.beginPath();
    const points = s.samples.slice().reverse().map((p) => [
      t1 > t0 ? ((p.timestamp - t0) / (t1 - t0)) * (w - 10) + 5 : w / 2,
      h - 5 - (p.value / max) * (h - 20),
    ]);
    points.forEach(([x, y], i) => { if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y); });
    ctx.stroke();
    ctx.fillStyle = s.color;
    points.forEach(([x, y]) => ctx.fillRect(x - 2, y - 2, 4, 4));
  });
}

function ratesOf(details) {
  // Rates between consecutive samples of a counter (samples are newest first).
  const samples = (details && details.samples) || [];
  const out = [];
  for (let i = 0; i + 1 < samples.length; i++) {
    const dt = (samples[i].timestamp - samples[i + 1].timestamp) / 1000;
    out.push({ timestamp: samples[i].timestamp, value: dt > 0 ? (samples[i].sample - samples[i + 1].sample) / dt : 0 });
  }
  return out;
}
function levelsOf(details) {
  return ((details && details.samples) || []).map((p) => ({ timestamp: p.timestamp, value: p.sample }));
}

// -- views --------------------------------------------------------------------------------

const views = {
  async overview() {
    // The nodes need the monitoring tag: without it the overview shows no nodes card.
    const [o, nodes] = await Promise.all([
      api("overview?lengths_age=600&lengths_incr=5&msg_rates_age=600&msg_rates_incr=5"),
      api("nodes").catch(() => null),
    ]);
    const q = o.queue_totals || {}, m = o.message_stats || {}, t = o.object_totals || {};
    const html = `
      <div class="card"><h2>Totals</h2>
        <p id="totals">Connections: <b>${num(t.connections)}</b> · Channels: <b>${num(t.channels)}</b> ·
        Exchanges: <b>${num(t.exchanges)}</b> · Queues: <b>${num(t.queues)}</b> · Consumers: <b>${num(t.consumers)}</b></p>
        <p>Cluster <b>${esc(o.cluster_name)}</b>, ${esc(o.product_name)} ${esc(o.product_version)} on node ${esc(o.node)}</p>
      </div>
      ${nodes ? `<div class="card"><h2>Nodes</h2>${table([
        ["Name", (n) => esc(n.name) + (n.name === o.node ? " (this node)" : "")],
        ["State", (n) => n.running ? "running" : `<span class="error">down</span>`],
        ["Memory", (n) => n.mem_used === undefined ? "" : (n.mem_used / 1048576).toFixed(1) + " MiB", "num"],
        ["Sockets", (n) => num(n.sockets_used), "num"],
        ["Uptime", (n) => n.uptime === undefined ? "" : Math.floor(n.uptime / 1000) + " s", "num"],
      ], nodes, "nodes-table")}</div>` : ""}
      <div class="card"><h2>Queued messages</h2>
        <canvas id="chart-queued" width="700" height="160"></canvas>
        <p class="legend"><span style="color:#c60">Ready: <b id="ov-ready">${num(q.messages_ready)}</b></span>
        <span style="color:#06c">Unacked: <b id="ov-unacked">${num(q.messages_unacknowledged)}</b></span>
        <span>Total: <b id="ov-total">${num(q.messages)}</b></span></p>
      </div>
      <div class="card"><h2>Message rates</h2>
        <canvas id="chart-rates" width="700" height="160"></canvas>
        <p class="legend"><span style="color:#c60">Publish ${rate(m.publish_details)}</span>
        <span style="color:#080">Deliver ${rate(m.deliver_get_details)}</span>
        <span style="color:#06c">Ack ${rate(m.ack_details)}</span>
        <span style="color:#909">Confirm ${rate(m.confirm_details)}</span></p>
      </div>
      <div class="card"><h2>Definitions</h2>
        <button id="defs-download">Download broker definitions</button>
        <form id="defs-upload" class="inline"><label>Upload definitions <input type="file" id="defs-file" accept=".json,application/json"></label>
        <button type="submit">Upload</button></form>
      </div>`;
    render(html);
    chart($("#chart-queued"), [
      { color: "#c60", samples: levelsOf(q.messages_ready_details) },
      { color: "#06c", samples: levelsOf(q.messages_unacknowledged_details) },
    ]);
    chart($("#chart-rates"), [
      { color: "#c60", samples: ratesOf(m.publish_details) },
      { color: "#06c", samples: ratesOf(m.ack_details) },
      { color: "#909", samples: ratesOf(m.confirm_details) },
    ]);
    $("#defs-download").onclick = async () => {
      const doc = await api("definitions");
      const link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([JSON.stringify(doc, null, 2)], { type: "application/json" }));
      link.download = "leveret_definitions.json";
      link.click();
    };
    $("#defs-upload").onsubmit = async (event) => {
      event.preventDefault();
      const file = $("#defs-file").files[0];
      if (!file) return;
      await api("definitions", { method: "POST", body: JSON.parse(await file.text()) });
      flash("Definitions imported");
    };
    return true;
  },

  async connections() {
    const rows = await api("connections");
    render(`<div class="card"><h2>Connections</h2>${table([
      ["Name", (c) => esc(c.name)], ["Node", (c) => esc(c.node)], ["User", (c) => esc(c.user)], ["Vhost", (c) => esc(c.vhost)],
      ["Protocol", (c) => esc(c.protocol)], ["Channels", (c) => num(c.channels), "num"],
      ["From client", (c) => rate(c.recv_oct_details), "num"], ["To client", (c) => rate(c.send_oct_details), "num"],
      ["", (c) => `<button data-close="${esc(c.name)}">Close</button>`],
    ], rows, "connections-table")}</div>`);
    document.querySelectorAll("[data-close]").forEach((b) => b.onclick = async () => {
      await api("connections/" + enc(b.dataset.close), { method: "DELETE", headers: { "X-Reason": "Closed via the web UI" } });
      refresh();
    });
    return true;
  },

  async channels() {
    const rows = await api("channels");
    render(`<div class="card"><h2>Channels</h2>${table([
      ["Channel", (c) => esc(c.name)], ["Node", (c) => esc(c.node)], ["User", (c) => esc(c.user)], ["Vhost", (c) => esc(c.vhost)],
      ["Prefetch", (c) => num(c.prefetch_count), "num"], ["Consumers", (c) => num(c.consumer_count), "num"],
      ["Unacked", (c) => num(c.messages_unacknowledged), "num"],
      ["Publish", (c) => rate((c.message_stats || {}).publish_details), "num"],
      ["Deliver", (c) => rate((c.message_stats || {}).deliver_get_details), "num"],
      ["Ack", (c) => rate((c.message_stats || {}).ack_details), "num"],
    ], rows, "channels-table")}</div>`);
    return true;
  },

  async exchanges() {
    if (state.exchange) return views.exchange();
    const rows = await api("exchanges");
    render(`<div class="card"><h2>Exchanges</h2>${table([
      ["Vhost", (x) => esc(x.vhost)],
      ["Name", (x) => x.messages_delayed === undefined ? esc(x.name || "(AMQP default)")
        : `<a class="link" data-exchange="${esc(x.name)}" data-vhost="${esc(x.vhost)}">${esc(x.name)}</a>`],
      ["Type", (x) => esc(x.type)],
      ["Durable", (x) => x.durable ? "D" : ""], ["Policy", (x) => esc(x.policy || "")],
      ["Delayed", (x) => num(x.messages_delayed), "num"],
      ["In", (x) => rate((x.message_stats || {}).publish_in_details), "num"],
      ["Out", (x) => rate((x.message_stats || {}).publish_out_details), "num"],
    ], rows, "exchanges-table")}</div>
    <form id="add-exchange" class="card"><h2>Add an exchange</h2>
      <label>Vhost <input name="vhost" value="/"></label><label>Name <input name="name" required></label>
      <label>Type <select name="type"><option>direct</option><option>fanout</option><option>topic</option><option>headers</option>
      <option>x-delayed-message</option></select></label>
      <label>Delayed type <select name="delayed"><option>direct</option><option>fanout</option><option>topic</option><option>headers</option></select></label>
      <label>Durable <input type="checkbox" name="durable" checked></label>
      <button type="submit">Add exchange</button></form>`);
    document.querySelectorAll("[data-exchange]").forEach((a) => a.onclick = () => {
      state.exchange = { vhost: a.dataset.vhost, name: a.dataset.exchange };
      refresh();
    });
    $("#add-exchange").onsubmit = submit(async (f) => {
      const body = { type: f.type.value, durable: f.durable.checked };
      if (f.type.value === "x-delayed-message") body.arguments = { "x-delayed-type": f.delayed.value };
      await api(`exchanges/${enc(f.vhost.value)}/${enc(f.name.value)}`, { method: "PUT", body });
    });
    return true;
  },

  // A delayed-message exchange: its pending messages, cancelled or rescheduled here.
  async exchange() {
    const { vhost, name } = state.exchange;
    const path = `exchanges/${enc(vhost)}/${enc(name)}`;
    const [x, pending] = await Promise.all([api(path), api(path + "/delayed?count=200&preview=80")]);
    render(`<div class="card"><h2 id="exchange-title">Exchange ${esc(name)}</h2>
      <p><a class="link" id="back">← all exchanges</a></p>
      <p>Type <b>${esc(x.type)}</b> (${esc((x.arguments || {})["x-delayed-type"] || "")}) · Pending <b id="x-delayed">${num(x.messages_delayed)}</b>
      · Next due <b>${x.messages_delayed_next_due ? new Date(x.messages_delayed_next_due).toISOString() : "none"}</b></p></div>
      <div class="card"><h2>Pending messages</h2>${table([
        ["Id", (m) => num(m.id), "num"], ["Due", (m) => esc(m.due_at)], ["In", (m) => (m.due_in / 1000).toFixed(1) + " s", "num"],
        ["Routing key", (m) => esc(m.routing_key)], ["Message id", (m) => esc(m.properties.message_id || "")],
        ["Headers", (m) => `<code>${esc(JSON.stringify(m.properties.headers || {}))}</code>`],
        ["Body", (m) => `<code>${esc(m.payload)}</code>`],
        ["", (m) => `<button data-cancel="${m.id}">Cancel</button>`],
      ], pending, "delayed-table")}
      <form id="cancel-delayed" class="inline"><h3>Cancel every message with</h3>
        <label>Message id <input name="message_id"></label><label>Correlation id <input name="correlation_id"></label>
        <button type="submit">Cancel</button></form>
      <form id="reschedule-delayed" class="inline"><h3>Reschedule</h3>
        <label>Message id <input name="message_id" required></label><label>Delay (ms from now) <input name="delay" required></label>
        <button type="submit">Reschedule</button></form></div>`);
    $("#back").onclick = () => { state.exchange = null; refresh(); };
    document.querySelectorAll("[data-cancel]").forEach((b) => b.onclick = async () => {
      try { await api(`${path}/delayed/${b.dataset.cancel}`, { method: "DELETE" }); refresh(); } catch (error) { showError(error); }
    });
    const selector = (f) => {
      const body = {};
      if (f.message_id && f.message_id.value) body.message_id = f.message_id.value;
      if (f.correlation_id && f.correlation_id.value) body.correlation_id = f.correlation_id.value;
      return body;
    };
    $("#cancel-delayed").onsubmit = submit(async (f) => {
      const r = await api(path + "/delayed/cancel", { method: "POST", body: selector(f) });
      flash(`${r.cancelled} cancelled`);
    }, "Cancelled");
    $("#reschedule-delayed").onsubmit = submit(async (f) => {
      await api(path + "/delayed/reschedule", { method: "POST", body: { ...selector(f), delay: Number(f.delay.value) } });
    }, "Rescheduled");
    return true;
  },

  async queues() {
    if (state.detail) return views.queue();
    const rows = await api("queues");
    render(`<div class="card"><h2>Queues</h2>${table([
      ["Vhost", (q) => esc(q.vhost)],
      ["Name", (q) => `<a class="link" data-queue="${esc(q.name)}" data-vhost="${esc(q.vhost)}">${esc(q.name)}</a>`],
      ["Node", (q) => esc(q.node) + (q.state === "down" ? ` <span class="error">down</span>` : "")],
      ["Type", (q) => esc(q.type)], ["Policy", (q) => esc(q.policy || "")],
      ["Ready", (q) => num(q.messages_ready), "num ready"], ["Unacked", (q) => num(q.messages_unacknowledged), "num"],
      ["Total", (q) => num(q.messages), "num total"], ["Consumers", (q) => num(q.consumers), "num"],
      ["Incoming", (q) => rate((q.message_stats || {}).publish_details), "num"],
      ["Deliver / get", (q) => rate((q.message_stats || {}).deliver_get_details), "num"],
    ], rows, "queues-table")}</div>
    <form id="add-queue" class="card"><h2>Add a queue</h2>
      <label>Vhost <input name="vhost" value="/"></label><label>Name <input name="name" id="add-queue-name" required></label>
      <label>Durable <input type="checkbox" name="durable" checked></label>
      <label>Arguments (JSON) <input name="arguments" value="{}"></label>
      <button type="submit" id="add-queue-submit">Add queue</button></form>`);
    document.querySelectorAll("[data-queue]").forEach((a) => a.onclick = () => {
      state.detail = { vhost: a.dataset.vhost, name: a.dataset.queue };
      refresh();
    });
    $("#add-queue").onsubmit = submit(async (f) => {
      await api(`queues/${enc(f.vhost.value)}/${enc(f.name.value)}`, {
        method: "PUT", body: { durable: f.durable.checked, arguments: JSON.parse(f.arguments.value || "{}") },
      });
    });
    return true;
  },

  async queue() {
    const { vhost, name } = state.detail;
    const path = `queues/${enc(vhost)}/${enc(name)}`;
    const q = await api(path);
    const bindings = await api(path + "/bindings");
    const keep = $("#get-result") ? $("#get-result").innerHTML : "";
    render(`<div class="card"><h2 id="queue-title">Queue ${esc(name)}</h2>
      <p><a class="link" id="back">← all queues</a></p>
      <p>Ready <b id="q-ready">${num(q.messages_ready)}</b> · Unacked <b id="q-unacked">${num(q.messages_unacknowledged)}</b> ·
      Total <b id="q-total">${num(q.messages)}</b> · Consumers <b>${num(q.consumers)}</b> · Policy <b>${esc(q.policy || "none")}</b></p>
      <p>Arguments <code>${esc(JSON.stringify(q.arguments))}</code> · Effective policy <code>${esc(JSON.stringify(q.effective_policy_definition))}</code></p></div>
      <form id="get-messages" class="card"><h2>Get messages</h2>
        <label>Ack mode <select name="ackmode" id="get-ackmode"><option value="ack_requeue_true">Nack message requeue true</option>
        <option value="ack_requeue_false">Automatic ack</option><option value="reject_requeue_true">Reject requeue true</option>
        <option value="reject_requeue_false">Reject requeue false</option></select></label>
        <label>Encoding <select name="encoding"><option value="auto">Auto string / base64</option><option value="base64">base64</option></select></label>
        <label>Messages <input name="count" value="1" size="4"></label>
        <button type="submit" id="get-submit">Get Message(s)</button><div id="get-result">${keep}</div></form>
      <form id="publish-queue" class="card"><h2>Publish message</h2>
        <label>Payload <textarea name="payload" id="publish-payload" rows="2" cols="40"></textarea></label>
        <label>Delivery mode <select name="delivery_mode"><option value="1">1 - Non-persistent</option><option value="2">2 - Persistent</option></select></label>
        <button type="submit" id="publish-submit">Publish message</button></form>
      <form id="browse-messages" class="card"><h2>Browse and search (nothing is consumed)</h2>
        <label>From position <input name="offset" value="0" size="6"></label><label>Messages <input name="count" value="10" size="4"></label>
        <label>Header <input name="header" placeholder="name=value"></label><label>Body contains <input name="body"></label>
        <button type="submit" id="browse-submit">Browse</button><div id="browse-result"></div></form>
      <form id="move-messages" class="card"><h2>Move or copy messages</h2>
        <label>To queue <input name="to_queue"></label> or <label>to exchange <input name="to_exchange"></label>
        <label>Routing key <input name="routing_key" placeholder="each message's own"></label>
        <label>Header <input name="header" placeholder="name=value"></label><label>At most <input name="limit" size="6"></label>
        <label>Copy <input type="checkbox" name="copy"></label>
        <button type="submit" id="move-submit">Move</button> <button type="button" id="replay">Replay dead letters to their queues</button>
        <div id="move-result"></div></form>
      <div class="card"><h2>Bindings</h2>${table([
        ["From", (b) => esc(b.source || "(default exchange)")], ["Routing key", (b) => esc(b.routing_key)],
        ["Arguments", (b) => esc(JSON.stringify(b.arguments))],
      ], bindings, "bindings-table")}
        <form id="add-binding" class="inline"><label>From exchange <input name="source" required></label>
        <label>Routing key <input name="routing_key"></label><button type="submit">Bind</button></form></div>
      <div class="card"><button id="purge">Purge Messages</button> <button id="delete-queue">Delete Queue</button></div>`);
    $("#back").onclick = () => { state.detail = null; refresh(); };
    $("#get-messages").onsubmit = async (event) => {
      event.preventDefault();
      const f = event.target;
      try {
        const messages = await api(path + "/get", { method: "POST", body: {
          count: Number(f.count.value) || 1, ackmode: f.ackmode.value, encoding: f.encoding.value, truncate: 50000 } });
        $("#get-result").innerHTML = messages.length ? messages.map((m, i) => `<h3>Message ${i + 1}</h3>
          <p>Exchange <b>${esc(m.exchange || "(AMQP default)")}</b> · Routing key <b>${esc(m.routing_key)}</b> · Redelivered <b>${m.redelivered}</b></p>
          <p>Properties <code>${esc(JSON.stringify(m.properties))}</code></p>
          <pre class="payload">${esc(m.payload)}</pre>`).join("") : "<p id=\"queue-empty\">Queue is empty</p>";
        refresh();
      } catch (error) { showError(error); }
    };
    const filterOf = (f) => {
      const filter = {};
      if (f.header.value.includes("=")) {
        const [key, ...rest] = f.header.value.split("=");
        filter.headers = { [key]: rest.join("=") };
      }
      if (f.body && f.body.value) filter.body_contains = f.body.value;
      return filter;
    };
    $("#browse-messages").onsubmit = async (event) => {
      event.preventDefault();
      const f = event.target;
      try {
        const messages = await api(path + "/browse", { method: "POST", body: {
          offset: Number(f.offset.value) || 0, count: Number(f.count.value) || 10, filter: filterOf(f), truncate: 2000 } });
        $("#browse-result").innerHTML = messages.length ? messages.map((m) => `<h3>${m.offset !== undefined ? "Offset " + m.offset : "Position " + m.position}</h3>
          <p>Routing key <b>${esc(m.routing_key)}</b> · Redelivered <b>${m.redelivered}</b></p>
          <p>Properties <code>${esc(JSON.stringify(m.properties))}</code></p><pre class="payload">${esc(m.payload)}</pre>`).join("")
          : "<p id=\"browse-none\">No message</p>";
      } catch (error) { showError(error); }
    };
    $("#move-messages").onsubmit = async (event) => {
      event.preventDefault();
      const f = event.target;
      const body = { filter: filterOf(f), copy: f.copy.checked };
      if (f.to_queue.value) body.to_queue = f.to_queue.value; else body.to_exchange = f.to_exchange.value;
      if (f.routing_key.value) body.routing_key = f.routing_key.value;
      if (f.limit.value) body.limit = Number(f.limit.value);
      try {
        const r = await api(path + "/move", { method: "POST", body });
        $("#move-result").textContent = `Moved ${r.moved}, unroutable ${r.unroutable}, refused ${r.refused}`;
      } catch (error) { showError(error); }
    };
    $("#replay").onclick = async () => {
      try {
        const r = await api(path + "/replay", { method: "POST", body: {} });
        $("#move-result").textContent = `Replayed ${r.moved} (${Object.entries(r.queues).map(([q, n]) => q + ": " + n).join(", ")}); skipped ${r.skipped}`;
      } catch (error) { showError(error); }
    };
    $("#publish-queue").onsubmit = submit(async (f) => {
      await api(`exchanges/${enc(vhost)}/amq.default/publish`, { method: "POST", body: {
        routing_key: name, payload: f.payload.value, payload_encoding: "string",
        properties: { delivery_mode: Number(f.delivery_mode.value) } } });
    }, "Message published");
    $("#add-binding").onsubmit = submit(async (f) => {
      await api(`bindings/${enc(vhost)}/e/${enc(f.source.value)}/q/${enc(name)}`, { method: "POST", body: { routing_key: f.routing_key.value } });
    });
    $("#purge").onclick = async () => { await api(path + "/contents", { method: "DELETE" }); refresh(); };
    $("#delete-queue").onclick = async () => {
      if (!confirm(`Delete queue ${name}?`)) return;
      await api(path, { method: "DELETE" });
      state.detail = null;
      refresh();
    };
    return false; // forms are being filled in: no periodic refresh
  },

  async admin() {
    const [users, vhosts, permissions, policies, limits] = await Promise.all([
      api("users"), api("vhosts"), api("permissions"), api("policies"), api("vhost-limits"),
    ]);
    render(`<div class="card"><h2>Users</h2>${table([
      ["Name", (u) => esc(u.name)], ["Tags", (u) => esc(u.tags.join(", "))],
      ["Can access vhosts", (u) => esc(permissions.filter((p) => p.user === u.name).map((p) => p.vhost).join(", "))],
      ["", (u) => `<button data-delete-user="${esc(u.name)}">Delete</button>`],
    ], users, "users-table")}
      <form id="add-user" class="inline"><h3>Add a user</h3><label>Username <input name="name" id="add-user-name" required></label>
      <label>Password <input name="password" id="add-user-password" type="password" required></label>
      <label>Tags <input name="tags" id="add-user-tags" placeholder="management, monitoring"></label>
      <button type="submit" id="add-user-submit">Add user</button></form></div>
    <div class="card"><h2>Virtual hosts</h2>${table([
      ["Name", (v) => esc(v.name)], ["Description", (v) => esc(v.description)], ["Messages", (v) => num(v.messages), "num"],
      ["", (v) => `<button data-delete-vhost="${esc(v.name)}">Delete</button>`],
    ], vhosts, "vhosts-table")}
      <form id="add-vhost" class="inline"><label>Name <input name="name" required></label>
      <label>Description <input name="description"></label><button type="submit">Add virtual host</button></form></div>
    <div class="card"><h2>Permissions</h2>
      <form id="set-permission" class="inline"><label>User <input name="user" required></label><label>Vhost <input name="vhost" value="/"></label>
      <label>Configure <input name="configure" value=".*"></label><label>Write <input name="write" value=".*"></label>
      <label>Read <input name="read" value=".*"></label><button type="submit">Set permission</button></form></div>
    <div class="card"><h2>Policies</h2>${table([
      ["Vhost", (p) => esc(p.vhost)], ["Name", (p) => esc(p.name)], ["Pattern", (p) => esc(p.pattern)],
      ["Apply to", (p) => esc(p["apply-to"])], ["Definition", (p) => esc(JSON.stringify(p.definition))],
      ["Priority", (p) => num(p.priority), "num"], ["", (p) => `<button data-delete-policy="${esc(p.vhost)}|${esc(p.name)}">Delete</button>`],
    ], policies, "policies-table")}
      <form id="add-policy" class="inline"><label>Vhost <input name="vhost" value="/"></label><label>Name <input name="name" required></label>
      <label>Pattern <input name="pattern" required></label>
      <label>Apply to <select name="apply_to"><option>all</option><option>queues</option><option>exchanges</option></select></label>
      <label>Definition (JSON) <input name="definition" value='{"max-length": 1000}'></label>
      <label>Priority <input name="priority" value="0" size="3"></label><button type="submit">Add policy</button></form></div>
    <div class="card"><h2>Limits</h2>${table([
      ["Vhost", (l) => esc(l.vhost)], ["Limits", (l) => esc(JSON.stringify(l.value))],
    ], limits, "limits-table")}
      <form id="set-limit" class="inline"><label>Vhost <input name="vhost" value="/"></label>
      <label>Limit <select name="name"><option>max-connections</option><option>max-queues</option></select></label>
      <label>Value <input name="value" size="6"></label><button type="submit">Set limit</button></form></div>`);
    $("#add-user").onsubmit = submit(async (f) => {
      await api("users/" + enc(f.name.value), { method: "PUT", body: { password: f.password.value, tags: f.tags.value } });
    }, "User added");
    $("#add-vhost").onsubmit = submit(async (f) => {
      await api("vhosts/" + enc(f.name.value), { method: "PUT", body: { description: f.description.value } });
    });
    $("#set-permission").onsubmit = submit(async (f) => {
      await api(`permissions/${enc(f.vhost.value)}/${enc(f.user.value)}`, { method: "PUT", body: {
        configure: f.configure.value, write: f.write.value, read: f.read.value } });
    });
    $("#add-policy").onsubmit = submit(async (f) => {
      await api(`policies/${enc(f.vhost.value)}/${enc(f.name.value)}`, { method: "PUT", body: {
        pattern: f.pattern.value, "apply-to": f.apply_to.value, definition: JSON.parse(f.definition.value), priority: Number(f.priority.value) } });
    });
    $("#set-limit").onsubmit = submit(async (f) => {
      await api(`vhost-limits/${enc(f.vhost.value)}/${enc(f.name.value)}`, { method: "PUT", body: { value: Number(f.value.value) } });
    });
    document.querySelectorAll("[data-delete-user]").forEach((b) => b.onclick = async () => {
      await api("users/" + enc(b.dataset.deleteUser), { method: "DELETE" }); refresh();
    });
    document.querySelectorAll("[data-delete-vhost]").forEach((b) => b.onclick = async () => {
      if (confirm(`Delete vhost ${b.dataset.deleteVhost} and everything in it?`)) {
        await api("vhosts/" + enc(b.dataset.deleteVhost), { method: "DELETE" }); refresh();
      }
    });
    document.querySelectorAll("[data-delete-policy]").forEach((b) => b.onclick = async () => {
      const [vhost, name] = b.dataset.deletePolicy.split("|");
      await api(`policies/${enc(vhost)}/${enc(name)}`, { method: "DELETE" }); refresh();
    });
    return false;
  },
};

function render(html) { $("#view").innerHTML = html; }

function flash(text) {
  $("#status").classList.remove("error");
  $("#status").textContent = text;
}

function submit(action, done = "Done") {
  return async (event) => {
    event.preventDefault();
    try {
      await action(event.target);
      flash(done);
      await refresh();
    } catch (error) { showError(error); }
  };
}

async function refresh() {
  clearTimeout(state.timer);
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.tab === state.tab));
  try {
    const poll = await views[state.tab]();
    $("#status").classList.remove("error");
    if (poll) state.timer = setTimeout(refresh, 5000);
  } catch (error) { showError(error); }
}

function showApp(name) {
  $("#login").hidden = true;
  $("#view").hidden = false;
  $("#tabs").hidden = false;
  $("#who").hidden = false;
  $("#who-name").textContent = name;
}

function logout() {
  sessionStorage.removeItem("leveret-auth");
  state.auth = null;
  clearTimeout(state.timer);
  $("#login").hidden = false;
  $("#view").hidden = true;
  $("#tabs").hidden = true;
  $("#who").hidden = true;
}

async function start() {
  const who = await api("whoami");
  showApp(who.name);
  const tab = location.hash.slice(1);
  state.tab = views[tab] ? tab : "overview";
  await refresh();
}

$("#login").onsubmit = async (event) => {
  event.preventDefault();
  state.auth = btoa(unescape(encodeURIComponent($("#login-username").value + ":" + $("#login-password").value)));
  try {
    await start();
    sessionStorage.setItem("leveret-auth", state.auth);
    $("#login-error").hidden = true;
  } catch (error) {
    state.auth = null;
    $("#login-error").textContent = error.message;
    $("#login-error").hidden = false;
  }
};
$("#logout").onclick = logout;
window.addEventListener("hashchange", () => {
  const tab = location.hash.slice(1);
  if (views[tab] && state.auth) { state.tab = tab; state.detail = null; state.exchange = null; refresh(); }
});
if (state.auth) start().catch(() => logout());
