// Interop check: the official TypeScript MCP SDK 1.x client against a running kgd.
//
//   node tests/ts/client.mjs <server-url> <cwd> [id-prefix]
//   KGD_EXPECT_STRUCTURED=1 node tests/ts/client.mjs ...   (kgd runs with --structured-output)
//
// <server-url> is the MCP endpoint (http://127.0.0.1:PORT/mcp or http://127.0.0.1:PORT/).
// <cwd> is a folder inside a project (kg_read starts the session there).
// [id-prefix] names the nodes this run writes; default "ts-mcp" or "ts-root" from the URL path.
//
// Connects with the SDK's Client + StreamableHTTPClientTransport (initialize handshake),
// lists the tools, calls all eight of them, makes failing calls, checks that every success
// carries one text item that says what happened and, by default, nothing else: no tool lists an
// outputSchema and no result has structuredContent. With KGD_EXPECT_STRUCTURED=1 every tool has
// an outputSchema and every success structuredContent (the SDK itself validates it against the
// tool's outputSchema, because the tools were listed first). It probes GET/DELETE (405, no
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
const STRUCTURED = process.env.KGD_EXPECT_STRUCTURED === "1";

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
    if (STRUCTURED) {
      check(t.outputSchema && t.outputSchema.type === "object", `${t.name} outputSchema`, t.outputSchema);
    } else {
      check(t.outputSchema === undefined, `${t.name} declares no outputSchema by default`, t.outputSchema);
    }
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
    if (STRUCTURED) {
      check(res.structuredContent && typeof res.structuredContent === "object" &&
        !Array.isArray(res.structuredContent), `${name} structuredContent`, res);
    } else {
      check(res.structuredContent === undefined && Object.keys(res).every((k) => ["content", "isError"].includes(k)),
        `${name} result is the text only by default`, res);
    }
    check(Array.isArray(res.content) && res.content.length === 1 && res.content[0].type === "text" &&
      typeof res.content[0].text === "string" && res.content[0].text.length > 0, `${name} text content`, res.content);
    // By default `sc` is a stand-in whose checks below pass vacuously; the text checks always run.
    return { sc: STRUCTURED ? res.structuredContent : null, text: res.content[0].text };
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

  // sc(res, cond, what): a check on structuredContent, run only in structured mode.
  const sc = (res, cond, what) => { if (STRUCTURED) check(cond(res.sc), what, res.sc); };
  const says = (res, needle, what) => check(res.text.includes(needle), `${what}: text says ${JSON.stringify(needle)}`,
    res.text);

  const r0 = await ok("kg_read", { cwd });
  const sidLine = /^Session: (\S+)$/m.exec(r0.text);
  check(sidLine, "kg_read text carries a Session line", r0.text);
  const sid = sidLine[1];
  const projectLine = /^Project: (.+)$/m.exec(r0.text);
  check(projectLine, "kg_read text names the project", r0.text);
  const projectPath = projectLine[1];
  sc(r0, (x) => x.session_id === sid && x.project_path === projectPath, "kg_read session_id and project_path");
  sc(r0, (x) => x.user && x.project && x.budget, "kg_read user/project/budget");

  const pa = await ok("kg_put_node", { session_id: sid, level: "project", id: A, gist: "written by the TS SDK",
    notes: ["first note"], touches: [FILE] });
  says(pa, `Created project node ${A} (active; 1 note, 1 touch)`, "kg_put_node A");
  sc(pa, (x) => x.created === true && x.level === "project" && x.node.id === A && x.node.state === "active",
    "kg_put_node A");
  const pa2 = await ok("kg_put_node", { session_id: sid, level: "project", id: A, gist: "written by the TS SDK, merged",
    notes: ["merged note"] });
  says(pa2, `Updated project node ${A} (active; 1 note, 1 touch): written by the TS SDK, merged`, "kg_put_node merge");
  sc(pa2, (x) => x.created === false && x.node.gist === "written by the TS SDK, merged" &&
    sameSet(x.node.notes, ["merged note"]) && sameSet(x.node.touches, [FILE]), "kg_put_node merge");
  const pb = await ok("kg_put_node", { session_id: sid, level: "user", id: B, gist: "user level from TS" });
  says(pb, `Created user node ${B}`, "kg_put_node B");
  sc(pb, (x) => x.created === true && x.level === "user", "kg_put_node B");
  const pc = await ok("kg_put_node", { session_id: sid, level: "project", id: C, gist: "to be deleted" });
  says(pc, `Created project node ${C}`, "kg_put_node C");
  sc(pc, (x) => x.created === true, "kg_put_node C");

  const e1 = await ok("kg_put_edge", { session_id: sid, level: "project", from: A, to: FILE, rel: "implemented-in" });
  says(e1, `Created project edge ${A} -[implemented-in]-> ${FILE}`, "kg_put_edge A->file");
  sc(e1, (x) => x.created === true && x.edge.from === A && x.edge.to === FILE && x.edge.rel === "implemented-in",
    "kg_put_edge A->file");
  const e2 = await ok("kg_put_edge", { session_id: sid, level: "project", from: C, to: A, rel: "depends-on",
    notes: ["why"] });
  says(e2, `Created project edge ${C} -[depends-on]-> ${A} (1 note)`, "kg_put_edge C->A");
  sc(e2, (x) => x.created === true && sameSet(x.edge.notes, ["why"]), "kg_put_edge C->A");

  const rid = await ok("kg_read", { session_id: sid, id: A });
  for (const needle of [`Session: ${sid}`, `## ${A} [project, active]`, `edge: ${A} -[implemented-in]-> ${FILE}`,
    `edge: ${C} -[depends-on]-> ${A} (why)`, "- note: merged note", `touches: ${FILE}`]) {
    says(rid, needle, "kg_read by id");
  }
  sc(rid, (x) => x.session_id === sid && x.nodes.length === 1 && x.nodes[0].id === A && x.nodes[0].level === "project",
    "kg_read by id");
  sc(rid, (x) => sameSet(x.nodes[0].edges.map((e) => `${e.from}->${e.to}:${e.rel}`),
    [`${A}->${FILE}:implemented-in`, `${C}->${A}:depends-on`]), "kg_read by id edges");
  const rids = await ok("kg_read", { session_id: sid, ids: [A, B, `${prefix}-missing`] });
  says(rids, `## ${B} [user, active]`, "kg_read ids");
  says(rids, `Not found: ${prefix}-missing`, "kg_read ids");
  sc(rids, (x) => sameSet(x.nodes.map((n) => n.id), [A, B]) && sameSet(x.missing, [`${prefix}-missing`]),
    "kg_read ids");

  const s = await ok("kg_search", { query: prefix, session_id: sid });
  for (const [id, level] of [[A, "project"], [B, "user"], [C, "project"]]) {
    says(s, `- ${id} (${level}): `, "kg_search finds the TS nodes");
  }
  sc(s, (x) => [A, B, C].every((id) => x.results.map((n) => n.id).includes(id)), "kg_search finds the TS nodes");
  const sExact = await ok("kg_search", { query: A, session_id: sid, limit: 1 });
  check(sExact.text.split("\n")[1].startsWith(`- ${A} (project)`), "kg_search exact id first", sExact.text);
  sc(sExact, (x) => x.results.length === 1 && x.results[0].id === A, "kg_search exact id first");

  const sy = await ok("kg_sync", { session_id: sid });
  says(sy, "No changes from other sessions", "kg_sync leaves own writes out");
  sc(sy, (x) => x.session_id === sid && x.nodes.length === 0 && x.edges.length === 0 &&
    x.deleted_nodes.length === 0 && x.deleted_edges.length === 0, "kg_sync leaves own writes out");

  const state = { step: 2, by: "ts-sdk", list: [1, "two", null] };
  const ps = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-task`, state });
  sc(ps, (x) => JSON.stringify(x.state) === JSON.stringify(state) && x.level === "user", "kg_progress set");
  const pg = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-task` });
  says(pg, `Progress of task ${prefix}-task (user level): {"step": 2, "by": "ts-sdk", "list": [1, "two", null]}`,
    "kg_progress get");
  sc(pg, (x) => JSON.stringify(x.state) === JSON.stringify(state), "kg_progress get");
  const pn = await ok("kg_progress", { session_id: sid, task_id: `${prefix}-nothing`, level: "project" });
  says(pn, "No progress stored", "kg_progress get unset");
  sc(pn, (x) => x.state === null && x.level === "project", "kg_progress get unset");

  const de = await ok("kg_delete_edge", { session_id: sid, from: A, to: FILE, rel: "implemented-in" });
  says(de, `Deleted project edge ${A} -[implemented-in]-> ${FILE}`, "kg_delete_edge");
  sc(de, (x) => x.level === "project" && x.edge.from === A && x.edge.rel === "implemented-in", "kg_delete_edge");
  const dc = await ok("kg_delete_node", { session_id: sid, id: C });
  says(dc, `Deleted project node ${C} and 1 edge(s)`, "kg_delete_node C");
  sc(dc, (x) => x.level === "project" && x.id === C && x.edges_removed === 1, "kg_delete_node C");
  const db = await ok("kg_delete_node", { session_id: sid, id: B, level: "user" });
  says(db, `Deleted user node ${B} and 0 edge(s)`, "kg_delete_node B");
  sc(db, (x) => x.level === "user" && x.id === B && x.edges_removed === 0, "kg_delete_node B");

  // -- failures: tool results with isError, never JSON-RPC errors
  const failures = [];
  failures.push(await fails("kg_delete_node", { session_id: sid, id: `${prefix}-missing` }, `${prefix}-missing`));
  failures.push(await fails("kg_put_node", { session_id: sid, level: "galaxy", id: `${prefix}-x`, gist: "g" }));
  failures.push(await fails("kg_read", { session_id: "no-such-session" }));

  // -- the end state, as this session sees it
  const full = await ok("kg_read", { session_id: sid });
  says(full, `- ${A}: written by the TS SDK, merged`, "final project graph");
  check(!full.text.includes(`- ${C}:`) && !full.text.includes(`- ${B}:`), "final graphs lost B and C", full.text);
  check(!full.text.includes("Edges:"), "final graph has no edges", full.text);
  sc(full, (x) => x.project.nodes.map((n) => n.id).includes(A) && !x.project.nodes.map((n) => n.id).includes(C),
    "final project graph");
  sc(full, (x) => !x.user.nodes.map((n) => n.id).includes(B), "final user graph");
  sc(full, (x) => x.project.edges.length === 0, "final project edges");

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
    project_path: projectPath,
    structured: STRUCTURED,
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
