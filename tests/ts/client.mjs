// Interop check: the official TypeScript MCP SDK 1.x client against a running kgd.
//
//   node tests/ts/client.mjs <server-url> <cwd> [id-prefix]
//
// <server-url> is the MCP endpoint (http://127.0.0.1:PORT/mcp or http://127.0.0.1:PORT/).
// <cwd> is a folder inside a project (kg_read starts the session there).
// [id-prefix] names the nodes this run writes; default "ts-mcp" or "ts-root" from the URL path.
//
// Connects with the SDK's Client + StreamableHTTPClientTransport (initialize handshake),
// lists the tools, calls all eight of them, makes failing calls, checks that every success
// carries structuredContent (the SDK itself validates it against each tool's outputSchema,
// because the tools were listed first), probes GET/DELETE on the endpoint (405, no
// Mcp-Session-Id), and closes the client. Any error the SDK reports through onerror counts
// as a failure. On success: one JSON summary line on stdout, exit 0. On failure: the error
// on stderr, exit 1.

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

// The installed SDK's version, from its own package.json (its "exports" map hides that file).
function sdkVersion() {
  let dir = dirname(createRequire(import.meta.url).resolve("@modelcontextprotocol/sdk/client/index.js"));
  for (let up = 0; up < 6; up++, dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      if (pkg.name === "@modelcontextprotocol/sdk") return pkg.version;
    } catch {
      // no package.json here: keep climbing
    }
  }
  return null;
}
const SDK_VERSION = sdkVersion();

const TOOLS = ["kg_read", "kg_put_node", "kg_put_edge", "kg_delete_node", "kg_delete_edge",
  "kg_search", "kg_sync", "kg_progress"];

const KGD_HANDSHAKE_VERSIONS = ["2025-03-26", "2025-06-18", "2025-11-25"];

class CheckError extends Error {}

function check(cond, what, detail) {
  if (!cond) {
    throw new CheckError(detail === undefined ? what : `${what}: ${JSON.stringify(detail)}`);
  }
}

function sameSet(a, b) {
  const sa = [...new Set(a)].sort();
  const sb = [...new Set(b)].sort();
  return sa.length === sb.length && sa.every((x, i) => x === sb[i]);
}

// ---- every HTTP exchange the SDK makes, recorded through its `fetch` option

const exchanges = [];

async function recordingFetch(input, init) {
  const method = (init && init.method) || "GET";
  const headers = new Headers((init && init.headers) || {});
  let rpc = null;
  if (init && typeof init.body === "string") {
    try {
      const msg = JSON.parse(init.body);
      rpc = Array.isArray(msg) ? msg.map((m) => m.method || "response") : (msg.method || "response");
    } catch {
      rpc = "unparseable";
    }
  }
  const entry = {
    method,
    rpc,
    sent_protocol_version: headers.get("mcp-protocol-version"),
    sent_session_id: headers.get("mcp-session-id"),
    status: null,
  };
  exchanges.push(entry);
  const response = await fetch(input, init);
  entry.status = response.status;
  entry.content_type = response.headers.get("content-type");
  entry.session_id = response.headers.get("mcp-session-id");
  entry.allow = response.headers.get("allow");
  return response;
}

// ---- main

async function main() {
  const [urlArg, cwd, prefixArg] = process.argv.slice(2);
  if (!urlArg || !cwd) {
    throw new CheckError("usage: node client.mjs <server-url> <cwd> [id-prefix]");
  }
  const url = new URL(urlArg);
  const prefix = prefixArg || (url.pathname.replace(/\/+$/, "") === "" ? "ts-root" : "ts-" +
    url.pathname.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-+|-+$/g, ""));

  const sdkErrors = [];
  const client = new Client({ name: "kgd-ts-interop", version: "1.0.0" }, { capabilities: {} });
  client.onerror = (err) => sdkErrors.push(String((err && err.stack) || err));
  let closed = false;
  client.onclose = () => { closed = true; };

  const transport = new StreamableHTTPClientTransport(url, { fetch: recordingFetch });

  // -- initialize handshake (+ notifications/initialized, + the SDK's optional GET SSE stream)
  await client.connect(transport);
  const serverInfo = client.getServerVersion();
  const caps = client.getServerCapabilities();
  const instructions = client.getInstructions();
  check(serverInfo && serverInfo.name === "kgd", "serverInfo.name", serverInfo);
  check(typeof serverInfo.version === "string" && serverInfo.version, "serverInfo.version", serverInfo);
  check(caps && caps.tools && caps.tools.listChanged === false, "capabilities.tools", caps);
  check(typeof instructions === "string" && instructions.includes("kg_read"), "instructions mention kg_read",
    instructions);
  // kgd echoes a handshake revision it knows, else answers its newest one (CONTRACT section 3).
  const protocolVersion = transport.protocolVersion;
  const expectedVersion = KGD_HANDSHAKE_VERSIONS.includes(LATEST_PROTOCOL_VERSION) ? LATEST_PROTOCOL_VERSION
    : KGD_HANDSHAKE_VERSIONS[KGD_HANDSHAKE_VERSIONS.length - 1];
  check(protocolVersion === expectedVersion, "negotiated protocol version",
    { got: protocolVersion, sent: LATEST_PROTOCOL_VERSION, expected: expectedVersion });
  check(transport.sessionId === undefined, "kgd must not issue Mcp-Session-Id", transport.sessionId);

  await client.ping();

  // -- tools/list
  const listed = await client.listTools();
  const tools = listed.tools;
  const names = tools.map((t) => t.name);
  check(sameSet(names, TOOLS) && names.length === TOOLS.length, "tool names", names);
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  for (const t of tools) {
    check(t.inputSchema && t.inputSchema.type === "object", `${t.name} inputSchema`, t.inputSchema);
    check(t.outputSchema && t.outputSchema.type === "object", `${t.name} outputSchema`, t.outputSchema);
    check(typeof t.description === "string" && t.description.length > 20, `${t.name} description`, t.description);
    check(t.annotations && typeof t.annotations === "object", `${t.name} annotations`, t);
  }
  for (const n of ["kg_search", "kg_sync"]) {
    check(byName[n].annotations.readOnlyHint === true, `${n} readOnlyHint`, byName[n].annotations);
  }
  for (const n of ["kg_delete_node", "kg_delete_edge"]) {
    check(byName[n].annotations.destructiveHint === true, `${n} destructiveHint`, byName[n].annotations);
  }

  // -- tools/call
  const called = {};
  async function ok(name, args) {
    const res = await client.callTool({ name, arguments: args });
    called[name] = (called[name] || 0) + 1;
    check(!res.isError, `${name} failed`, { args, content: res.content });
    check(res.structuredContent && typeof res.structuredContent === "object" &&
      !Array.isArray(res.structuredContent), `${name} structuredContent`, res);
    check(Array.isArray(res.content) && res.content.length === 1 && res.content[0].type === "text" &&
      typeof res.content[0].text === "string" && res.content[0].text.length > 0, `${name} text content`, res.content);
    return { sc: res.structuredContent, text: res.content[0].text };
  }
  async function fails(name, args, mention) {
    const res = await client.callTool({ name, arguments: args });
    called[name] = (called[name] || 0) + 1;
    check(res.isError === true, `${name} should fail (isError)`, { args, res });
    check(res.structuredContent === undefined, `${name} failure carries no structuredContent`, res);
    check(Array.isArray(res.content) && res.content.length === 1 && res.content[0].type === "text",
      `${name} failure text`, res.content);
    if (mention) {
      check(res.content[0].text.includes(mention), `${name} failure text mentions ${mention}`, res.content[0].text);
    }
    return res.content[0].text;
  }

  const A = `${prefix}-a`; // project level, kept
  const B = `${prefix}-b`; // user level, deleted
  const C = `${prefix}-c`; // project level, deleted with its edge
  const FILE = "src/a.py";

  const r0 = await ok("kg_read", { cwd });
  const sid = r0.sc.session_id;
  check(typeof sid === "string" && sid.length > 0, "kg_read session_id", r0.sc);
  check(r0.text.includes(`Session: ${sid}`), "kg_read text carries Session line", r0.text);
  check(typeof r0.sc.project_path === "string", "kg_read project_path", r0.sc);
  check(r0.sc.user && r0.sc.project && r0.sc.budget, "kg_read user/project/budget", r0.sc);

  const pa = await ok("kg_put_node", { session_id: sid, level: "project", id: A, gist: "written by the TS SDK",
    notes: ["first note"], touches: [FILE] });
  check(pa.sc.created === true && pa.sc.level === "project" && pa.sc.node.id === A &&
    pa.sc.node.state === "active", "kg_put_node A", pa.sc);
  const pa2 = await ok("kg_put_node", { session_id: sid, level: "project", id: A, gist: "written by the TS SDK, merged",
    notes: ["merged note"] });
  check(pa2.sc.created === false && pa2.sc.node.gist === "written by the TS SDK, merged" &&
    sameSet(pa2.sc.node.notes, ["merged note"]) && sameSet(pa2.sc.node.touches, [FILE]), "kg_put_node merge", pa2.sc);
  const pb = await ok("kg_put_node", { session_id: sid, level: "user", id: B, gist: "user level from TS" });
  check(pb.sc.created === true && pb.sc.level === "user", "kg_put_node B", pb.sc);
  const pc = await ok("kg_put_node", { session_id: sid, level: "project", id: C, gist: "to be deleted" });
  check(pc.sc.created === true, "kg_put_node C", pc.sc);

  const e1 = await ok("kg_put_edge", { session_id: sid, level: "project", from: A, to: FILE, rel: "implemented-in" });
  check(e1.sc.created === true && e1.sc.edge.from === A && e1.sc.edge.to === FILE &&
    e1.sc.edge.rel === "implemented-in", "kg_put_edge A->file", e1.sc);
  const e2 = await ok("kg_put_edge", { session_id: sid, level: "project", from: C, to: A, rel: "depends-on",
    notes: ["why"] });
  check(e2.sc.created === true && sameSet(e2.sc.edge.notes, ["why"]), "kg_put_edge C->A", e2.sc);

  const rid = await ok("kg_read", { session_id: sid, id: A });
  check(rid.sc.session_id === sid && rid.sc.nodes.length === 1 && rid.sc.nodes[0].id === A &&
    rid.sc.nodes[0].level === "project", "kg_read by id", rid.sc);
  const edgeKeys = rid.sc.nodes[0].edges.map((e) => `${e.from}->${e.to}:${e.rel}`);
  check(sameSet(edgeKeys, [`${A}->${FILE}:implemented-in`, `${C}->${A}:depends-on`]), "kg_read by id edges", edgeKeys);
  const rids = await ok("kg_read", { session_id: sid, ids: [A, B, `${prefix}-missing`] });
  check(sameSet(rids.sc.nodes.map((n) => n.id), [A, B]) && sameSet(rids.sc.missing, [`${prefix}-missing`]),
    "kg_read ids", rids.sc);

  const s = await ok("kg_search", { query: prefix, session_id: sid });
  const found = s.sc.results.map((n) => n.id);
  check([A, B, C].every((id) => found.includes(id)), "kg_search finds the TS nodes", found);
  const sExact = await ok("kg_search", { query: A, session_id: sid, limit: 1 });
  check(sExact.sc.results.length === 1 && sExact.sc.results[0].id === A, "kg_search exact id first", sExact.sc);

  const sy = await ok("kg_sync", { session_id: sid });
  check(sy.sc.session_id === sid && sy.sc.nodes.length === 0 && sy.sc.edges.length === 0 &&
    sy.sc.deleted_nodes.length === 0 && sy.sc.deleted_edges.length === 0, "kg_sync leaves own writes out", sy.sc);

  const state = { step: 2, by: "ts-sdk", list: [1, "two", null] };
  const ps = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-task`, state });
  check(JSON.stringify(ps.sc.state) === JSON.stringify(state) && ps.sc.level === "user", "kg_progress set", ps.sc);
  const pg = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-task` });
  check(JSON.stringify(pg.sc.state) === JSON.stringify(state), "kg_progress get", pg.sc);
  const pn = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-nothing`, level: "project" });
  check(pn.sc.state === null && pn.sc.level === "project", "kg_progress get unset", pn.sc);

  const de = await ok("kg_delete_edge", { session_id: sid, from: A, to: FILE, rel: "implemented-in" });
  check(de.sc.level === "project" && de.sc.edge.from === A && de.sc.edge.rel === "implemented-in",
    "kg_delete_edge", de.sc);
  const dc = await ok("kg_delete_node", { session_id: sid, id: C });
  check(dc.sc.level === "project" && dc.sc.id === C && dc.sc.edges_removed === 1, "kg_delete_node C", dc.sc);
  const db = await ok("kg_delete_node", { session_id: sid, id: B, level: "user" });
  check(db.sc.level === "user" && db.sc.id === B && db.sc.edges_removed === 0, "kg_delete_node B", db.sc);

  // -- failures: tool results with isError, never JSON-RPC errors
  const failures = [];
  failures.push(await fails("kg_delete_node", { session_id: sid, id: `${prefix}-missing` }, `${prefix}-missing`));
  failures.push(await fails("kg_put_node", { session_id: sid, level: "galaxy", id: `${prefix}-x`, gist: "g" }));
  failures.push(await fails("kg_read", { session_id: "no-such-session" }));

  // -- the end state, as this session sees it
  const full = await ok("kg_read", { session_id: sid });
  const projectIds = full.sc.project.nodes.map((n) => n.id);
  const userIds = full.sc.user.nodes.map((n) => n.id);
  check(projectIds.includes(A) && !projectIds.includes(C), "final project graph", projectIds);
  check(!userIds.includes(B), "final user graph", userIds);
  check(full.sc.project.edges.length === 0, "final project edges", full.sc.project.edges);

  // -- a JSON-RPC protocol fault still reaches the caller as an McpError (-32601)
  let protocolError = null;
  try {
    await client.listPrompts();
  } catch (err) {
    protocolError = err && err.code;
  }
  check(protocolError === -32601, "prompts/list -> -32601", protocolError);

  // -- the SDK's optional GET SSE stream (opened after notifications/initialized) must get 405
  for (let i = 0; i < 50 && !exchanges.some((x) => x.method === "GET" && x.status !== null); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  const sdkGet = exchanges.find((x) => x.method === "GET");
  check(sdkGet && sdkGet.status === 405, "SDK's GET (SSE stream) answered 405", sdkGet);

  // -- GET and DELETE probed directly: 405 with Allow: POST, no session id
  const probes = {};
  for (const method of ["GET", "DELETE"]) {
    const resp = await fetch(url, { method, headers: { accept: "text/event-stream" } });
    await resp.arrayBuffer();
    probes[method] = { status: resp.status, allow: resp.headers.get("allow"),
      session_id: resp.headers.get("mcp-session-id") };
    check(resp.status === 405 && /\bPOST\b/.test(resp.headers.get("allow") || ""), `${method} -> 405 Allow: POST`,
      probes[method]);
  }

  // -- every exchange: no Mcp-Session-Id issued or sent; every POST after initialize sent the version header
  check(exchanges.every((x) => x.session_id === null && x.sent_session_id === null), "no Mcp-Session-Id anywhere",
    exchanges);
  const posts = exchanges.filter((x) => x.method === "POST");
  check(posts.length > 0 && posts[0].rpc === "initialize" && posts[0].status === 200, "initialize POST", posts[0]);
  check(posts.slice(1).every((x) => x.sent_protocol_version === protocolVersion), "MCP-Protocol-Version on POSTs",
    posts.slice(1));
  const initialized = posts.find((x) => x.rpc === "notifications/initialized");
  check(initialized && initialized.status === 202, "notifications/initialized -> 202", initialized);
  check(posts.filter((x) => x.rpc !== "notifications/initialized").every((x) => x.status === 200 &&
    /^application\/json\b/.test(x.content_type || "")), "requests -> 200 application/json", posts);

  // -- close: terminateSession is a no-op without a session id; close must not raise or report errors
  const before = exchanges.length;
  await transport.terminateSession();
  check(exchanges.length === before, "terminateSession sends nothing without a session id",
    exchanges.slice(before));
  await client.close();
  check(closed, "client.onclose fired after close()");
  // Give any late asynchronous SDK callbacks a moment to surface through onerror.
  await new Promise((r) => setTimeout(r, 100));
  check(sdkErrors.length === 0, "SDK reported errors through onerror", sdkErrors);

  const summary = {
    ok: true,
    sdk_version: SDK_VERSION,
    url: url.href,
    protocol_version: protocolVersion,
    server_info: serverInfo,
    tools: names,
    called,
    session_id: sid,
    project_path: r0.sc.project_path,
    kept: { project: [A] },
    deleted: { project: [C], user: [B] },
    progress_task: `${prefix}-task`,
    progress_state: state,
    failures: failures.length,
    protocol_error: protocolError,
    sdk_get_status: sdkGet.status,
    probes,
    http_exchanges: exchanges.length,
    session_id_header: exchanges.some((x) => x.session_id !== null),
    sdk_errors: sdkErrors,
  };
  process.stdout.write(JSON.stringify(summary) + "\n");
}

// A watchdog, so a hang never outlives the caller's patience silently.
const watchdog = setTimeout(() => {
  process.stderr.write("client.mjs: timed out after 60 s\n");
  process.exit(3);
}, 60000);
watchdog.unref();

main().then(
  () => { process.exitCode = 0; },
  (err) => {
    process.stderr.write(`client.mjs: ${err instanceof CheckError ? "check failed: " : ""}` +
      `${(err && err.stack) || err}\n`);
    process.exitCode = 1;
  },
);
