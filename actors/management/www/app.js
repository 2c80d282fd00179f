// Leveret's management UI: one page over the management HTTP API (docs/management.md).
// Every name shown comes from clients (queues, exchanges, users): the page is built with DOM
// nodes and textContent, never innerHTML.
"use strict";

const S = { auth: sessionStorage.getItem("auth"), timer: null, charts: {}, history: [] };
const REFRESH_MS = 5000;

// --- the API ---------------------------------------------------------------------------------
async function api(method, path, body, headers) {
  const opts = { method,
                 headers: Object.assign({ Authorization: "Basic " + S.auth }, headers || {}) };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const r = await fetch("api" + path, opts);
  if (r.status === 401) {
    const err = await r.json().catch(() => ({}));
    if (path === "/whoami") { throw new Error(err.reason || "Login failed"); }
    throw new Error(err.reason || "not authorised");
  }
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) { throw new Error((data && data.reason) || r.statusText); }
  return data;
}
const enc = encodeURIComponent;

// --- DOM helpers -----------------------------------------------------------------------------
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) { el.addEventListener(k.slice(2), v); }
    else if (v !== undefined && v !== null && v !== false) { el.setAttribute(k, v); }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) { continue; }
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
function table(columns, rows, id) {
  return h("table", { id },
    h("thead", {}, h("tr", {}, columns.map(c => h("th", {}, c[0])))),
    h("tbody", {}, rows.map(r => h("tr", {}, columns.map(c => {
      const v = c[1](r);
      return h("td", { class: typeof v === "number" ? "num" : "" }, v);
    })))));
}
function form(id, fields, submit, onsubmit) {
  const inputs = {};
  const el = h("form", { class: "inline", id },
    fields.map(([name, label, kind, options, value]) => {  // (value: the field's default)
      let input;
      if (kind === "select") {
        input = h("select", { name }, options.map(o => h("option", { value: o }, o)));
      } else if (kind === "textarea") {
        input = h("textarea", { name, rows: 3, cols: 40 });
      } else {
        input = h("input", { name, type: kind || "text", value });
      }
      inputs[name] = input;
      return h("label", {}, label, input);
    }),
    h("button", { type: "submit" }, submit));
  el.addEventListener("submit", async ev => {
    ev.preventDefault();
    const values = {};
    for (const [k, i] of Object.entries(inputs)) {
      values[k] = i.type === "checkbox" ? i.checked : i.value;
    }
    try { await onsubmit(values); el.reset(); } catch (e) { toast(e.message, true); }
  });
  return el;
}
// A message's path across nodes and processes: one lane (column) per node and process, in the
// order the message reached them, one row per step at its time.
function laneChart(steps) {
  const lanes = [...new Set(steps.map(s => `${s.node} ${s.process}`))];
  return h("table", { id: "trace-lanes", class: "lanes" },
    h("thead", {}, h("tr", {}, h("th", {}, "+ms"), lanes.map(l => h("th", {}, l)))),
    h("tbody", {}, steps.map(s => h("tr", {}, h("td", { class: "num" }, s.after_ms),
      lanes.map(l => h("td", {}, l === `${s.node} ${s.process}`
        ? `${s.kind}${s.queue ? " " + s.queue : ""}` : ""))))));
}
function toast(text, bad) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.className = bad ? "error-toast" : "";
  t.style.background = bad ? "#c0392b" : "#333";
  clearTimeout(S.toastTimer);
  S.toastTimer = setTimeout(() => t.classList.add("hidden"), 4000);
}
function button(label, fn, attrs) {
  return h("button", Object.assign({
    onclick: async () => { try { await fn(); } catch (e) { toast(e.message, true); } },
  }, attrs || {}), label);
}
function rate(stats, key) {
  const d = stats && stats[key + "_details"];
  return d ? d.rate : 0;
}
function vhostOptions(vhosts) { return vhosts.map(v => v.name); }
// a form's JSON field (a policy's definition, a queue's arguments), {} when left empty
function jsonField(label, text) {
  try { return JSON.parse(text || "{}"); }
  catch (e) { throw new Error(`${label}: not valid JSON (${e.message})`); }
}

// --- pages -----------------------------------------------------------------------------------
const PAGES = {
  async overview(page) {
    const o = await api("GET", "/overview");
    const t = o.queue_totals || {};
    const ms = o.message_stats || {};
    S.history.push({ at: new Date().toLocaleTimeString(), ready: t.messages_ready || 0,
                     unacked: t.messages_unacknowledged || 0,
                     publish: rate(ms, "publish"), deliver: rate(ms, "deliver_get"),
                     ack: rate(ms, "ack") });
    S.history = S.history.slice(-60);
    page.append(h("h2", {}, "Overview"),
      h("p", {}, `Node ${o.node}, cluster ${o.cluster_name}, ${o.product_name} `
                 + `(RabbitMQ ${o.rabbitmq_version} API)`),
      h("div", { class: "totals", id: "totals" },
        h("div", {}, h("b", { id: "total-ready" }, t.messages_ready || 0), "Ready"),
        h("div", {}, h("b", {}, t.messages_unacknowledged || 0), "Unacked"),
        h("div", {}, h("b", {}, (o.object_totals || {}).queues || 0), "Queues"),
        h("div", {}, h("b", {}, (o.object_totals || {}).exchanges || 0), "Exchanges"),
        h("div", {}, h("b", {}, (o.object_totals || {}).consumers || 0), "Consumers")),
      h("div", { class: "charts" },
        h("div", {}, h("canvas", { id: "chart-rates" })),
        h("div", {}, h("canvas", { id: "chart-depth" }))),
      h("h3", {}, "Churn statistics"),
      table([["", r => r[0]], ["Created / declared", r => r[1]], ["Closed / deleted", r => r[2]]],
            churnRows(o.churn_rates || {}), "churn-table"),
      h("h3", {}, "Listeners"),
      table([["Protocol", l => l.protocol], ["Address", l => l.ip_address],
             ["Port", l => l.port]], o.listeners || []),
      h("h3", {}, "Definitions"),
      h("p", {}, h("a", { href: "#", id: "definitions-download",
                          onclick: ev => { ev.preventDefault(); downloadDefinitions(); } },
                   "Download definitions (JSON)")));
    S.after = () => {  // once the page is in the document
      chart("chart-rates", "Message rates (/s)", [["publish", "Publish"],
                                                  ["deliver", "Deliver / get"], ["ack", "Ack"]]);
      chart("chart-depth", "Queued messages", [["ready", "Ready"], ["unacked", "Unacked"]]);
    };
  },

  async connections(page, arg) {
    if (arg) { return connectionPage(page, decodeURIComponent(arg)); }
    const conns = await api("GET", "/connections");
    page.append(h("h2", {}, `Connections (${conns.length})`),
      table([["Name", c => h("a", { href: "#/connections/" + enc(c.name) }, c.name)],
             ["User", c => c.user], ["Vhost", c => c.vhost],
             ["State", c => c.state], ["Channels", c => c.channels],
             ["Client", c => (c.client_properties || {}).product || ""],
             ["", c => button("Close", async () => {
               await api("DELETE", "/connections/" + enc(c.name));
               toast("Connection closed"); render();
             }, { class: "close-connection" })]], conns, "connections-table"));
  },

  async channels(page) {
    const chans = await api("GET", "/channels");
    page.append(h("h2", {}, `Channels (${chans.length})`),
      channelsTable(chans, "channels-table"));
  },

  async exchanges(page, arg) {
    if (arg) { return exchangePage(page, arg); }
    const [xs, vhosts] = await Promise.all([api("GET", "/exchanges"), api("GET", "/vhosts")]);
    page.append(h("h2", {}, `Exchanges (${xs.length})`),
      table([["Vhost", x => x.vhost],
             ["Name", x => h("a", { href: `#/exchanges/${enc(x.vhost)}/${enc(x.name || "amq.default")}` },
                             x.name || "(AMQP default)")],
             ["Type", x => x.type], ["Durable", x => x.durable ? "D" : ""],
             ["Policy", x => x.policy || ""],
             ["Message rate in", x => rate(x.message_stats, "publish_in")],
             ["Message rate out", x => rate(x.message_stats, "publish_out")]],
            xs, "exchanges-table"),
      h("h3", {}, "Add a new exchange"),
      form("add-exchange", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                            ["name", "Name"],
                            ["type", "Type", "select", ["direct", "fanout", "topic", "headers"]],
                            ["durable", "Durable", "select", ["true", "false"]]],
           "Add exchange", async v => {
             await api("PUT", `/exchanges/${enc(v.vhost)}/${enc(v.name)}`,
                       { type: v.type, durable: v.durable === "true" });
             toast("Exchange declared"); render();
           }));
  },

  async queues(page, arg) {
    if (arg) { return queuePage(page, arg); }
    const [qs, vhosts] = await Promise.all([api("GET", "/queues"), api("GET", "/vhosts")]);
    page.append(h("h2", {}, `Queues (${qs.length})`),
      table([["Vhost", q => q.vhost],
             ["Name", q => h("a", { href: `#/queues/${enc(q.vhost)}/${enc(q.name)}` }, q.name)],
             ["State", q => q.state], ["Ready", q => q.messages_ready ?? ""],
             ["Unacked", q => q.messages_unacknowledged ?? ""], ["Total", q => q.messages ?? ""],
             ["Consumers", q => q.consumers ?? ""],
             ["Incoming /s", q => rate(q.message_stats, "publish")],
             ["Deliver /s", q => rate(q.message_stats, "deliver_get")],
             ["Ack /s", q => rate(q.message_stats, "ack")]], qs, "queues-table"),
      h("h3", {}, "Add a new queue"),
      form("add-queue", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                         ["name", "Name"],
                         ["durable", "Durable", "select", ["true", "false"]],
                         ["arguments", "Arguments (JSON)"]],
           "Add queue", async v => {
             const args = jsonField("Arguments", v.arguments);
             await api("PUT", `/queues/${enc(v.vhost)}/${enc(v.name)}`,
                       { durable: v.durable === "true", arguments: args });
             toast("Queue declared"); render();
           }));
  },

  async traces(page, arg) {
    if (!arg) {
      const found = await api("GET", "/leveret/analyses");
      page.append(h("h2", {}, "Lifecycle traces"),
        h("p", {}, "Reports of `make analyze` in this node's data directory."),
        found.length ? table([
          ["Analysis", a => h("a", { href: "#/traces/" + enc(a.name) }, a.name)],
          ["Messages", a => a.messages], ["Written", a => a.written_at],
          ["Report", a => a.report ? h("a", {
            href: `analyses/${enc(a.name)}/report.html`, class: "open-report",
            onclick: ev => { ev.preventDefault(); openReport(a.name); } }, "report.html") : ""]],
          found, "analyses-table") : h("p", {}, "No analysis yet: run make analyze."));
      return;
    }
    const [name, ref] = arg.split("/").map(decodeURIComponent);
    if (!ref) {
      const msgs = await api("GET", `/leveret/analyses/${enc(name)}/messages`);
      const found = h("div", { id: "trace-found-box" });
      page.append(h("h2", {}, `Analysis ${name}: ${msgs.length} messages`),
        form("find-message", [["ref", "msg_id or message_id"]], "Show lifecycle", async v => {
          location.hash = `#/traces/${enc(name)}/${enc(v.ref)}`;
        }),
        // where did my message go: by any key the lookup layout indexes, or a time range
        form("trace-search", [
          ["by", "Find by", "select", ["message_id", "msg_id", "correlation_id", "traceparent",
                                       "routing_key", "queue", "time range only"]],
          ["value", "Value"], ["from", "From (ISO or Unix s)"], ["to", "To"]],
          "Find", async v => {
            const q = new URLSearchParams();
            if (v.by !== "time range only") { q.set(v.by, v.value); }
            if (v.from) { q.set("from", v.from); }
            if (v.to) { q.set("to", v.to); }
            const rows = await api("GET", `/traces/${enc(name)}?${q}`);
            found.replaceChildren(
              h("p", {}, `${rows.length} found${rows.length >= 100 ? " (the first 100)" : ""}`),
              table([["Message", r => h("a", { href: `#/traces/${enc(name)}/${enc(r.msg_id)}` },
                                        r.message_id || r.msg_id)],
                     ["First seen", r => r.t_first], ["Vhost", r => r.vhost],
                     ["Matched", r => r.key ? `${r.key} = ${r.value}` : r.final_state]],
                    rows, "trace-found"));
          }),
        found,
        table([["Message", m => h("a", { href: `#/traces/${enc(name)}/${enc(m.msg_id)}` },
                                  m.message_id || m.msg_id)],
               ["Vhost", m => m.vhost], ["Final state", m => m.final_state],
               ["Redeliveries", m => m.redeliveries], ["Events", m => m.n_events]],
              msgs.slice(0, 500), "trace-messages"));
      return;
    }
    const t = await api("GET", `/leveret/analyses/${enc(name)}/messages/${enc(ref)}`);
    const link = id => h("a", { href: `#/traces/${enc(name)}/${enc(id)}` }, id);
    page.append(h("h2", {}, `Lifecycle of ${t.message_id || t.msg_id}`),
      h("p", {}, `msg_id ${t.msg_id}, analysis ${name}`,
        t.correlation_id ? `, correlation_id ${t.correlation_id}` : "",
        t.traceparent ? `, traceparent ${t.traceparent}` : ""),
      h("div", { id: "trace-links" },  // (h skips the nulls)
        t.parent_msg_id ? h("p", { id: "trace-parent" }, "A dead-lettered copy of ",
                            link(t.parent_msg_id)) : null,
        (t.dead_lettered_to || []).length ? h("p", { id: "trace-copies" },
          "Dead-lettered as ", t.dead_lettered_to.map(link)) : null),
      laneChart(t.steps),
      table([["+ms", s => s.after_ms], ["Step", s => s.kind], ["Actor", s => s.actor],
             ["Node", s => s.node], ["Process", s => `${s.process} (${s.pid})`],
             ["Time", s => s.time], ["Queue", s => s.queue || ""],
             ["Details", s => JSON.stringify(Object.fromEntries(Object.entries(s).filter(
               ([k]) => !["after_ms", "kind", "actor", "node", "process", "pid", "time",
                          "queue", "t_ns", "vhost"].includes(k))))]], t.steps, "trace-steps"));
  },

  // dynamic shovels (rabbitmq_shovel_management's page): their statuses from every node,
  // their parameters, and a form that sets one as `leveretctl set_parameter shovel` does
  async shovels(page) {
    const [rows, params, vhosts] = await Promise.all([
      api("GET", "/shovels"), api("GET", "/parameters/shovel"), api("GET", "/vhosts")]);
    const running = new Set(rows.map(r => `${r.vhost}\u0000${r.name}`));
    page.append(h("h2", {}, "Shovel status"),
      table([["Name", r => r.name], ["Vhost", r => r.vhost], ["State", r => r.state],
             ["Source", r => r.src_uri ? `${r.src_uri} ${r.src_queue || r.src_exchange || ""}`
                                       : ""],
             ["Destination", r => r.dest_uri
               ? `${r.dest_uri} ${r.dest_queue || r.dest_exchange || ""}` : ""],
             ["Node", r => r.node], ["Since", r => r.timestamp], ["Reason", r => r.reason || ""],
             ["", r => button("Restart", async () => {
               await api("DELETE", `/shovels/vhost/${enc(r.vhost)}/${enc(r.name)}/restart`);
               toast("Shovel restarted"); render();
             })]], rows, "shovels-table"),
      h("h3", {}, "Dynamic shovels"),
      table([["Vhost", p => p.vhost], ["Name", p => p.name],
             ["Definition", p => JSON.stringify(p.value)],
             ["Runs", p => running.has(`${p.vhost}\u0000${p.name}`) ? "yes" : "no"],
             ["", p => button("Delete", async () => {
               await api("DELETE", `/parameters/shovel/${enc(p.vhost)}/${enc(p.name)}`);
               render();
             })]], params, "shovel-parameters-table"),
      h("h3", {}, "Add a shovel"),
      form("add-shovel", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                          ["name", "Name"], ["src-uri", "Source URI"],
                          ["src-queue", "Source queue"],
                          ["dest-uri", "Destination URI"], ["dest-queue", "Destination queue"],
                          ["ack-mode", "Ack mode", "select",
                           ["on-confirm", "on-publish", "no-ack"]],
                          ["src-delete-after", "Delete after", "select",
                           ["never", "queue-length"]],
                          ["more", "More keys (JSON)"]],
           "Add shovel", async v => {
             const value = Object.assign({ "src-uri": v["src-uri"], "src-queue": v["src-queue"],
                                           "dest-uri": v["dest-uri"],
                                           "dest-queue": v["dest-queue"],
                                           "ack-mode": v["ack-mode"],
                                           "src-delete-after": v["src-delete-after"] },
                                         jsonField("More keys", v.more));
             await api("PUT", `/parameters/shovel/${enc(v.vhost)}/${enc(v.name)}`, { value });
             toast("Shovel added"); render();
           }));
  },

  async admin(page) {
    const [users, vhosts, perms, policies, opPolicies, vhostLimits, userLimits] =
      await Promise.all([
        api("GET", "/users"), api("GET", "/vhosts"), api("GET", "/permissions"),
        api("GET", "/policies"), api("GET", "/operator-policies"),
        api("GET", "/vhost-limits"), api("GET", "/user-limits")]);
    page.append(h("h2", {}, "Admin"),
      h("h3", {}, "Users"),
      table([["Name", u => u.name], ["Tags", u => u.tags.join(", ")],
             ["", u => button("Delete", async () => {
               await api("DELETE", "/users/" + enc(u.name)); render();
             })]], users, "users-table"),
      form("add-user", [["name", "Username"], ["password", "Password", "password"],
                        ["tags", "Tags (comma separated)"]], "Add user", async v => {
        const existed = users.some(u => u.name === v.name);
        await api("PUT", "/users/" + enc(v.name), { password: v.password, tags: v.tags });
        // (RabbitMQ's UI warns the same way when the PUT answers 204)
        toast(existed ? `Updated an existing user: '${v.name}'` : "User added", existed);
        render();
      }),
      h("h3", {}, "Virtual hosts"),
      table([["Name", v => v.name], ["", v => button("Delete", async () => {
        await api("DELETE", "/vhosts/" + enc(v.name)); render();
      })]], vhosts, "vhosts-table"),
      form("add-vhost", [["name", "Name"]], "Add virtual host", async v => {
        await api("PUT", "/vhosts/" + enc(v.name)); toast("Virtual host added"); render();
      }),
      h("h3", {}, "Permissions"),
      table([["User", p => p.user], ["Vhost", p => p.vhost], ["Configure", p => p.configure],
             ["Write", p => p.write], ["Read", p => p.read],
             ["", p => button("Clear", async () => {
               await api("DELETE", `/permissions/${enc(p.vhost)}/${enc(p.user)}`); render();
             })]], perms, "permissions-table"),
      form("set-permission", [["user", "User", "select", users.map(u => u.name)],
                              ["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                              ["configure", "Configure"], ["write", "Write"], ["read", "Read"]],
           "Set permission", async v => {
             await api("PUT", `/permissions/${enc(v.vhost)}/${enc(v.user)}`,
                       { configure: v.configure, write: v.write, read: v.read });
             toast("Permission set"); render();
           }),
      h("h3", {}, "Policies"),
      table([["Vhost", p => p.vhost], ["Name", p => p.name], ["Pattern", p => p.pattern],
             ["Apply to", p => p["apply-to"]], ["Definition", p => JSON.stringify(p.definition)],
             ["Priority", p => p.priority],
             ["", p => button("Delete", async () => {
               await api("DELETE", `/policies/${enc(p.vhost)}/${enc(p.name)}`); render();
             })]], policies, "policies-table"),
      form("add-policy", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                          ["name", "Name"], ["pattern", "Pattern"],
                          ["apply-to", "Apply to", "select", ["all", "queues", "exchanges"]],
                          ["definition", "Definition (JSON)"], ["priority", "Priority"]],
           "Add policy", async v => {
             await api("PUT", `/policies/${enc(v.vhost)}/${enc(v.name)}`, {
               pattern: v.pattern, "apply-to": v["apply-to"],
               definition: jsonField("Definition", v.definition),
               priority: parseInt(v.priority || "0", 10) });
             toast("Policy set"); render();
           }),
      h("h3", {}, "Operator policies"),
      h("p", {}, "Set by administrators; merged with the policy that matches, the smaller "
                 + "value winning where both set a key (expires, message-ttl, max-length, "
                 + "max-length-bytes)."),
      table([["Vhost", p => p.vhost], ["Name", p => p.name], ["Pattern", p => p.pattern],
             ["Apply to", p => p["apply-to"]], ["Definition", p => JSON.stringify(p.definition)],
             ["Priority", p => p.priority],
             ["", p => button("Delete", async () => {
               await api("DELETE", `/operator-policies/${enc(p.vhost)}/${enc(p.name)}`);
               render();
             })]], opPolicies, "operator-policies-table"),
      form("add-operator-policy", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                                   ["name", "Name"], ["pattern", "Pattern"],
                                   ["apply-to", "Apply to", "select", ["queues", "all"]],
                                   ["definition", "Definition (JSON)"],
                                   ["priority", "Priority"]],
           "Add operator policy", async v => {
             await api("PUT", `/operator-policies/${enc(v.vhost)}/${enc(v.name)}`, {
               pattern: v.pattern, "apply-to": v["apply-to"],
               definition: jsonField("Definition", v.definition),
               priority: parseInt(v.priority || "0", 10) });
             toast("Operator policy set"); render();
           }),
      h("h3", {}, "Virtual host limits"),
      limitsTable(vhostLimits, "vhost", "vhost-limits", "vhost-limits-table"),
      form("set-vhost-limit", [["vhost", "Virtual host", "select", vhostOptions(vhosts)],
                               ["limit", "Limit", "select", ["max-connections", "max-queues"]],
                               ["value", "Value", "number"]],
           "Set virtual host limit", async v => {
             await api("PUT", `/vhost-limits/${enc(v.vhost)}/${enc(v.limit)}`,
                       { value: limitValue(v.limit, v.value) });
             toast("Virtual host limit set"); render();
           }),
      h("h3", {}, "User limits"),
      limitsTable(userLimits, "user", "user-limits", "user-limits-table"),
      form("set-user-limit", [["user", "User", "select", users.map(u => u.name)],
                              ["limit", "Limit", "select", ["max-connections", "max-channels"]],
                              ["value", "Value", "number"]],
           "Set user limit", async v => {
             await api("PUT", `/user-limits/${enc(v.user)}/${enc(v.limit)}`,
                       { value: limitValue(v.limit, v.value) });
             toast("User limit set"); render();
           }),
      h("h3", {}, "Definitions"),
      h("p", {}, "Import a definitions file (RabbitMQ's JSON format):"),
      h("input", { type: "file", id: "definitions-file", accept: ".json,application/json" }),
      button("Upload definitions", uploadDefinitions, { id: "definitions-upload" }));
  },
};

// the overview's churn_rates as RabbitMQ's overview shows them: counts and rates per second
function churnRows(c) {
  const cell = k => `${c[k] || 0} (${rate(c, k)}/s)`;
  return [["Connections", cell("connection_created"), cell("connection_closed")],
          ["Channels", cell("channel_created"), cell("channel_closed")],
          ["Queues", `${cell("queue_declared")}, created ${cell("queue_created")}`,
           cell("queue_deleted")]];
}

// one row per (vhost or user, limit): [{vhost|user, value: {limit: n}}] as the API lists them
function limitsTable(items, who, path, id) {
  const rows = items.flatMap(i => Object.entries(i.value).map(([limit, n]) =>
    ({ name: i[who], limit, n })));
  return table([[who === "vhost" ? "Virtual host" : "User", r => r.name],
                ["Limit", r => r.limit], ["Value", r => r.n],
                ["", r => button("Clear", async () => {
                  await api("DELETE", `/${path}/${enc(r.name)}/${enc(r.limit)}`); render();
                })]], rows, id);
}
// RabbitMQ's UI refuses a limit that is not a number before sending it, with this text
function limitValue(limit, text) {
  const n = Number(text);
  if (text === "" || !Number.isInteger(n)) {
    throw new Error(`Validation failed\n\n${limit} should be a number, actually was "${text}"`);
  }
  return n;
}

// channels as RabbitMQ's channels page lists them: a channel's connection links to the
// connection's page (which closes it); mode C = confirm, T = transactional
function channelsTable(chans, id) {
  return table([["Channel", c => c.name],
                ["Connection", c => {
                  const conn = (c.connection_details || {}).name;
                  return conn ? h("a", { href: "#/connections/" + enc(conn),
                                         class: "channel-connection" }, conn) : "";
                }],
                ["User", c => c.user], ["Vhost", c => c.vhost],
                ["Mode", c => (c.confirm ? "C" : "") + (c.transactional ? "T" : "")],
                ["State", c => c.state], ["Unconfirmed", c => c.messages_unconfirmed ?? ""],
                ["Prefetch", c => c.prefetch_count], ["Unacked", c => c.messages_unacknowledged],
                ["Consumers", c => c.consumer_count],
                ["Publish /s", c => rate(c.message_stats, "publish")],
                ["Ack /s", c => rate(c.message_stats, "ack")]], chans, id);
}

// a connection's page: its details, its channels, and RabbitMQ's "Close this connection" with
// the reason the client is sent (X-Reason: CONNECTION_FORCED - <reason>)
async function connectionPage(page, name) {
  const [c, chans] = await Promise.all([api("GET", `/connections/${enc(name)}`),
                                        api("GET", `/connections/${enc(name)}/channels`)]);
  const client = c.client_properties || {};
  page.append(h("h2", {}, `Connection ${c.name}`),
    h("p", { id: "connection-details" },
      `User ${c.user}, virtual host ${c.vhost}, state ${c.state}, protocol ${c.protocol}, `
      + `client ${client.product || "?"} ${client.version || ""}, channels ${c.channels}`),
    h("h3", {}, "Channels"),
    channelsTable(chans, "connection-channels"),
    h("h3", {}, "Close this connection"),
    form("close-connection", [["reason", "Reason", "text", null,
                               "Closed via management plugin"]],
         "Force Close", async v => {
           await api("DELETE", `/connections/${enc(name)}`, undefined,
                     { "X-Reason": v.reason || "Closed via management plugin" });
           toast("Connection closed");
           location.hash = "#/connections";
         }));
}

async function exchangePage(page, arg) {
  const [vhost, name] = arg.split("/").map(decodeURIComponent);
  const x = await api("GET", `/exchanges/${enc(vhost)}/${enc(name)}`);
  const bindings = await api("GET", `/bindings/${enc(vhost)}`);
  const mine = bindings.filter(b => b.source === x.name);
  page.append(h("h2", {}, `Exchange ${x.name || "(AMQP default)"}`),
    h("p", {}, `Virtual host ${x.vhost}, type ${x.type}${x.durable ? ", durable" : ""}`),
    h("h3", {}, "Bindings from this exchange"),
    table([["To", b => b.destination], ["Type", b => b.destination_type],
           ["Routing key", b => b.routing_key]], mine),
    h("h3", {}, "Publish message"),
    form("publish", [["routing_key", "Routing key"], ["payload", "Payload", "textarea"],
                     ["delivery_mode", "Delivery mode", "select", ["1", "2"]]],
         "Publish message", async v => {
           const r = await api("POST", `/exchanges/${enc(vhost)}/${enc(name)}/publish`, {
             routing_key: v.routing_key, payload: v.payload, payload_encoding: "string",
             properties: { delivery_mode: parseInt(v.delivery_mode, 10) } });
           toast(r.routed ? "Message published." : "Message published, but not routed.");
         }),
    x.name && !x.name.startsWith("amq.") ? button("Delete this exchange", async () => {
      await api("DELETE", `/exchanges/${enc(vhost)}/${enc(name)}`);
      location.hash = "#/exchanges";
    }, { id: "delete-exchange" }) : null);
}

// a queue's counts: the figures of its last statistics sample (up to an interval old),
// refreshed in place every REFRESH_MS while its page is open (the page's forms stay as they are)
function queueTotals(q) {
  return h("div", { class: "totals", id: "queue-totals" },
    h("div", {}, h("b", { id: "queue-ready" }, q.messages_ready ?? "?"), "Ready"),
    h("div", {}, h("b", {}, q.messages_unacknowledged ?? "?"), "Unacked"),
    h("div", {}, h("b", {}, q.consumers ?? "?"), "Consumers"),
    h("div", {}, h("b", {}, q.state), "State"),
    h("div", {}, h("b", { id: "queue-utilisation" }, q.consumer_utilisation == null ? "-"
      : `${Math.round(q.consumer_utilisation * 100)}%`), "Consumer utilisation"));
}

async function refreshQueueTotals() {
  const [, , vhost, name] = location.hash.split("/");
  const q = await api("GET", `/queues/${vhost}/${name}`);
  const totals = document.getElementById("queue-totals");
  if (totals && location.hash.split("/")[3] === name) { totals.replaceWith(queueTotals(q)); }
}

// a stream's log: its offsets, its segments and each consumer's position (docs/streams.md)
function streamSection(s) {
  return h("div", { id: "stream" },
    h("h3", {}, "Stream"),
    h("p", { id: "stream-offsets" }, `Offsets ${s.first_offset} to ${s.committed_offset} `
                                    + `in ${s.segments.length} segments`),
    table([["Segment", g => g.number], ["First offset", g => g.first_offset],
           ["Last offset", g => g.last_offset], ["Bytes", g => g.bytes]],
          s.segments, "stream-segments"),
    h("h4", {}, "Consumers' positions"),
    table([["Consumer tag", r => r.consumer_tag], ["Next offset", r => r.offset],
           ["Credit", r => r.credit], ["Unacked", r => r.unacked]],
          s.readers, "stream-readers"));
}

async function queuePage(page, arg) {
  const [vhost, name] = arg.split("/").map(decodeURIComponent);
  const q = await api("GET", `/queues/${enc(vhost)}/${enc(name)}`);
  const bindings = await api("GET", `/queues/${enc(vhost)}/${enc(name)}/bindings`);
  const got = h("div", { id: "got-messages" });
  page.append(h("h2", {}, `Queue ${q.name}`),
    queueTotals(q),
    h("p", {}, `Virtual host ${q.vhost}, type ${q.type}, `
               + `${q.durable ? "durable" : "transient"}, node `
               + `${q.node}, policy ${q.policy || "none"}, arguments `
               + JSON.stringify(q.arguments)),
    q.stream ? streamSection(q.stream) : null,
    h("h3", {}, "Bindings"),
    table([["From", b => b.source || "(AMQP default)"], ["Routing key", b => b.routing_key],
           ["", b => b.source ? button("Unbind", async () => {
             await api("DELETE", `/bindings/${enc(vhost)}/e/${enc(b.source)}/q/`
                       + `${enc(name)}/${enc(b.properties_key)}`);
             render();
           }) : ""]], bindings, "queue-bindings"),
    form("bind", [["source", "From exchange"], ["routing_key", "Routing key"]], "Bind",
         async v => {
           await api("POST", `/bindings/${enc(vhost)}/e/${enc(v.source)}/q/${enc(name)}`,
                     { routing_key: v.routing_key, arguments: {} });
           toast("Bound"); render();
         }),
    h("h3", {}, "Get messages"),
    form("get-messages", [["count", "Messages", "number"],
                          ["ackmode", "Ack mode", "select",
                           ["ack_requeue_true", "reject_requeue_true", "ack_requeue_false",
                            "reject_requeue_false"]]], "Get Message(s)", async v => {
      const msgs = await api("POST", `/queues/${enc(vhost)}/${enc(name)}/get`, {
        count: parseInt(v.count || "1", 10), ackmode: v.ackmode, encoding: "auto" });
      got.replaceChildren(msgs.length ? table([
        ["#", m => msgs.indexOf(m) + 1], ["Routing key", m => m.routing_key],
        ["Redelivered", m => m.redelivered ? "yes" : ""],
        ["Properties", m => JSON.stringify(m.properties)],
        ["Payload", m => h("pre", { class: "payload" }, m.payload)]], msgs)
        : h("p", {}, "Queue is empty"));
    }),
    got,
    h("h3", {}, "Purge / delete"),
    button("Purge Messages", async () => {
      await api("DELETE", `/queues/${enc(vhost)}/${enc(name)}/contents`);
      toast("Queue purged"); render();
    }, { id: "purge-queue" }),
    " ",
    button("Delete Queue", async () => {
      await api("DELETE", `/queues/${enc(vhost)}/${enc(name)}`);
      location.hash = "#/queues";
    }, { id: "delete-queue" }));
}

function chart(id, title, series) {
  const el = document.getElementById(id);
  if (!el || typeof Chart === "undefined") { return; }
  const colors = ["#e67e22", "#2980b9", "#27ae60"];
  S.charts[id] = new Chart(el, {
    type: "line",
    data: { labels: S.history.map(p => p.at),
            datasets: series.map(([key, label], i) => ({
              label, data: S.history.map(p => p[key]), borderColor: colors[i],
              tension: 0.2, pointRadius: 0 })) },
    options: { animation: false, maintainAspectRatio: false,
               plugins: { title: { display: true, text: title } },
               scales: { y: { beginAtZero: true } } },
  });
}

// The job's report.html in a new tab. The node serves it to monitoring users only, with the
// API's basic auth, which a plain link would not send (the browser would ask for the password
// again): the page and its plots are fetched as the UI fetches the API, the plots put in as
// data: URLs, and the tab shows the result.
async function openReport(name) {
  const tab = window.open("", "_blank");  // (in the click itself: no popup blocker stops it)
  if (!tab) { toast("the browser did not open a tab for the report", true); return; }
  const get = async path => {
    const r = await fetch(`analyses/${enc(name)}/${path}`,
                          { headers: { Authorization: "Basic " + S.auth } });
    if (!r.ok) { throw new Error(`${path}: ${r.status} ${r.statusText}`); }
    return r;
  };
  try {
    const doc = new DOMParser().parseFromString(await (await get("report.html")).text(),
                                                "text/html");
    for (const img of doc.querySelectorAll("img[src]")) {
      const src = img.getAttribute("src");
      if (/^([a-z]+:|\/)/i.test(src)) { continue; }  // (only the report's own files)
      const blob = await (await get(src)).blob();
      img.setAttribute("src", await new Promise((ok, fail) => {
        const reader = new FileReader();
        reader.onload = () => ok(reader.result);
        reader.onerror = () => fail(reader.error);
        reader.readAsDataURL(blob);
      }));
    }
    const html = "<!doctype html>\n" + doc.documentElement.outerHTML;
    tab.location = URL.createObjectURL(new Blob([html], { type: "text/html" }));
  } catch (e) {
    tab.close();
    toast(`report of ${name}: ${e.message}`, true);
  }
}

async function downloadDefinitions() {
  try {
    const defs = await api("GET", "/definitions");
    const blob = new Blob([JSON.stringify(defs, null, 2)], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: "definitions.json" });
    a.click();
  } catch (e) { toast(e.message, true); }
}

async function uploadDefinitions() {
  const file = document.getElementById("definitions-file").files[0];
  if (!file) { throw new Error("choose a definitions file first"); }
  await api("POST", "/definitions", JSON.parse(await file.text()));
  toast("Definitions imported"); render();
}

// --- frame -----------------------------------------------------------------------------------
async function showAlarms() {
  const box = document.getElementById("alarms");
  try {
    const r = await fetch("api/health/checks/alarms",
                          { headers: { Authorization: "Basic " + S.auth } });
    const data = await r.json();
    if (r.status === 503) {
      box.textContent = "Resource alarm in effect: " + data.alarms.map(a => a.resource)
        .join(", ") + " - publishers are blocked";
      box.classList.remove("hidden");
    } else {
      box.classList.add("hidden");
    }
  } catch (e) { /* the next refresh tries again */ }
}

async function render() {
  const [name, ...rest] = (location.hash.replace(/^#\//, "") || "overview").split("/");
  const pageName = PAGES[name] ? name : "overview";
  document.querySelectorAll("nav a").forEach(a =>
    a.classList.toggle("active", a.dataset.page === pageName));
  const page = h("main", { id: "page", "data-page": pageName });
  Object.values(S.charts).forEach(c => c.destroy());
  S.charts = {};
  S.after = null;
  try {
    await PAGES[pageName](page, rest.length ? rest.join("/") : null);
  } catch (e) {
    page.append(h("p", { class: "error" }, e.message));
  }
  document.getElementById("page").replaceWith(page);
  if (S.after) { S.after(); }
  showAlarms();
}

async function start() {
  try {
    const me = await api("GET", "/whoami");
    document.getElementById("whoami").textContent = `${me.name} (${me.tags.join(", ")})`;
  } catch (e) {
    sessionStorage.removeItem("auth");
    S.auth = null;
    document.getElementById("app").classList.add("hidden");
    document.getElementById("login").classList.remove("hidden");
    document.getElementById("login-error").textContent = S.tried ? e.message : "";
    return;
  }
  document.getElementById("login").classList.add("hidden");
  document.getElementById("app").classList.remove("hidden");
  await render();
  clearInterval(S.timer);
  S.timer = setInterval(() => {
    // refresh what changes by itself, not the pages with forms being filled in
    const page = document.getElementById("page").dataset.page;
    const detail = location.hash.split("/")[2];  // (a connection's or a queue's own page)
    if (["overview", "channels"].includes(page)
        || (["connections", "queues"].includes(page) && !detail)) { render(); }
    else {
      showAlarms();
      if (page === "queues") { refreshQueueTotals().catch(() => {}); }  // (next time)
    }
  }, REFRESH_MS);
}

document.getElementById("login-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const u = document.getElementById("login-user").value;
  const p = document.getElementById("login-password").value;
  S.auth = btoa(unescape(encodeURIComponent(u + ":" + p)));
  S.tried = true;
  sessionStorage.setItem("auth", S.auth);
  start();
});
document.getElementById("logout").addEventListener("click", () => {
  sessionStorage.removeItem("auth");
  location.reload();
});
window.addEventListener("hashchange", render);
if (!S.auth) { S.auth = ""; }
start();
