// The "Shovels & federation" page of the management UI: RabbitMQ's shovel and federation
// plugins' status (/api/shovels, /api/federation-links), their parameters
// (/api/parameters/shovel, /api/parameters/federation-upstream) and the restart and delete
// actions. Loaded before app.js, whose helpers (api, table, esc, render, submit, refresh)
// it uses when the page is shown; app.js adds extraViews to its views.
"use strict";

globalThis.extraViews = {
  async links() {
    const [shovels, params, federation, upstreams, vhosts] = await Promise.all([
      api("shovels"), api("parameters/shovel"), api("federation-links"),
      api("parameters/federation-upstream"), api("vhosts"),
    ]);
    const options = vhosts.map((v) => `<option>${esc(v.name)}</option>`).join("");
    const endpoint = (row, side) => {
      const where = row[`${side}_queue`] !== undefined ? `queue ${row[`${side}_queue`]}`
        : row[`${side}_address`] !== undefined ? `address ${row[`${side}_address`]}`
        : row[`${side}_exchange`] !== undefined ? `exchange ${row[`${side}_exchange`]}` + (row[`${side}_exchange_key`] !== undefined ? ` (${row[`${side}_exchange_key`]})` : "")
        : "";
      return row[`${side}_uri`] === undefined ? "" : `${esc(row[`${side}_uri`])} <small>${esc(row[`${side}_protocol`] || "")}</small><br>${esc(where)}`;
    };
    const html = `
      <div class="card"><h2>Shovels</h2>
      ${table([
        ["Name", (r) => esc(r.name)],
        ["Virtual host", (r) => esc(r.vhost)],
        ["State", (r) => `<span class="state-${esc(r.state)}">${esc(r.state)}</span>`],
        ["Source", (r) => endpoint(r, "src")],
        ["Destination", (r) => endpoint(r, "dest")],
        ["Since", (r) => esc(r.timestamp) + (r.reason ? `<br><small class="error">${esc(r.reason)}</small>` : "")],
        ["", (r) => `<button data-restart-shovel="${esc(r.name)}" data-vhost="${esc(r.vhost)}">Restart</button>
                     <button data-delete-shovel="${esc(r.name)}" data-vhost="${esc(r.vhost)}">Delete</button>`],
      ], shovels, "shovels-table")}
      <p>${params.length} shovel parameter(s); a shovel with no row above has no vhost yet.</p>
      <form id="add-shovel"><h3>Add a shovel</h3>
        <label>Virtual host <select name="vhost">${options}</select></label>
        <label>Name <input name="name" required></label><br>
        <label>Source <select name="src_protocol"><option value="amqp091">AMQP 0-9-1</option><option value="amqp10">AMQP 1.0</option></select></label>
        <label>URI <input name="src_uri" value="amqp://" size="40" required></label>
        <label>Queue or 1.0 address <input name="src_queue" required></label><br>
        <label>Destination <select name="dest_protocol"><option value="amqp091">AMQP 0-9-1</option><option value="amqp10">AMQP 1.0</option></select></label>
        <label>URI <input name="dest_uri" value="amqp://" size="40" required></label>
        <label>Queue or 1.0 address <input name="dest_queue" required></label><br>
        <label>Ack mode <select name="ack_mode"><option>on-confirm</option><option>on-publish</option><option>no-ack</option></select></label>
        <label>Prefetch <input name="prefetch" value="1000" size="6"></label>
        <label>Delete after <select name="delete_after"><option>never</option><option>queue-length</option></select></label>
        <button type="submit">Add shovel</button>
      </form></div>
      <div class="card"><h2>Federation links</h2>
      ${table([
        ["Virtual host", (r) => esc(r.vhost)],
        ["Kind", (r) => esc(r.type)],
        ["Here", (r) => esc(r.exchange ?? r.queue)],
        ["Upstream", (r) => esc(r.upstream) + " · " + esc(r.upstream_exchange ?? r.upstream_queue)],
        ["URI", (r) => esc(r.uri)],
        ["Status", (r) => `<span class="state-${esc(r.status)}">${esc(r.status)}</span>` + (r.error ? `<br><small class="error">${esc(r.error)}</small>` : "")],
        ["Since", (r) => esc(r.timestamp)],
        ["", (r) => `<button data-restart-link="${esc(r.id)}" data-vhost="${esc(r.vhost)}" data-node="${esc(r.node)}">Restart</button>`],
      ], federation, "federation-table")}
      <h3>Upstreams</h3>
      ${table([
        ["Virtual host", (r) => esc(r.vhost)],
        ["Name", (r) => esc(r.name)],
        ["URI", (r) => esc([].concat(r.value.uri).join(" "))],
        ["Max hops", (r) => esc(r.value["max-hops"] ?? 1)],
        ["", (r) => `<button data-delete-upstream="${esc(r.name)}" data-vhost="${esc(r.vhost)}">Delete</button>`],
      ], upstreams, "upstreams-table")}
      <form id="add-upstream"><h3>Add an upstream</h3>
        <label>Virtual host <select name="vhost">${options}</select></label>
        <label>Name <input name="name" required></label>
        <label>URI <input name="uri" size="40" required></label>
        <label>Max hops <input name="max_hops" value="1" size="3"></label>
        <button type="submit">Add upstream</button>
      </form>
      <p>Federate exchanges or queues with a policy whose definition has
      <code>federation-upstream</code>, <code>federation-upstream-set</code> (<code>all</code> for every
      upstream) or <code>federation-upstream-pattern</code> (Admin tab).</p></div>`;
    render(html);
    const shovelPath = (vhost, name) => `parameters/shovel/${enc(vhost)}/${enc(name)}`;
    $("#add-shovel").onsubmit = submit(async (f) => {
      const value = { "src-protocol": f.src_protocol.value, "src-uri": f.src_uri.value,
        "dest-protocol": f.dest_protocol.value, "dest-uri": f.dest_uri.value, "ack-mode": f.ack_mode.value,
        "src-prefetch-count": Number(f.prefetch.value), "src-delete-after": f.delete_after.value };
      value[f.src_protocol.value === "amqp10" ? "src-address" : "src-queue"] = f.src_queue.value;
      value[f.dest_protocol.value === "amqp10" ? "dest-address" : "dest-queue"] = f.dest_queue.value;
      await api(shovelPath(f.vhost.value, f.name.value), { method: "PUT", body: { value } });
    }, "Shovel added");
    $("#add-upstream").onsubmit = submit(async (f) => {
      await api(`parameters/federation-upstream/${enc(f.vhost.value)}/${enc(f.name.value)}`, {
        method: "PUT", body: { value: { uri: f.uri.value, "max-hops": Number(f.max_hops.value) } } });
    }, "Upstream added");
    const act = (selector, action, done) => document.querySelectorAll(selector).forEach((button) => {
      button.onclick = async () => {
        try { await action(button.dataset); flash(done); await refresh(); } catch (error) { showError(error); }
      };
    });
    act("[data-restart-shovel]", (d) => api(`shovels/vhost/${enc(d.vhost)}/${enc(d.restartShovel)}/restart`, { method: "DELETE" }), "Shovel restarted");
    act("[data-delete-shovel]", (d) => api(`shovels/vhost/${enc(d.vhost)}/${enc(d.deleteShovel)}`, { method: "DELETE" }), "Shovel deleted");
    act("[data-restart-link]", (d) => api(`federation-links/vhost/${enc(d.vhost)}/${enc(d.restartLink)}/${enc(d.node)}/restart`, { method: "DELETE" }), "Link restarted");
    act("[data-delete-upstream]", (d) => api(`parameters/federation-upstream/${enc(d.vhost)}/${enc(d.deleteUpstream)}`, { method: "DELETE" }), "Upstream deleted");
    return true;
  },
};
