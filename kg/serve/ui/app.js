/*
 * The built-in graph viewer served at `GET /ui` (contract section 7), with index.html and app.css.
 *
 * No CDN, no build step, no external fetch, no inline script or style (kg/viewer.py sends one CSP); it talks only
 * to the same-origin daemon (`/api/projects`, `/api/graph`, `/api/search`, `/api/nodes/...` and the
 * `/ws` live feed). With `--token` the page asks for the token once, keeps it in localStorage, sends
 * it as `Authorization: Bearer` and as `?token=` on the WebSocket.
 *
 * The picture is drawn on a <canvas> (a few thousand nodes stay fluid), so the page mirrors what it
 * draws into the DOM for tests: `<ul id="kgd-drawn" hidden>` holds one `<li data-level data-id
 * data-state>` per node currently drawn (text = the id), `window.kgdDrawn` is the Set of
 * "level:id" strings, and `<html data-kgd-ready="1" data-kgd-ws="live|connecting|offline">`
 * says when the first graph load finished and how the live feed is doing. `window.kgdGeometry()`
 * tells where each island, node, label and floating card is on screen (the layout tests read it).
 * All data reaches the DOM through textContent / attributes, never innerHTML.
 */
(function () {
'use strict';

/* ------------------------------------------------------------------ helpers */
var $ = function (id) { return document.getElementById(id); };
function h(tag, props) {
  var e = document.createElement(tag);
  if (props) for (var k in props) {
    var v = props[k];
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = String(v);
    else if (k === 'dataset') { for (var d in v) e.dataset[d] = String(v[d]); }
    else if (k.slice(0, 2) === 'on') e.addEventListener(k.slice(2), v);
    else if (k === 'value') e.value = v;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (var i = 2; i < arguments.length; i++) {
    var c = arguments[i];
    if (c == null || c === false) continue;
    if (Array.isArray(c)) { c.forEach(function (x) { if (x != null && x !== false) e.append(x instanceof Node ? x : String(x)); }); }
    else e.append(c instanceof Node ? c : String(c));
  }
  return e;
}
function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); }
function enc(s) { return encodeURIComponent(s); }
var nf = new Intl.NumberFormat();
function cpLen(s) { var n = 0; for (var i = 0; i < s.length; i++) { var c = s.charCodeAt(i); if (c < 0xDC00 || c > 0xDFFF) n++; } return n; }
function trunc(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '…' : s; }
function baseName(p) { var parts = String(p).replace(/[\/\\]+$/, '').split(/[\/\\]/); return parts[parts.length - 1] || String(p); }
function looksLikePath(s) { return /[\/\\]/.test(s) || /\.[A-Za-z0-9]{1,8}$/.test(s); }
function nowS() { return Date.now() / 1000; }
function hashRand(str) { var x = 2166136261; for (var i = 0; i < str.length; i++) { x ^= str.charCodeAt(i); x = Math.imul(x, 16777619); } return ((x >>> 0) % 100000) / 100000; }
function clock() { return performance.now(); }
function hhmmss(d) { d = d || new Date(); function p(n) { return (n < 10 ? '0' : '') + n; } return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()); }
function ago(ts) {
  if (typeof ts !== 'number' || !isFinite(ts) || ts <= 0) return null;
  var s = Math.max(0, nowS() - ts), out;
  if (s < 60) out = 'just now';
  else if (s < 3600) out = Math.floor(s / 60) + ' min ago';
  else if (s < 86400) out = Math.floor(s / 3600) + ' h ago';
  else out = Math.floor(s / 86400) + ' days ago';
  return out + ' · ' + new Date(ts * 1000).toLocaleString();
}
function debounce(fn, ms) { var t = 0; return function () { var a = arguments, self = this; clearTimeout(t); t = setTimeout(function () { fn.apply(self, a); }, ms); }; }
function store(k, v) { try { if (v == null) localStorage.removeItem(k); else localStorage.setItem(k, v); } catch (e) {} }
function load(k) { try { return localStorage.getItem(k); } catch (e) { return null; } }
function plural(n, word) { return nf.format(n) + ' ' + word + (n === 1 ? '' : 's'); }
function levelName(level) { return level === 'project' ? 'project' : 'user'; }

/* -------------------------------------------------------------------- state */
var S = {
  project: null,           // project_path shown next to the user graph, or null
  projectCanon: null,      // the daemon's spelling of it (from /api/graph)
  projects: [],
  token: load('kgd.token') || '',
  graphs: { user: emptyGraph(), project: null },
  show: { archived: true, orphaned: false, files: true },
  selected: null,          // {kind:'node'|'file', level, id}
  panelMode: 'view',       // 'view' | 'edit' | 'confirm'
  panelData: null,         // last fetched node (with edges) for the panel
  panelNote: null,         // banner in the panel
  hover: null,
  marks: new Map(),        // visKey -> {kind:'new'|'flash', t}
  ghosts: [],              // deleted nodes fading out
  searchHits: new Set(),
  searchSeq: 0,
  loadSeq: 0,
  loading: true,
  loadedOnce: false,
  loadError: null,
  pending: [],
  autoFit: true
};
function emptyGraph() { return { nodes: new Map(), edges: new Map(), tokens: 0, max_tokens: 0 }; }
function ekey(e) { return e.from + '\u0000' + e.to + '\u0000' + e.rel; }
function strList(v) { return Array.isArray(v) ? v.map(function (x) { return String(x); }) : (typeof v === 'string' ? [v] : []); }
function normNode(n) {
  var st = n.state === 'archived' || n.state === 'orphaned' ? n.state : 'active';
  return { id: String(n.id), gist: n.gist == null ? '' : String(n.gist), notes: strList(n.notes), touches: strList(n.touches), state: st,
           created_ts: typeof n.created_ts === 'number' ? n.created_ts : null, updated_ts: typeof n.updated_ts === 'number' ? n.updated_ts : null,
           stale: staleOf(n.stale), uncommitted: n.uncommitted === true, private: n.private === true,
           unpublished: n.unpublished === true, by: typeof n.by === 'string' ? n.by : null };
}
/* Contract 12: the touched code changed since the node was written ({mark, files}); null when current. */
function staleOf(s) { return s && typeof s === 'object' && typeof s.mark === 'string' ? { mark: s.mark, files: Array.isArray(s.files) ? s.files : [] } : null; }
/* Marks a person reads on a node: stale (contract 12), not yet committed / private / not published
   (contract 9: the last two are personal, never "not committed"). [class, text, title] each. */
function markChips(n) {
  var out = [];
  if (n.stale) out.push(['stale', 'stale', n.stale.mark + ' (a put marks it current)']);
  if (n.uncommitted) out.push(['uncommitted', 'not committed', 'Changed here and not yet committed: git add .kg && git commit publishes it (kgd diff lists it)']);
  if (n.private) out.push(['personal', 'private', 'Private: never written to the repository']);
  else if (n.unpublished) out.push(['personal', 'not published', 'Yours from before the repository shared this graph: kgd share publishes it']);
  return out.map(function (c) { return h('span', { class: 'chip mk-' + c[0], title: c[2], text: c[1] }); });
}
function pendingCount(G) {
  var u = G && G.sharing && G.sharing.uncommitted;
  return u && typeof u === 'object' ? (+u.nodes || 0) + (+u.deleted || 0) + (+u.edges || 0) : 0;
}
function normEdge(e) { return { from: String(e.from), to: String(e.to), rel: e.rel == null ? '' : String(e.rel), notes: strList(e.notes) }; }
function toGraph(g) {
  if (!g) return null;
  var G = emptyGraph();
  (g.nodes || []).forEach(function (n) { if (n && n.id != null) { var x = normNode(n); G.nodes.set(x.id, x); } });
  (g.edges || []).forEach(function (e) { if (e && e.from != null && e.to != null) { var x = normEdge(e); G.edges.set(ekey(x), x); } });
  G.tokens = +g.tokens || 0; G.max_tokens = +g.max_tokens || 0;
  G.sharing = g.sharing && typeof g.sharing === 'object' ? g.sharing : null;
  return G;
}
/* Contract section 5: the same estimate the daemon keeps, so live changes move the bar. */
function estimate(G) {
  var t = 0;
  G.nodes.forEach(function (n) {
    if (n.state !== 'active') return;
    var s = cpLen(n.gist); for (var i = 0; i < n.notes.length; i++) s += cpLen(n.notes[i]);
    t += 20 + Math.floor(s / 4);
  });
  G.edges.forEach(function (e) {
    var a = G.nodes.get(e.from), b = G.nodes.get(e.to);
    if (!a || a.state === 'active' || !b || b.state === 'active') t += 15;
  });
  return t;
}
function levels() { return S.graphs.project ? ['user', 'project'] : ['user']; }
function graphOf(level) { return level === 'project' ? S.graphs.project : S.graphs.user; }
function sameProject(p) { return p != null && (p === S.project || p === S.projectCanon); }

/* ------------------------------------------------------------------- colors */
var C = {};
function readColors() {
  var cs = getComputedStyle(document.documentElement);
  ['bg', 'bg2', 'text', 'muted', 'faint', 'border', 'user', 'project', 'file', 'accent', 'ok', 'warn', 'danger', 'hl', 'canvas'].forEach(function (k) {
    C[k] = cs.getPropertyValue('--' + k).trim() || '#888';
  });
  C.dark = isDark();
}
function isDark() {
  var t = document.documentElement.dataset.theme;
  if (t === 'dark') return true; if (t === 'light') return false;
  return window.matchMedia && matchMedia('(prefers-color-scheme: dark)').matches;
}
function levelColor(level) { return level === 'project' ? C.project : C.user; }

/* ------------------------------------------------------------------- api */
function ApiError(message, status) { this.message = message; this.status = status; }
var authWaiter = null;
function askToken(again) {
  if (authWaiter) return authWaiter.promise;
  var box = $('auth'), err = $('autherr'), input = $('authtoken');
  box.hidden = false;
  err.hidden = !again; err.textContent = again ? 'That token was refused. Check the value given to --token / KG_TOKEN.' : '';
  input.value = ''; setTimeout(function () { input.focus(); }, 0);
  var w = {}; w.promise = new Promise(function (res) { w.resolve = res; });
  authWaiter = w;
  return w.promise;
}
$('authform').addEventListener('submit', function (ev) {
  ev.preventDefault();
  var v = $('authtoken').value.trim();
  if (!v) return;
  S.token = v; store('kgd.token', v);
  $('auth').hidden = true;
  var w = authWaiter; authWaiter = null;
  if (w) w.resolve();
  wsConnect(true);
});
async function api(path, opts) {
  opts = opts || {};
  for (var attempt = 0; attempt < 6; attempt++) {
    var headers = { 'Accept': 'application/json' };
    if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
    if (S.token) headers['Authorization'] = 'Bearer ' + S.token;
    var res;
    try {
      res = await fetch(path, { method: opts.method || 'GET', headers: headers, cache: 'no-store',
                                body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined });
    } catch (e) {
      throw new ApiError('Cannot reach the kgd daemon at ' + location.host + '. Is it running?', 0);
    }
    if (res.status === 401) { await askToken(attempt > 0 || !!S.token); continue; }
    var text = await res.text(), data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!res.ok) throw new ApiError((data && typeof data.error === 'string' && data.error) || ('Request failed: HTTP ' + res.status + ' ' + res.statusText), res.status);
    return data;
  }
  throw new ApiError('Not authorized.', 401);
}
function pq(first) { return S.project ? (first ? '?' : '&') + 'project_path=' + enc(S.project) : ''; }
function nodeUrl(level, id) { return '/api/nodes/' + enc(level) + '/' + enc(id); }

/* ------------------------------------------------------------------ toasts */
function toast(msg, kind) {
  kind = kind || 'info';
  var t = h('div', { class: 'toast card ' + kind, role: kind === 'error' ? 'alert' : 'status' },
    kind === 'error' ? h('b', { text: 'Error' }) : (kind === 'ok' ? h('b', { text: '✓' }) : null), h('span', { text: msg }));
  $('toasts').append(t);
  setTimeout(function () { t.style.transition = 'opacity .3s'; t.style.opacity = '0'; setTimeout(function () { t.remove(); }, 320); }, kind === 'error' ? 6500 : 2800);
}

/* ------------------------------------------------------------ activity log */
var logCount = 0, unread = 0, logClosed = load('kgd.logClosed') === '1';
function logEvent(verb, cls, level, what, target) {
  var list = $('loglist');
  var first = list.firstChild;
  if (first && first.classList && first.classList.contains('empty')) first.remove();
  var whatEl = target
    ? h('button', { class: 'what mono', title: what, text: what, onclick: function () { openTarget(target); } })
    : h('span', { class: 'what', title: what, text: what });
  var li = h('li', null, h('time', { text: hhmmss() }), h('span', { class: 'verb ' + cls, text: verb }),
    level ? h('span', { class: 'chip lv-' + level, text: level }) : null, whatEl);
  list.prepend(li);
  while (list.childNodes.length > 200) list.lastChild.remove();
  logCount++;
  $('logn').textContent = String(logCount);
  if (logClosed) { unread++; $('logbadge').hidden = false; $('logbadge').textContent = String(unread); }
}
function setLogClosed(v) {
  logClosed = v; store('kgd.logClosed', v ? '1' : '0');
  $('log').classList.toggle('closed', v);
  $('logtoggle').textContent = v ? '▴' : '▾';
  $('logtoggle').title = v ? 'Expand' : 'Collapse';
  if (!v) { unread = 0; $('logbadge').hidden = true; }
}
$('loghead').addEventListener('click', function () { setLogClosed(!logClosed); });
setLogClosed(logClosed);
function openTarget(t) {
  if (t.kind === 'file') openFile(t.level, t.id);
  else openNode(t.level, t.id, { focus: true });
}

/* ------------------------------------------------------------ visual model */
/* V.nodes: what is drawn. Each entry keeps its position across rebuilds (keyed by level+id). */
var V = { nodes: [], byKey: new Map(), links: [], order: [], bounds: {}, hidden: { archived: 0, orphaned: 0 } };
function nkey(level, id) { return 'n\u0001' + level + '\u0001' + id; }
function fkey(level, p) { return 'f\u0001' + level + '\u0001' + p; }
function visible(state) { return state === 'active' || (state === 'archived' && S.show.archived) || (state === 'orphaned' && S.show.orphaned); }
function radius(v) {
  if (v.kind === 'file') return 4.2;
  var r = 5.5 + Math.min(8, Math.sqrt(v.deg) * 1.7);
  return v.data.state === 'orphaned' ? r * 0.8 : r;
}
var centers = { user: { x: 0, y: 0 }, project: { x: 0, y: 0 } };
/* With a project shown, the user level lives before -SEP and the project level after +SEP on
   one axis (world units): side by side (x) in a wide view, one above the other (y) in a narrow
   one, so each island gets the view's width for its labels. Each island is drawn ISLAND_PAD
   round its nodes, so SEP > ISLAND_PAD keeps the islands apart whatever the forces,
   cross-level edges or drags do. */
var ISLAND_PAD = 34, SEP = ISLAND_PAD + 22, axis = 'x';
function confine(v) {
  if (!S.graphs.project) return;
  var p = axis === 'x' ? 'x' : 'y', vp = 'v' + p;
  if (v.level === 'user') { if (v[p] > -SEP) { v[p] = -SEP; if (v[vp] > 0) v[vp] = 0; } }
  else if (v[p] < SEP) { v[p] = SEP; if (v[vp] < 0) v[vp] = 0; }
}
function pickAxis() {
  var a = viewArea();
  return (a.x1 - a.x0) >= 0.85 * (a.y1 - a.y0) ? 'x' : 'y';
}
function computeCenters(counts) {
  axis = pickAxis();
  if (!S.graphs.project) { centers = { user: { x: 0, y: 0 }, project: { x: 0, y: 0 } }; return; }
  var ru = 26 * Math.sqrt(counts.user + 1) + 70, rp = 26 * Math.sqrt(counts.project + 1) + 70;
  centers = axis === 'x' ? { user: { x: -(ru + 50), y: 0 }, project: { x: rp + 50, y: 0 } }
                         : { user: { x: 0, y: -(ru * 0.7 + 50) }, project: { x: 0, y: rp * 0.7 + 50 } };
}
var rebuildQueued = false;
function scheduleRebuild() {
  if (rebuildQueued) return;
  rebuildQueued = true;
  // Small graphs rebuild at once; big ones coalesce a burst of live events into one rebuild.
  var run = function () { rebuildQueued = false; rebuild(true); };
  if (V.nodes.length > 800) setTimeout(run, 40); else Promise.resolve().then(run);
}
function rebuild(live) {
  var tb = clock();
  var keep = V.byKey, next = new Map(), nodes = [], counts = { user: 0, project: 0 }, hidden = { archived: 0, orphaned: 0 };
  var lv = levels();
  lv.forEach(function (level) {
    graphOf(level).nodes.forEach(function (n) {
      if (!visible(n.state)) { hidden[n.state]++; return; }
      var k = nkey(level, n.id), v = keep.get(k);
      if (!v) v = { key: k, kind: 'node', level: level, id: n.id, x: NaN, y: NaN, vx: 0, vy: 0, fx: null, fy: null };
      v.data = n; v.deg = 0; v.nb = null;
      next.set(k, v); nodes.push(v); counts[level]++;
    });
  });
  var links = [];
  function end(level, G, otherLevel, id) {
    if (G.nodes.has(id)) return next.get(nkey(level, id)) || null;
    var O = otherLevel && graphOf(otherLevel);
    if (O && O.nodes.has(id) && !looksLikePath(id)) return next.get(nkey(otherLevel, id)) || null;
    if (!S.show.files) return null;
    var k = fkey(level, id), v = next.get(k);
    if (!v) {
      v = keep.get(k) || { key: k, kind: 'file', level: level, id: id, x: NaN, y: NaN, vx: 0, vy: 0, fx: null, fy: null };
      v.deg = 0; v.data = null; next.set(k, v); nodes.push(v);
    }
    return v;
  }
  lv.forEach(function (level) {
    var G = graphOf(level), other = level === 'user' ? (S.graphs.project ? 'project' : null) : 'user';
    G.edges.forEach(function (e) {
      var s = end(level, G, other, e.from); if (!s) return;
      var t = end(level, G, other, e.to); if (!t || s === t) return;
      if (s.kind === 'file' && t.kind === 'file') return;
      links.push({ s: s, t: t, e: e, level: level, cross: s.level !== t.level });
      s.deg++; t.deg++;
    });
  });
  // File markers that lost every edge (e.g. their node got hidden) are dropped.
  nodes = nodes.filter(function (v) { return v.kind === 'node' || v.deg > 0; });
  computeCenters(counts);
  placeNew(nodes, links);
  var fresh = nodes.filter(function (v) { return !keep.has(v.key); }).length;
  var gone = 0; keep.forEach(function (v, k) { if (!next.has(k)) gone++; });
  V.nodes = nodes; V.links = links; V.hidden = hidden;
  V.byKey = new Map(); nodes.forEach(function (v) { V.byKey.set(v.key, v); });
  V.order = nodes.slice().sort(function (a, b) { return (b.kind === 'node') - (a.kind === 'node') || b.deg - a.deg; });
  if (S.hover && !V.byKey.has(S.hover.key)) S.hover = null;
  if (live && (fresh || gone)) reheat(nodes.length > 1500 ? 0.12 : 0.35);
  else if (live) kick();
  syncDrawn();
  renderHud();
  updateEmpty();
  stats.rebuildMs = clock() - tb;
}
function placeNew(nodes, links) {
  var adj = new Map();
  links.forEach(function (l) {
    if (isNaN(l.s.x) !== isNaN(l.t.x)) {
      var a = isNaN(l.s.x) ? l.s : l.t, b = a === l.s ? l.t : l.s;
      if (!adj.has(a)) adj.set(a, b);
    }
  });
  var idx = { user: 0, project: 0 }, golden = Math.PI * (3 - Math.sqrt(5));
  // Nodes with a placed neighbour start next to it; the rest start on a spiral round their level.
  for (var pass = 0; pass < 2; pass++) {
    nodes.forEach(function (v) {
      if (!isNaN(v.x)) return;
      var nb = adj.get(v);
      if (nb && !isNaN(nb.x)) {
        var a = hashRand(v.key) * 6.283;
        v.x = nb.x + Math.cos(a) * 28; v.y = nb.y + Math.sin(a) * 28; confine(v); return;
      }
      if (pass === 0 && v.kind === 'file') return;
      var c = centers[v.level] || { x: 0, y: 0 }, i = idx[v.level]++;
      var r = 16 * Math.sqrt(0.5 + i), ang = i * golden;
      v.x = c.x + r * Math.cos(ang); v.y = c.y + r * Math.sin(ang); confine(v);
    });
    links.forEach(function (l) {
      if (isNaN(l.s.x) && !isNaN(l.t.x)) adj.set(l.s, l.t);
      if (isNaN(l.t.x) && !isNaN(l.s.x)) adj.set(l.t, l.s);
    });
  }
}

/* The hidden mirror of what is drawn, for tests and assistive tech. */
var drawnEl = $('kgd-drawn'), drawnLis = new Map();
window.kgdDrawn = new Set();
function syncDrawn() {
  var seen = new Set();
  V.nodes.forEach(function (v) {
    if (v.kind !== 'node') return;
    var k = v.level + ':' + v.id; seen.add(k);
    var li = drawnLis.get(k);
    if (!li) {
      li = document.createElement('li');
      li.dataset.level = v.level; li.dataset.id = v.id; li.textContent = v.id;
      drawnEl.appendChild(li); drawnLis.set(k, li);
    }
    if (li.dataset.state !== v.data.state) li.dataset.state = v.data.state;
    var mk = (v.data.stale ? 'stale' : '') + (v.data.stale && v.data.uncommitted ? ' ' : '') + (v.data.uncommitted ? 'uncommitted' : '');
    if ((li.dataset.marks || '') !== mk) li.dataset.marks = mk;
  });
  drawnLis.forEach(function (li, k) { if (!seen.has(k)) { li.remove(); drawnLis.delete(k); } });
  window.kgdDrawn = seen;
  drawnEl.dataset.count = String(seen.size);
}

/* Where things are on screen, for tests: each level's island, each node with its label box,
   and the cards over the canvas (all in canvas pixels). */
window.kgdGeometry = function () {
  var nodes = V.nodes.map(function (v) {
    return { key: v.key, level: v.level, kind: v.kind, x: sx(v.x), y: sy(v.y), r: radius(v) * cam.k,
             label: (V.labels && V.labels.get(v.key)) || null };
  });
  return { width: W, height: H, regions: V.regions || {}, nodes: nodes, overlays: overlayRects(), frames: stats.frames };
};

/* ------------------------------------------------------------ force layout */
/* d3-force style: many-body repulsion (Barnes-Hut), springs, a pull towards each level's
   centre. Alpha cools to a stop, a frame spends at most ~12 ms on ticks, and a heat never
   runs more than a bounded number of ticks, so big graphs settle and then cost nothing. */
var sim = { alpha: 0, alphaMin: 0.003, alphaDecay: 0.02, alphaTarget: 0, ticks: 0, maxTicks: 500 };
function reheat(a) {
  var n = V.nodes.length;
  sim.alphaDecay = n > 2000 ? 0.045 : n > 800 ? 0.03 : 0.02;
  sim.maxTicks = n > 2000 ? 160 : n > 800 ? 260 : 500;
  if (sim.alpha < a) sim.alpha = a;
  sim.ticks = 0;
  kick();
}
function charge(v) { return v.kind === 'file' ? -40 : (v.data.state === 'active' ? -150 : -90); }
function bhBuild(ns) {
  var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity, i, n;
  for (i = 0; i < ns.length; i++) { n = ns[i]; if (n.x < x0) x0 = n.x; if (n.y < y0) y0 = n.y; if (n.x > x1) x1 = n.x; if (n.y > y1) y1 = n.y; }
  var root = { x: x0, y: y0, s: Math.max(x1 - x0, y1 - y0) + 1, body: null, more: null, kids: null, m: 0, cx: 0, cy: 0 };
  for (i = 0; i < ns.length; i++) bhInsert(root, ns[i], 0);
  bhSum(root);
  return root;
}
function bhInsert(c, n, depth) {
  for (;;) {
    if (!c.kids) {
      if (!c.body) { c.body = n; return; }
      if (depth > 28) { (c.more || (c.more = [])).push(n); return; }
      var b = c.body; c.body = null; c.kids = [null, null, null, null];
      bhChild(c, b).body = b;
    }
    c = bhChild(c, n); depth++;
    if (!c.kids && !c.body) { c.body = n; return; }
  }
}
function bhChild(c, n) {
  var hs = c.s / 2, i = (n.x >= c.x + hs ? 1 : 0) + (n.y >= c.y + hs ? 2 : 0), k = c.kids[i];
  if (!k) k = c.kids[i] = { x: c.x + (i & 1 ? hs : 0), y: c.y + (i & 2 ? hs : 0), s: hs, body: null, more: null, kids: null, m: 0, cx: 0, cy: 0 };
  return k;
}
function bhSum(c) {
  var m = 0, x = 0, y = 0, w, i;
  if (c.kids) {
    for (i = 0; i < 4; i++) { var k = c.kids[i]; if (!k) continue; bhSum(k); w = Math.abs(k.m); m += k.m; x += k.cx * w; y += k.cy * w; }
    var tw = 0; for (i = 0; i < 4; i++) if (c.kids[i]) tw += Math.abs(c.kids[i].m);
    c.m = m; c.cx = tw ? x / tw : c.x; c.cy = tw ? y / tw : c.y; return;
  }
  var all = c.more ? [c.body].concat(c.more) : [c.body];
  for (i = 0; i < all.length; i++) { var q = charge(all[i]); w = Math.abs(q); m += q; x += all[i].x * w; y += all[i].y * w; }
  var aw = Math.abs(m) || 1; c.m = m; c.cx = x / aw; c.cy = y / aw;
}
var THETA2 = 0.81, DMAX2 = 520 * 520, stack = [];
function bhApply(root, n, alpha) {
  stack.length = 0; stack.push(root);
  while (stack.length) {
    var c = stack.pop(), dx = c.cx - n.x, dy = c.cy - n.y, d2 = dx * dx + dy * dy;
    if (c.kids) {
      if (c.s * c.s / THETA2 < d2) { if (d2 < DMAX2) { n.vx += dx * c.m * alpha / d2; n.vy += dy * c.m * alpha / d2; } continue; }
      for (var i = 0; i < 4; i++) if (c.kids[i]) stack.push(c.kids[i]);
      continue;
    }
    var bodies = c.more ? [c.body].concat(c.more) : [c.body];
    for (var j = 0; j < bodies.length; j++) {
      var b = bodies[j]; if (b === n) continue;
      dx = b.x - n.x; dy = b.y - n.y;
      if (dx === 0 && dy === 0) { dx = (Math.random() - 0.5) * 1e-2; dy = (Math.random() - 0.5) * 1e-2; }
      d2 = dx * dx + dy * dy; if (d2 >= DMAX2) continue;
      if (d2 < 25) d2 = Math.sqrt(25 * d2);
      var q = charge(b) * alpha / d2;
      n.vx += dx * q; n.vy += dy * q;
    }
  }
}
function tick() {
  var ns = V.nodes, alpha = sim.alpha, i, n;
  if (ns.length > 1) { var root = bhBuild(ns); for (i = 0; i < ns.length; i++) bhApply(root, ns[i], alpha); }
  var ls = V.links;
  for (i = 0; i < ls.length; i++) {
    var l = ls[i], s = l.s, t = l.t;
    var x = t.x + t.vx - s.x - s.vx, y = t.y + t.vy - s.y - s.vy, d = Math.sqrt(x * x + y * y) || 1e-3;
    var dist = (s.kind === 'file' || t.kind === 'file') ? 34 : (l.cross ? 110 : 58);
    var strength = (l.cross ? 0.25 : 1) / Math.max(1, Math.min(s.deg, t.deg));
    var f = (d - dist) / d * alpha * strength, bias = s.deg / (s.deg + t.deg);
    x *= f; y *= f;
    t.vx -= x * bias; t.vy -= y * bias; s.vx += x * (1 - bias); s.vy += y * (1 - bias);
  }
  for (i = 0; i < ns.length; i++) {
    n = ns[i];
    var c = centers[n.level] || centers.user, k = n.kind === 'file' ? 0.015 : 0.045;
    n.vx += (c.x - n.x) * k * alpha; n.vy += (c.y - n.y) * k * alpha;
  }
  for (i = 0; i < ns.length; i++) {
    n = ns[i];
    if (n.fx != null) { n.x = n.fx; n.y = n.fy; n.vx = 0; n.vy = 0; confine(n); n.fx = n.x; continue; }
    n.vx *= 0.6; n.vy *= 0.6;
    if (n.vx > 60) n.vx = 60; else if (n.vx < -60) n.vx = -60;
    if (n.vy > 60) n.vy = 60; else if (n.vy < -60) n.vy = -60;
    n.x += n.vx; n.y += n.vy;
    confine(n);
  }
  sim.alpha += (sim.alphaTarget - sim.alpha) * sim.alphaDecay;
  sim.ticks++;
}
function simRunning() { return (sim.alpha > sim.alphaMin || sim.alphaTarget > 0) && sim.ticks < sim.maxTicks && V.nodes.length > 0; }
function prerun(ms) { var t0 = clock(); while (simRunning() && clock() - t0 < ms) tick(); }

/* ----------------------------------------------------------------- camera */
var canvas = $('graph'), ctx = canvas.getContext('2d'), dpr = 1, W = 0, H = 0;
var cam = { x: 0, y: 0, k: 1 }, camAnim = null;
function resize() {
  var r = canvas.getBoundingClientRect();
  dpr = Math.min(window.devicePixelRatio || 1, 2.5);
  W = Math.max(1, r.width); H = Math.max(1, r.height);
  canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
  if (S.loadedOnce && S.graphs.project && pickAxis() !== axis) {   // the islands turn with the view
    var counts = { user: 0, project: 0 };
    V.nodes.forEach(function (v) { if (v.kind === 'node') counts[v.level]++; });
    computeCenters(counts); V.nodes.forEach(confine); S.autoFit = true; reheat(0.5);
  }
  kick();
}
function toWorld(sx, sy) { return { x: (sx - cam.x) / cam.k, y: (sy - cam.y) / cam.k }; }
function viewArea() {
  var left = 0, right = W, hud = $('hud');
  if (!$('panel').hidden && W > 640) right = W - $('panel').offsetWidth - 28;
  var hw = hud.offsetParent ? hud.offsetLeft + hud.offsetWidth + 10 : 0;     // leave room for the budget card
  if (right - hw >= 420) left = hw;
  if (right - left < 300) { left = 0; right = W; }
  var bottom = H, log = $('log');
  // The activity card sits bottom-left: keep nodes above it where it reaches into the area.
  if (log.offsetParent && log.offsetLeft + log.offsetWidth > left && log.offsetTop > H / 2) bottom = log.offsetTop - 6;
  return { x0: left, x1: right, y0: 0, y1: bottom };
}
/* The cards floating over the canvas, in canvas pixels: labels are not placed under them. */
function overlayRects() {
  var out = [];
  ['hud', 'log', 'zoom', 'panel', 'tip'].forEach(function (id) {
    var el = $(id);
    if (!el || el.hidden || !el.offsetParent) return;
    out.push([el.offsetLeft, el.offsetTop, el.offsetWidth, el.offsetHeight]);
  });
  return out;
}
function fitTarget() {
  var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  V.nodes.forEach(function (v) { if (v.x < x0) x0 = v.x; if (v.y < y0) y0 = v.y; if (v.x > x1) x1 = v.x; if (v.y > y1) y1 = v.y; });
  if (!isFinite(x0)) return { x: W / 2, y: H / 2, k: 1 };
  var a = viewArea(), padL = 50, padR = 120, padY = 64;    // screen pixels; labels prefer the right of nodes
  var aw = Math.max(120, a.x1 - a.x0 - padL - padR), ah = Math.max(120, a.y1 - a.y0 - 2 * padY);
  var k = Math.min(aw / Math.max(1, x1 - x0), ah / Math.max(1, y1 - y0), 1.6);
  k = Math.max(0.04, k);
  var cxs = a.x0 + padL + aw / 2, cys = a.y0 + padY + ah / 2;
  return { k: k, x: cxs - (x0 + x1) / 2 * k, y: cys - (y0 + y1) / 2 * k };
}
function animateCam(to, ms) { camAnim = { from: { x: cam.x, y: cam.y, k: cam.k }, to: to, t0: clock(), ms: ms || 450 }; kick(); }
function camStep() {
  if (!camAnim) return false;
  var p = Math.min(1, (clock() - camAnim.t0) / camAnim.ms), e = 1 - Math.pow(1 - p, 3), f = camAnim.from, t = camAnim.to;
  cam.k = f.k * Math.pow(t.k / f.k, e);
  cam.x = f.x + (t.x - f.x) * e; cam.y = f.y + (t.y - f.y) * e;
  if (p >= 1) { camAnim = null; return false; }
  return true;
}
function fitNow(animated) { S.autoFit = false; var t = fitTarget(); if (animated) animateCam(t, 500); else { cam.x = t.x; cam.y = t.y; cam.k = t.k; kick(); } }
function zoomAt(sx, sy, factor) {
  var k = Math.max(0.03, Math.min(8, cam.k * factor)); factor = k / cam.k;
  cam.x = sx - (sx - cam.x) * factor; cam.y = sy - (sy - cam.y) * factor; cam.k = k;
  S.autoFit = false; camAnim = null; kick();
}
function ensureVisible(v) {
  var a = viewArea(), x = sx(v.x), y = sy(v.y), m = 60, dx = 0, dy = 0;
  if (x > a.x1 - m) dx = a.x1 - m - x - 80; else if (x < a.x0 + m) dx = a.x0 + m - x + 40;
  if (y > a.y1 - m) dy = a.y1 - m - y; else if (y < a.y0 + m) dy = a.y0 + m - y;
  if (dx || dy) animateCam({ k: cam.k, x: cam.x + dx, y: cam.y + dy }, 380);
}
function focusOn(v) {
  if (!v) return;
  S.autoFit = false;
  var a = viewArea(), k = Math.max(cam.k, 1.15);
  animateCam({ k: k, x: (a.x0 + a.x1) / 2 - v.x * k, y: (a.y0 + a.y1) / 2 - v.y * k }, 520);
}

/* ---------------------------------------------------------------- drawing */
var raf = 0, stats = { tickMs: 0, drawMs: 0, frames: 0, ticks: 0 };
function kick() { if (!raf) raf = requestAnimationFrame(frame); }
function frame() {
  raf = 0;
  var busy = false;
  var t0 = clock();
  if (simRunning()) {
    var n = 0;
    do { tick(); n++; } while (simRunning() && n < 4 && clock() - t0 < 10);
    busy = true;
    if (!simRunning()) sim.alpha = 0;
    stats.tickMs = (clock() - t0) / n; stats.ticks += n;
  }
  if (S.autoFit && V.nodes.length) {
    var t = fitTarget(), q = busy ? 0.2 : 1;
    cam.k += (t.k - cam.k) * q; cam.x += (t.x - cam.x) * q; cam.y += (t.y - cam.y) * q;
    if (!busy) S.autoFit = false;      // only while the first layout settles
  }
  if (camStep()) busy = true;
  var now = clock();
  S.marks.forEach(function (m, k) { if (now - m.t > (m.kind === 'new' ? 3200 : 1400)) S.marks.delete(k); });
  S.ghosts = S.ghosts.filter(function (g) { return now - g.t < 900; });
  if (S.marks.size || S.ghosts.length) busy = true;
  var t1 = clock();
  draw(now);
  stats.drawMs = clock() - t1; stats.frames++;
  if (busy) kick();
}
function roundRect(c, x, y, w, hh, r) {
  c.moveTo(x + r, y); c.lineTo(x + w - r, y); c.quadraticCurveTo(x + w, y, x + w, y + r);
  c.lineTo(x + w, y + hh - r); c.quadraticCurveTo(x + w, y + hh, x + w - r, y + hh);
  c.lineTo(x + r, y + hh); c.quadraticCurveTo(x, y + hh, x, y + hh - r);
  c.lineTo(x, y + r); c.quadraticCurveTo(x, y, x + r, y); c.closePath();
}
function alpha(color, a) {
  if (color.charAt(0) === '#' && (color.length === 7 || color.length === 4)) {
    var c = color.length === 4 ? '#' + color[1] + color[1] + color[2] + color[2] + color[3] + color[3] : color;
    return 'rgba(' + parseInt(c.slice(1, 3), 16) + ',' + parseInt(c.slice(3, 5), 16) + ',' + parseInt(c.slice(5, 7), 16) + ',' + a + ')';
  }
  return color;
}
function neighbourhood() {
  var sel = S.selected && V.byKey.get(S.selected.kind === 'file' ? fkey(S.selected.level, S.selected.id) : nkey(S.selected.level, S.selected.id));
  var hov = S.hover;
  var focus = sel || hov;
  var set = new Set(), links = [];
  if (focus) {
    set.add(focus);
    V.links.forEach(function (l) { if (l.s === focus || l.t === focus) { links.push(l); set.add(l.s); set.add(l.t); } });
  }
  return { sel: sel, hov: hov, focus: focus, set: set, links: links };
}
function draw(now) {
  var k = cam.k;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.fillStyle = C.canvas; ctx.fillRect(0, 0, W, H);
  if (!V.nodes.length) return;
  var x0 = -cam.x / k, y0 = -cam.y / k, x1 = (W - cam.x) / k, y1 = (H - cam.y) / k, m = 40 / k;
  function onScreen(v, r) { return v.x + r > x0 - m && v.x - r < x1 + m && v.y + r > y0 - m && v.y - r < y1 + m; }
  var nb = neighbourhood(), dim = !!nb.focus && !!nb.sel;
  ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * cam.x, dpr * cam.y);

  /* level islands */
  var boxes = {};
  V.nodes.forEach(function (v) {
    var b = boxes[v.level] || (boxes[v.level] = { x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity, n: 0 });
    if (v.x < b.x0) b.x0 = v.x; if (v.y < b.y0) b.y0 = v.y; if (v.x > b.x1) b.x1 = v.x; if (v.y > b.y1) b.y1 = v.y;
    if (v.kind === 'node') b.n++;
  });
  V.bounds = boxes;
  var pad = ISLAND_PAD;
  V.regions = {};
  levels().forEach(function (level) {
    var b = boxes[level]; if (!b || !b.n) return;
    V.regions[level] = { x0: sx(b.x0 - pad), y0: sy(b.y0 - pad - 14 / k), x1: sx(b.x1 + pad), y1: sy(b.y1 + pad) };
    ctx.beginPath();
    roundRect(ctx, b.x0 - pad, b.y0 - pad - 14 / k, b.x1 - b.x0 + 2 * pad, b.y1 - b.y0 + 2 * pad + 14 / k, Math.min(28, pad));
    ctx.fillStyle = alpha(levelColor(level), C.dark ? 0.045 : 0.05); ctx.fill();
    ctx.strokeStyle = alpha(levelColor(level), 0.22); ctx.lineWidth = 1 / k; ctx.setLineDash([6 / k, 5 / k]); ctx.stroke(); ctx.setLineDash([]);
  });

  /* links, batched by style */
  var lw = Math.max(0.6, Math.min(1.4, 1.1 * Math.sqrt(k))) / k;
  var groups = {};
  var arrows = k > 0.55 && V.links.length < 2500;
  V.links.forEach(function (l) {
    var s = l.s, t = l.t;
    if ((s.x < x0 && t.x < x0) || (s.x > x1 && t.x > x1) || (s.y < y0 && t.y < y0) || (s.y > y1 && t.y > y1)) return;
    var faint = (s.kind === 'node' && s.data.state !== 'active') || (t.kind === 'node' && t.data.state !== 'active');
    var key = (l.cross ? 'x' : (s.kind === 'file' || t.kind === 'file') ? 'f' : l.level) + (faint ? '~' : '');
    (groups[key] || (groups[key] = [])).push(l);
  });
  Object.keys(groups).forEach(function (key) {
    var base = key.charAt(0), faint = key.length > 1;
    var col = base === 'x' ? C.accent : base === 'f' ? C.file : levelColor(base === 'p' ? 'project' : 'user');
    var a = (base === 'f' ? 0.38 : (C.dark ? 0.5 : 0.42)) * (faint ? 0.45 : 1) * (dim ? 0.35 : 1);
    ctx.strokeStyle = alpha(col, a); ctx.fillStyle = alpha(col, Math.min(1, a * 1.4)); ctx.lineWidth = lw;
    if (base === 'x') ctx.setLineDash([5 / k, 4 / k]);
    ctx.beginPath();
    groups[key].forEach(function (l) { ctx.moveTo(l.s.x, l.s.y); ctx.lineTo(l.t.x, l.t.y); });
    ctx.stroke(); ctx.setLineDash([]);
    if (arrows) { ctx.beginPath(); groups[key].forEach(function (l) { arrowHead(l, 5 / Math.max(k, 0.8)); }); ctx.fill(); }
  });
  if (nb.links.length) {
    ctx.lineWidth = 2 / k;
    nb.links.forEach(function (l) {
      var col = l.cross ? C.accent : (l.s.kind === 'file' || l.t.kind === 'file') ? C.file : levelColor(l.level);
      ctx.strokeStyle = alpha(col, 0.95); ctx.fillStyle = alpha(col, 0.95);
      ctx.beginPath(); ctx.moveTo(l.s.x, l.s.y); ctx.lineTo(l.t.x, l.t.y); ctx.stroke();
      ctx.beginPath(); arrowHead(l, 6.5 / Math.max(k, 0.8)); ctx.fill();
    });
  }

  /* nodes, batched by style */
  var bat = {};
  function put(key, v, r) { (bat[key] || (bat[key] = [])).push([v, r]); }
  var drawnOnScreen = 0, marked = { stale: [], pending: [] };
  for (var i = 0; i < V.nodes.length; i++) {
    var v = V.nodes[i], r = radius(v);
    if (!onScreen(v, r)) continue;
    drawnOnScreen++;
    var d = dim && !nb.set.has(v) ? '~' : '';
    if (v.kind === 'file') put('file' + d, v, r);
    else {
      put(v.data.state + ':' + v.level + d, v, r);
      if (v.data.stale) marked.stale.push([v, r]);
      if (v.data.uncommitted) marked.pending.push([v, r]);
    }
  }
  V.onScreen = drawnOnScreen;
  var bw = 1.6 / Math.max(k, 0.35);
  Object.keys(bat).forEach(function (key) {
    var dimmed = key.slice(-1) === '~', kk = dimmed ? key.slice(0, -1) : key, list = bat[key];
    var parts = kk.split(':'), st = parts[0], col = parts[1] ? levelColor(parts[1]) : C.file;
    ctx.globalAlpha = dimmed ? 0.3 : 1;
    ctx.beginPath();
    if (st === 'file') {
      list.forEach(function (p) { var v = p[0], r = p[1]; roundRect(ctx, v.x - r * 0.8, v.y - r, r * 1.6, r * 2, r * 0.35); });
      ctx.fillStyle = alpha(C.file, 0.75); ctx.fill();
      ctx.lineWidth = 1 / k; ctx.strokeStyle = alpha(C.file, 0.95); ctx.stroke();
    } else {
      var tiny = list.length > 400 && k * 5 < 2.2;     // zoomed far out: squares are as good and much cheaper
      list.forEach(function (p) { var v = p[0], r = p[1]; if (tiny) ctx.rect(v.x - r, v.y - r, 2 * r, 2 * r); else { ctx.moveTo(v.x + r, v.y); ctx.arc(v.x, v.y, r, 0, 6.2832); } });
      if (tiny) { ctx.fillStyle = st === 'active' ? col : alpha(col, st === 'archived' ? 0.35 : 0.15); ctx.fill(); }
      else if (st === 'active') {
        ctx.fillStyle = col; ctx.fill();
        ctx.lineWidth = bw; ctx.strokeStyle = alpha(C.canvas, 0.9); ctx.stroke();
      } else if (st === 'archived') {
        ctx.fillStyle = C.canvas; ctx.fill();
        ctx.fillStyle = alpha(col, 0.1); ctx.fill();
        ctx.lineWidth = bw; ctx.strokeStyle = col; ctx.setLineDash([3 / Math.max(k, 0.5), 2.2 / Math.max(k, 0.5)]); ctx.stroke(); ctx.setLineDash([]);
      } else {
        ctx.fillStyle = alpha(col, 0.2); ctx.fill();
        ctx.lineWidth = 1 / k; ctx.strokeStyle = alpha(col, 0.35); ctx.setLineDash([1.2 / Math.max(k, 0.5), 2 / Math.max(k, 0.5)]); ctx.stroke(); ctx.setLineDash([]);
      }
    }
    ctx.globalAlpha = 1;
  });

  /* marks: a stale node (contract 12) wears a warning ring, one not yet committed (contract 9) a small dot */
  if (marked.stale.length) {
    ctx.lineWidth = 1.8 / Math.max(k, 0.35); ctx.strokeStyle = C.warn; ctx.setLineDash([2.5 / Math.max(k, 0.5), 1.8 / Math.max(k, 0.5)]);
    ctx.beginPath();
    marked.stale.forEach(function (p) { var v = p[0], r = p[1] + 2.6 / k; ctx.moveTo(v.x + r, v.y); ctx.arc(v.x, v.y, r, 0, 6.2832); });
    ctx.stroke(); ctx.setLineDash([]);
  }
  if (marked.pending.length) {
    ctx.fillStyle = C.accent; ctx.beginPath();
    marked.pending.forEach(function (p) { var v = p[0], r = p[1], q = Math.max(1.6, r * 0.32); ctx.moveTo(v.x + r * 0.75 + q, v.y - r * 0.75); ctx.arc(v.x + r * 0.75, v.y - r * 0.75, q, 0, 6.2832); });
    ctx.fill();
  }

  /* search hits, live highlights, ghosts, selection */
  if (S.searchHits.size) {
    ctx.lineWidth = 2.2 / k; ctx.strokeStyle = alpha(C.hl, 0.95);
    ctx.beginPath();
    S.searchHits.forEach(function (key) { var v = V.byKey.get(key); if (v) { var r = radius(v) + 4 / k; ctx.moveTo(v.x + r, v.y); ctx.arc(v.x, v.y, r, 0, 6.2832); } });
    ctx.stroke();
  }
  S.marks.forEach(function (mk, key) {
    var v = V.byKey.get(key); if (!v) return;
    var dur = mk.kind === 'new' ? 3200 : 1400, p = Math.min(1, (now - mk.t) / dur), r = radius(v);
    var col = mk.kind === 'new' ? C.ok : C.accent;
    for (var w = 0; w < (mk.kind === 'new' ? 2 : 1); w++) {
      var pp = (p * (mk.kind === 'new' ? 2 : 1) + w * 0.5) % 1;
      ctx.beginPath(); ctx.arc(v.x, v.y, r + (4 + 22 * pp) / Math.max(k, 0.4), 0, 6.2832);
      ctx.lineWidth = 2.5 / k; ctx.strokeStyle = alpha(col, (1 - pp) * (1 - p * 0.6)); ctx.stroke();
    }
  });
  S.ghosts.forEach(function (g) {
    var p = Math.min(1, (now - g.t) / 900);
    ctx.beginPath(); ctx.arc(g.x, g.y, g.r * (1 - p) + 1, 0, 6.2832);
    ctx.fillStyle = alpha(C.danger, 0.5 * (1 - p)); ctx.fill();
    ctx.beginPath(); ctx.arc(g.x, g.y, g.r + 12 * p / Math.max(k, 0.4), 0, 6.2832);
    ctx.lineWidth = 2 / k; ctx.strokeStyle = alpha(C.danger, 0.8 * (1 - p)); ctx.stroke();
  });
  if (nb.hov && nb.hov !== nb.sel) { var hr = radius(nb.hov) + 3.5 / k; ctx.beginPath(); ctx.arc(nb.hov.x, nb.hov.y, hr, 0, 6.2832); ctx.lineWidth = 1.5 / k; ctx.strokeStyle = alpha(C.text, 0.5); ctx.stroke(); }
  if (nb.sel) { var sr = radius(nb.sel) + 4.5 / k; ctx.beginPath(); ctx.arc(nb.sel.x, nb.sel.y, sr, 0, 6.2832); ctx.lineWidth = 2.4 / k; ctx.strokeStyle = C.text; ctx.stroke(); }

  /* screen-space text: island titles, labels, relation names */
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  drawIslandTitles(boxes, pad);
  drawLabels(nb, now, onScreen);
}
function arrowHead(l, size) {
  var s = l.s, t = l.t, dx = t.x - s.x, dy = t.y - s.y, d = Math.sqrt(dx * dx + dy * dy);
  if (d < 1e-3) return;
  var ux = dx / d, uy = dy / d, r = radius(t) + 1.5 / cam.k;
  if (d < r + size * 2) return;
  var px = t.x - ux * r, py = t.y - uy * r;
  ctx.moveTo(px, py);
  ctx.lineTo(px - ux * size * 1.6 - uy * size * 0.75, py - uy * size * 1.6 + ux * size * 0.75);
  ctx.lineTo(px - ux * size * 1.6 + uy * size * 0.75, py - uy * size * 1.6 - ux * size * 0.75);
  ctx.closePath();
}
function sx(x) { return x * cam.k + cam.x; }
function sy(y) { return y * cam.k + cam.y; }
var FONT = '"Inter",system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",Arial,sans-serif';
function drawIslandTitles(boxes, pad) {
  V.titles = [];
  if (!S.graphs.project && !(boxes.user && boxes.user.n)) return;
  levels().forEach(function (level) {
    var b = boxes[level]; if (!b || !b.n) return;
    var x = sx(b.x0 - pad) + 12, y = sy(b.y0 - pad - 14 / cam.k) + 20;
    var G = graphOf(level), title = level === 'user' ? 'USER' : 'PROJECT', sub = level === 'user' ? 'memory across projects' : projectLabel();
    ctx.font = '700 11px ' + FONT; ctx.fillStyle = levelColor(level);
    ctx.textBaseline = 'alphabetic';
    ctx.fillText(title, x, y);
    var w = ctx.measureText(title).width, room = sx(b.x1 + pad) - x - w - 8;
    ctx.font = '500 11px ' + FONT; ctx.fillStyle = alpha(C.muted, 1);
    // The subtitle shrinks to the island's width: it must not run over the other island.
    var rest = [' · ' + trunc(sub, 48) + ' · ' + plural(G.nodes.size, 'node'), ' · ' + plural(G.nodes.size, 'node'), ''];
    var text = rest.filter(function (t) { return ctx.measureText(t).width <= room; })[0] || '';
    ctx.fillText(text, x + w, y);
    V.titles.push([x - 2, y - 12, w + ctx.measureText(text).width + 4, 16]);
  });
}
function projectLabel() {
  var p = S.projectCanon || S.project || '';
  for (var i = 0; i < S.projects.length; i++) if (S.projects[i].project_path === p) return S.projects[i].slug || baseName(p);
  return baseName(p);
}
function drawLabels(nb, now, onScreen) {
  var k = cam.k, total = V.onScreen || 0;
  var forced = [];
  if (nb.sel) forced.push(nb.sel);
  if (nb.hov) forced.push(nb.hov);
  S.marks.forEach(function (mk, key) { var v = V.byKey.get(key); if (v) forced.push(v); });
  S.searchHits.forEach(function (key) { var v = V.byKey.get(key); if (v) forced.push(v); });
  if (nb.focus) nb.set.forEach(function (v) { forced.push(v); });
  var all = total <= 160 || k >= 1.25;
  var degCut = all ? 0 : (k > 0.7 ? 2 : k > 0.4 ? 4 : 8);
  var cells = new Map(), CELL = 48, placed = 0, tried = 0;
  function free(x, y, w, hh) {
    if (x < 0 || y < 0 || x + w > W || y + hh > H) return false;
    var cx0 = Math.floor(x / CELL), cx1 = Math.floor((x + w) / CELL), cy0 = Math.floor(y / CELL), cy1 = Math.floor((y + hh) / CELL);
    for (var cx = cx0; cx <= cx1; cx++) for (var cy = cy0; cy <= cy1; cy++) {
      var list = cells.get(cx + ',' + cy); if (!list) continue;
      for (var i = 0; i < list.length; i++) { var b = list[i]; if (x < b[0] + b[2] && x + w > b[0] && y < b[1] + b[3] && y + hh > b[1]) return false; }
    }
    return true;
  }
  function crowd(x, y, w, hh) {
    var n = 0, cx0 = Math.floor(x / CELL), cx1 = Math.floor((x + w) / CELL), cy0 = Math.floor(y / CELL), cy1 = Math.floor((y + hh) / CELL);
    var counted = new Set();
    for (var cx = cx0; cx <= cx1; cx++) for (var cy = cy0; cy <= cy1; cy++) {
      var list = cells.get(cx + ',' + cy); if (!list) continue;
      for (var i = 0; i < list.length; i++) { var b = list[i]; if (!counted.has(b) && x < b[0] + b[2] && x + w > b[0] && y < b[1] + b[3] && y + hh > b[1]) { counted.add(b); n++; } }
    }
    return n;
  }
  function take(x, y, w, hh) {
    var b = [x, y, w, hh], cx0 = Math.floor(x / CELL), cx1 = Math.floor((x + w) / CELL), cy0 = Math.floor(y / CELL), cy1 = Math.floor((y + hh) / CELL);
    for (var cx = cx0; cx <= cx1; cx++) for (var cy = cy0; cy <= cy1; cy++) { var key = cx + ',' + cy; var list = cells.get(key); if (!list) cells.set(key, list = []); list.push(b); }
  }
  V.labels = new Map();
  overlayRects().concat(V.titles || []).forEach(function (o) { take(o[0], o[1], o[2], o[3]); });
  // Nodes are obstacles, so a label never covers another node.
  if (total <= 2500) {
    for (var j = 0; j < V.nodes.length; j++) {
      var o = V.nodes[j], orr = radius(o) * k;
      if (!onScreen(o, radius(o))) continue;
      take(sx(o.x) - orr, sy(o.y) - orr, 2 * orr, 2 * orr);
    }
  }
  ctx.textBaseline = 'middle'; ctx.lineJoin = 'round';
  var seen = new Set();
  function label(v, force) {
    if (seen.has(v)) return; seen.add(v);
    var r = radius(v);
    if (!onScreen(v, r)) return;
    var isFile = v.kind === 'file';
    var txt = isFile ? trunc(baseName(v.id), 30) : trunc(v.id, 34);
    var big = force && (v === nb.sel || v === nb.hov);
    ctx.font = (isFile ? '500 10.5px ' : (big ? '650 12.5px ' : '550 11.5px ')) + FONT;
    var w = ctx.measureText(txt).width, hh = 14, px = sx(v.x), py = sy(v.y), rs = r * k;
    var cands = [[px + rs + 5, py], [px - rs - 5 - w, py], [px - w / 2, py + rs + 10], [px - w / 2, py - rs - 10]];
    // In a small graph every node gets its label: try further spots before giving up.
    if (force || all) cands.push([px + rs + 4, py + hh], [px + rs + 4, py - hh], [px - rs - 4 - w, py + hh],
                                 [px - rs - 4 - w, py - hh], [px - w / 2, py + rs + 10 + hh], [px - w / 2, py - rs - 10 - hh]);
    var pos = null;
    for (var c = 0; c < cands.length; c++) {
      if (free(cands[c][0] - 2, cands[c][1] - hh / 2, w + 4, hh)) { pos = cands[c]; break; }
    }
    if (!pos) {
      if (!force && !(all && !isFile)) return;
      var best = Infinity;   // the spot that covers the fewest labels, nodes and cards
      cands.forEach(function (cd) {
        var x = Math.max(2, Math.min(W - w - 2, cd[0])), y = Math.max(hh / 2, Math.min(H - hh / 2, cd[1]));
        if (x < px + rs && x + w > px - rs && Math.abs(y - py) < rs + hh / 2) return;
        var n = crowd(x - 2, y - hh / 2, w + 4, hh);
        if (n < best) { best = n; pos = [x, y]; }
      });
      if (!pos) pos = cands[0];
    }
    take(pos[0] - 2, pos[1] - hh / 2, w + 4, hh);
    V.labels.set(v.key, [pos[0], pos[1] - hh / 2, w, hh]);
    var st = isFile ? 'file' : v.data.state;
    ctx.lineWidth = 3.2; ctx.strokeStyle = alpha(C.canvas, 0.88); ctx.strokeText(txt, pos[0], pos[1]);
    ctx.fillStyle = st === 'active' ? C.text : st === 'archived' ? C.muted : st === 'file' ? C.file : C.faint;
    if (nb.sel && !nb.set.has(v) && !force) ctx.globalAlpha = 0.35;
    ctx.fillText(txt, pos[0], pos[1]);
    ctx.globalAlpha = 1;
    placed++;
  }
  forced.forEach(function (v) { label(v, true); });
  drawRelLabels(nb, free, take);
  for (var i = 0; i < V.order.length && placed < 450 && tried < 4000; i++) {
    var v = V.order[i];
    if (v.deg < degCut) { if (v.kind === 'node') continue; else break; }
    if (v.kind === 'file' && !all && k < 0.9) continue;
    tried++;
    label(v, false);
  }
}
function drawRelLabels(nb, free, take) {
  var list = nb.links;
  if (!list.length && cam.k >= 1.7 && V.links.length <= 400) list = V.links;
  if (!list.length) return;
  ctx.font = 'italic 500 10.5px ' + FONT; ctx.textBaseline = 'middle'; ctx.textAlign = 'center';
  list.slice(0, 300).forEach(function (l) {
    var mx = sx((l.s.x + l.t.x) / 2), my = sy((l.s.y + l.t.y) / 2);
    if (mx < -50 || mx > W + 50 || my < -20 || my > H + 20) return;
    var txt = trunc(l.e.rel, 26);
    var len = Math.hypot(l.s.x - l.t.x, l.s.y - l.t.y) * cam.k - (radius(l.s) + radius(l.t)) * cam.k;
    var tw = ctx.measureText(txt).width;
    if (len < tw + 12 || !free(mx - tw / 2 - 2, my - 7, tw + 4, 14)) return;
    take(mx - tw / 2 - 2, my - 7, tw + 4, 14);
    ctx.lineWidth = 3; ctx.strokeStyle = alpha(C.canvas, 0.92); ctx.strokeText(txt, mx, my);
    ctx.fillStyle = C.muted; ctx.fillText(txt, mx, my);
  });
  ctx.textAlign = 'start'; ctx.textBaseline = 'middle';
}

/* ------------------------------------------------------------ interaction */
function pointerPos(e) { var r = canvas.getBoundingClientRect(); return { x: e.clientX - r.left, y: e.clientY - r.top }; }
function hit(px, py) {
  var w = toWorld(px, py), best = null, bd = Infinity, slack = 5 / cam.k;
  for (var i = 0; i < V.nodes.length; i++) {
    var v = V.nodes[i], r = radius(v) + slack, dx = v.x - w.x, dy = v.y - w.y, d = dx * dx + dy * dy;
    if (d < r * r && d <= bd) { best = v; bd = d; }
  }
  return best;
}
var drag = null;
canvas.addEventListener('pointerdown', function (e) {
  if (e.button !== 0) return;
  var p = pointerPos(e), v = hit(p.x, p.y);
  try { canvas.setPointerCapture(e.pointerId); } catch (err) {}
  drag = { v: v, x: p.x, y: p.y, cx: cam.x, cy: cam.y, moved: false, pinned: v ? v.fx != null : false };
  camAnim = null;
  canvas.classList.add('dragging');
  hideTip();
});
canvas.addEventListener('pointermove', function (e) {
  var p = pointerPos(e);
  if (drag) {
    if (!drag.moved && Math.abs(p.x - drag.x) + Math.abs(p.y - drag.y) > 4) drag.moved = true;
    if (!drag.moved) return;
    S.autoFit = false;
    if (drag.v) {
      var w = toWorld(p.x, p.y);
      drag.v.x = w.x; drag.v.y = w.y; confine(drag.v); drag.v.fx = drag.v.x; drag.v.fy = drag.v.y;
      sim.alphaTarget = 0.15; reheat(0.15);
    } else {
      cam.x = drag.cx + (p.x - drag.x); cam.y = drag.cy + (p.y - drag.y);
    }
    kick();
    return;
  }
  var v = hit(p.x, p.y);
  if (v !== S.hover) { S.hover = v; kick(); }
  canvas.classList.toggle('pointing', !!v);
  if (v) showTip(v, p); else hideTip();
});
function endDrag(e) {
  if (!drag) return;
  var d = drag; drag = null;
  canvas.classList.remove('dragging');
  sim.alphaTarget = 0;
  if (d.v) {
    if (!d.moved) {
      if (!d.pinned) { d.v.fx = null; d.v.fy = null; }
      if (d.v.kind === 'file') openFile(d.v.level, d.v.id); else openNode(d.v.level, d.v.id, { focus: false });
    }
  } else if (!d.moved && e && e.type === 'pointerup') {
    if (S.selected) closePanel();
  }
  kick();
}
canvas.addEventListener('pointerup', endDrag);
canvas.addEventListener('pointercancel', endDrag);
canvas.addEventListener('pointerleave', function () { if (!drag && S.hover) { S.hover = null; hideTip(); kick(); } });
canvas.addEventListener('dblclick', function (e) {
  var p = pointerPos(e), v = hit(p.x, p.y);
  if (v && v.fx != null) { v.fx = null; v.fy = null; reheat(0.2); }
  else if (!v) zoomAt(p.x, p.y, 1.6);
});
canvas.addEventListener('wheel', function (e) {
  e.preventDefault();
  var p = pointerPos(e), dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
  zoomAt(p.x, p.y, Math.exp(-dy * (e.ctrlKey ? 0.01 : 0.0016)));
  hideTip();
}, { passive: false });
$('zin').addEventListener('click', function () { zoomAt(W / 2, H / 2, 1.35); });
$('zout').addEventListener('click', function () { zoomAt(W / 2, H / 2, 1 / 1.35); });
$('zfit').addEventListener('click', function () { fitNow(true); });

var tip = $('tip');
function showTip(v, p) {
  clear(tip);
  if (v.kind === 'file') {
    tip.append(h('div', { class: 'tid mono', text: v.id }), h('div', { class: 'chips' }, h('span', { class: 'chip file', text: 'file' }), h('span', { class: 'chip lv-' + v.level, text: v.level })));
  } else {
    tip.append(h('div', { class: 'tid', text: v.id }), v.data.gist ? h('div', { class: 'tg', text: trunc(v.data.gist, 280) }) : null,
      h('div', { class: 'chips' }, h('span', { class: 'chip lv-' + v.level, text: v.level }), h('span', { class: 'chip st-' + v.data.state, text: v.data.state }),
        markChips(v.data), v.fx != null ? h('span', { class: 'chip', text: 'pinned' }) : null));
  }
  tip.hidden = false;
  var tw = tip.offsetWidth, th = tip.offsetHeight, x = p.x + 16, y = p.y + 14;
  if (x + tw > W - 8) x = p.x - tw - 12;
  if (y + th > H - 8) y = p.y - th - 10;
  tip.style.left = Math.max(6, x) + 'px'; tip.style.top = Math.max(6, y) + 'px';
}
function hideTip() { tip.hidden = true; }

/* ------------------------------------------------------------------ panel */
var panel = $('panel');
function closePanel() {
  S.selected = null; S.panelData = null; S.panelMode = 'view'; S.panelNote = null;
  panel.hidden = true; clear(panel); kick();
}
function edgesOf(level, id) {
  var G = graphOf(level), out = [];
  if (!G) return out;
  G.edges.forEach(function (e) { if (e.from === id || e.to === id) out.push(e); });
  return out;
}
async function openNode(level, id, opts) {
  opts = opts || {};
  level = levelName(level);
  S.selected = { kind: 'node', level: level, id: id };
  S.panelMode = 'view'; S.panelNote = null;
  var G = graphOf(level), local = G && G.nodes.get(id);
  S.panelData = local ? Object.assign({ level: level }, local) : null;
  renderPanel();
  var v = V.byKey.get(nkey(level, id));
  S.autoFit = false;
  if (opts.focus && v) focusOn(v); else if (v) ensureVisible(v);
  kick();
  try {
    var d = await api(nodeUrl(level, id) + pq(true));
    if (!S.selected || S.selected.id !== id || S.selected.level !== level) return;
    if (d && d.id != null) {
      var lvl = d.level ? levelName(d.level) : level;
      var G2 = graphOf(lvl);
      var n = normNode(d);
      if (G2) {
        var old = G2.nodes.get(n.id);
        if (old) { n.created_ts = n.created_ts != null ? n.created_ts : old.created_ts; n.updated_ts = n.updated_ts != null ? n.updated_ts : old.updated_ts; }
        if (!old || old.state !== n.state || old.gist !== n.gist) {
          if (old && old.state !== n.state && !wsLive()) logEvent('recalled', 'v-upd', lvl, n.id + ' → ' + n.state, { kind: 'node', level: lvl, id: n.id });
          G2.nodes.set(n.id, n); rebuild(true); recomputeTokens();
        } else G2.nodes.set(n.id, n);
      }
      S.panelData = Object.assign({ level: lvl, serverEdges: Array.isArray(d.edges) ? d.edges.map(normEdge) : null }, n);
      if (S.panelMode === 'view') renderPanel();
      if (opts.focus && !v) { var v2 = V.byKey.get(nkey(lvl, n.id)); if (v2) setTimeout(function () { focusOn(v2); }, 60); }
    }
  } catch (err) {
    if (!S.selected || S.selected.id !== id) return;
    S.panelNote = { err: true, text: err.message };
    if (S.panelMode === 'view') renderPanel();
  }
}
function openFile(level, path) {
  S.selected = { kind: 'file', level: levelName(level), id: path };
  S.panelMode = 'view'; S.panelNote = null; S.panelData = null;
  renderPanel(); kick();
}
function endButton(level, end, selfId) {
  var isSelf = end === selfId;
  var G = graphOf(level), other = level === 'user' ? S.graphs.project : S.graphs.user;
  var targetLevel = level, kind = 'node';
  if (!G || !G.nodes.has(end)) {
    if (other && other.nodes.has(end) && !looksLikePath(end)) targetLevel = level === 'user' ? 'project' : 'user';
    else kind = 'file';
  }
  var label = kind === 'file' ? end : end;
  return h('button', {
    class: 'endbtn' + (isSelf ? ' self' : '') + (kind === 'file' ? ' file' : ''), title: end + (kind === 'file' ? ' (file / external end)' : ''), text: trunc(label, 64),
    onclick: isSelf ? null : function () {
      if (kind === 'file') { openFile(targetLevel, end); var v = V.byKey.get(fkey(targetLevel, end)); if (v) focusOn(v); }
      else openNode(targetLevel, end, { focus: true });
    }
  });
}
function edgeRow(level, e, selfId) {
  var notes = e.notes && e.notes.length ? h('div', { class: 'enotes', text: e.notes.join('\n') }) : null;
  if (selfId != null && e.from === selfId && e.to !== selfId)
    return h('div', { class: 'edge' }, h('span', { class: 'rel', text: e.rel }), h('span', { class: 'arrow', text: '→' }), endButton(level, e.to, selfId), notes);
  if (selfId != null && e.to === selfId && e.from !== selfId)
    return h('div', { class: 'edge' }, endButton(level, e.from, selfId), h('span', { class: 'arrow', text: '→' }), h('span', { class: 'rel', text: e.rel }), notes);
  return h('div', { class: 'edge' }, endButton(level, e.from, selfId), h('span', { class: 'arrow', text: '—' }), h('span', { class: 'rel', text: e.rel }),
    h('span', { class: 'arrow', text: '→' }), endButton(level, e.to, selfId), notes);
}
function renderPanel() {
  clear(panel);
  var sel = S.selected;
  if (!sel) { panel.hidden = true; return; }
  panel.hidden = false;
  var head = h('div', { class: 'ph' });
  var body = h('div', { class: 'pb' });
  var foot = h('div', { class: 'pf' });
  head.append(h('span', { class: 'chip lv-' + sel.level, text: sel.level }));
  if (S.panelNote) body.append(h('div', { class: 'banner' + (S.panelNote.err ? ' err' : ''), text: S.panelNote.text }));
  if (sel.kind === 'file') {
    head.append(h('span', { class: 'chip file', text: 'file' }));
    body.append(h('h2', { class: 'mono', text: sel.id }));
    body.append(h('p', { class: 'muted', text: 'An edge end that is not a node of this graph, usually a file path.' }));
    var fe = edgesOf(sel.level, sel.id);
    var other = sel.level === 'user' ? S.graphs.project : S.graphs.user;
    body.append(h('h3', null, 'Edges ', h('span', { class: 'n', text: String(fe.length) })));
    var box = h('div', { class: 'edges' });
    fe.forEach(function (e) { box.append(edgeRow(sel.level, e, sel.id)); });
    if (!fe.length) box.append(h('span', { class: 'muted', text: 'No edges point here any more.' }));
    body.append(box);
    foot.hidden = true;
  } else {
    var n = S.panelData;
    if (n) { head.append(h('span', { class: 'chip st-' + n.state, text: n.state })); markChips(n).forEach(function (c) { head.append(c); }); }
    body.append(h('h2', { class: 'mono', text: sel.id }));
    if (!n) {
      body.append(h('p', { class: 'muted', text: S.panelNote ? '' : 'Loading…' }));
    } else if (S.panelMode === 'edit') {
      renderEdit(body, foot, n);
    } else {
      if (n.stale) body.append(h('div', { class: 'banner stale', id: 'stalemark', text: n.stale.mark + ' \u2014 check it against the code; saving it (Edit, Save) marks it current.' }));
      body.append(h('p', { class: 'gist', text: n.gist || '(no gist)' }));
      body.append(h('h3', null, 'Notes ', h('span', { class: 'n', text: String(n.notes.length) })));
      if (n.notes.length) body.append(h('ul', { class: 'notes' }, n.notes.map(function (t) { return h('li', { text: t }); })));
      else body.append(h('span', { class: 'muted', text: 'No notes.' }));
      body.append(h('h3', null, 'Touches ', h('span', { class: 'n', text: String(n.touches.length) })));
      if (n.touches.length) body.append(h('ul', { class: 'touches mono' }, n.touches.map(function (t) { return h('li', { text: t }); })));
      else body.append(h('span', { class: 'muted', text: 'No files recorded.' }));
      var G = graphOf(sel.level);
      var edges = G && G.nodes.has(sel.id) ? edgesOf(sel.level, sel.id) : (n.serverEdges || []);
      var outs = edges.filter(function (e) { return e.from === sel.id; }), ins = edges.filter(function (e) { return e.from !== sel.id; });
      if (!edges.length) {
        body.append(h('h3', null, 'Edges ', h('span', { class: 'n', text: '0' })), h('span', { class: 'muted', text: 'Not connected yet.' }));
      }
      [['Outgoing', outs], ['Incoming', ins]].forEach(function (grp) {
        if (!grp[1].length) return;
        body.append(h('h3', null, grp[0] + ' edges ', h('span', { class: 'n', text: String(grp[1].length) })));
        var eb = h('div', { class: 'edges' });
        grp[1].forEach(function (e) { eb.append(edgeRow(sel.level, e, sel.id)); });
        body.append(eb);
      });
      var meta = h('div', { class: 'meta' });
      var c = ago(n.created_ts), u = ago(n.updated_ts);
      if (c) meta.append(h('b', { text: 'created' }), h('span', { text: c }));
      if (u) meta.append(h('b', { text: 'updated' }), h('span', { text: u }));
      meta.append(h('b', { text: 'level' }), h('span', { text: sel.level === 'user' ? 'user (shared by every project)' : 'project · ' + projectLabel() }));
      meta.append(h('b', { text: 'memory' }), h('span', { id: 'sharingnode', text: sharingOf(sel.level, n) }));
      body.append(meta);
      if (S.panelMode === 'confirm') {
        var ec = edgesOf(sel.level, sel.id).length;
        var cbox = h('div', { class: 'confirm' },
          h('div', null, 'Delete ', h('b', { class: 'mono', text: sel.id }), ' and its ' + ec + ' edge' + (ec === 1 ? '' : 's') + ' from the ' + sel.level + ' graph? Agents will no longer recall it.'),
          h('div', { class: 'acts' },
            h('button', { class: 'btn', type: 'button', text: 'Cancel', onclick: function () { S.panelMode = 'view'; renderPanel(); } }),
            h('button', { class: 'btn danger solid', type: 'button', id: 'confirmdelete', text: 'Delete node', onclick: function (ev) { doDelete(ev.currentTarget); } })));
        body.append(cbox);
      }
      foot.append(
        h('button', { class: 'btn primary', type: 'button', text: 'Edit', onclick: function () { S.panelMode = 'edit'; renderPanel(); } }),
        h('button', { class: 'btn', type: 'button', text: 'Focus', title: 'Centre the graph on this node', onclick: function () { focusOn(V.byKey.get(nkey(sel.level, sel.id))); } }),
        h('button', { class: 'btn danger right', type: 'button', text: 'Delete…', onclick: function () { S.panelMode = 'confirm'; renderPanel(); var b = $('confirmdelete'); if (b) b.focus(); } }));
    }
  }
  head.append(h('button', { class: 'x', type: 'button', title: 'Close (Esc)', 'aria-label': 'Close', text: '×', onclick: closePanel }));
  panel.append(head, body, foot);
}
function lines(text) { return text.split(/\r?\n/).map(function (s) { return s.trim(); }).filter(function (s) { return s.length > 0; }); }
function renderEdit(body, foot, n) {
  var sel = S.selected;
  var gist = h('textarea', { rows: 3, id: 'e-gist', required: true }); gist.value = n.gist;
  var notes = h('textarea', { rows: 7, id: 'e-notes' }); notes.value = n.notes.join('\n');
  var touches = h('textarea', { rows: 4, id: 'e-touches', class: 'mono' }); touches.value = n.touches.join('\n');
  var form = h('form', { class: 'edit', id: 'editform' },
    h('label', { for: 'e-gist' }, 'Gist'), gist,
    h('label', { for: 'e-notes' }, 'Notes ', h('span', { text: '· one per line' })), notes,
    h('label', { for: 'e-touches' }, 'Touches ', h('span', { text: '· one file per line' })), touches);
  var save = h('button', { class: 'btn primary', type: 'submit', text: 'Save', form: 'editform' });
  form.addEventListener('submit', async function (ev) {
    ev.preventDefault();
    if (!gist.value.trim()) { toast('The gist must not be empty.', 'error'); gist.focus(); return; }
    var payload = { gist: gist.value.trim(), notes: lines(notes.value), touches: lines(touches.value) };
    if (S.project) payload.project_path = S.project;
    save.disabled = true; save.textContent = 'Saving…';
    try {
      var r = await api(nodeUrl(sel.level, sel.id), { method: 'PUT', body: payload });
      var node = r && r.node ? r.node : Object.assign({ id: sel.id, state: 'active' }, payload);
      var lvl = r && r.level ? levelName(r.level) : sel.level;
      upsertNode(lvl, node, 'flash', 'put');
      if (!wsLive()) logEvent('edited', 'v-upd', lvl, sel.id, { kind: 'node', level: lvl, id: sel.id });
      S.panelMode = 'view';
      if (S.selected && S.selected.id === sel.id) { S.panelData = Object.assign({ level: lvl }, graphOf(lvl).nodes.get(sel.id) || normNode(node)); renderPanel(); }
      toast('Saved ' + trunc(sel.id, 60), 'ok');
    } catch (err) {
      toast(err.message, 'error');
      save.disabled = false; save.textContent = 'Save';
    }
  });
  form.addEventListener('keydown', function (ev) { if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); form.requestSubmit ? form.requestSubmit() : save.click(); } });
  body.append(form);
  foot.append(save, h('button', { class: 'btn', type: 'button', text: 'Cancel', onclick: function () { S.panelMode = 'view'; renderPanel(); } }),
    h('span', { class: 'muted right', style: 'margin-left:auto;align-self:center;font-size:11.5px', text: 'Ctrl+Enter saves' }));
  setTimeout(function () { gist.focus(); }, 0);
}
async function doDelete(btn) {
  var sel = S.selected; if (!sel) return;
  btn.disabled = true; btn.textContent = 'Deleting…';
  try {
    var r = await api(nodeUrl(sel.level, sel.id) + pq(true), { method: 'DELETE' });
    if (removeNode(sel.level, sel.id) && !wsLive()) logEvent('deleted', 'v-del', sel.level, sel.id, null);
    closePanel();
    var n = r && typeof r.edges_removed === 'number' ? r.edges_removed : 0;
    toast('Deleted ' + trunc(sel.id, 60) + (n ? ' and ' + n + ' edge' + (n === 1 ? '' : 's') : ''), 'ok');
  } catch (err) {
    toast(err.message, 'error');
    btn.disabled = false; btn.textContent = 'Delete node';
  }
}

/* ------------------------------------------------------------ mutations */
function upsertNode(level, raw, mark, via) {
  var G = graphOf(level); if (!G || !raw || raw.id == null) return null;
  var n = normNode(raw), old = G.nodes.get(n.id);
  if (via === 'repository') {        // pulled: the repository's version, its stale mark judged at the next load
    n.uncommitted = false;
    if (old && raw.stale === undefined) n.stale = old.stale;
  } else if (via === 'put') {        // written here: current now (contract 12), not committed yet when shared
    n.uncommitted = !!(level === 'project' && G.sharing && G.sharing.shared && !n.private && !n.unpublished);
  }
  if (old) {
    if (n.created_ts == null) n.created_ts = old.created_ts;
    if (raw.state == null) n.state = old.state;
  } else if (n.created_ts == null) n.created_ts = nowS();
  if (n.updated_ts == null) n.updated_ts = nowS();
  G.nodes.set(n.id, n);
  if (mark) S.marks.set(nkey(level, n.id), { kind: old ? 'flash' : mark, t: clock() });
  recomputeTokens(); scheduleRebuild();
  return old;
}
function removeNode(level, id) {
  var G = graphOf(level); if (!G || !G.nodes.has(id)) return false;
  var v = V.byKey.get(nkey(level, id));
  if (v) S.ghosts.push({ x: v.x, y: v.y, r: radius(v), t: clock() });
  G.nodes.delete(id);
  G.edges.forEach(function (e, k) { if (e.from === id || e.to === id) G.edges.delete(k); });
  S.searchHits.delete(nkey(level, id));
  recomputeTokens(); scheduleRebuild();
  return true;
}
var tokTimer = 0;
function recomputeTokens() {
  clearTimeout(tokTimer);
  tokTimer = setTimeout(function () { levels().forEach(function (l) { var G = graphOf(l); if (G) G.tokens = estimate(G); }); renderHud(); }, 60);
}
function refreshPanelFor(level, id, deleted) {
  var sel = S.selected;
  if (!sel) return;
  if (sel.kind === 'file') { if (sel.level === level && S.panelMode === 'view') renderPanel(); return; }
  if (sel.level !== level) return;
  if (sel.id === id) {
    if (deleted) { S.panelNote = { err: true, text: 'This node was just deleted (by an agent or another window).' }; }
    else { var n = graphOf(level).nodes.get(id); if (n) S.panelData = Object.assign({ level: level, serverEdges: S.panelData && S.panelData.serverEdges }, n); }
    if (S.panelMode !== 'edit') renderPanel();
    else if (deleted) toast('The node you are editing was deleted.', 'error');
  } else if (S.panelMode === 'view') renderPanel();     // an edge list may have changed
}

/* WebSocket events: contract section 7. */
function applyEvent(m) {
  if (!m || typeof m !== 'object') return;
  if (S.loading) { S.pending.push(m); return; }
  var level = m.level === 'project' ? 'project' : m.level === 'user' ? 'user' : null;
  if (!level) return;
  if (level === 'project' && (!S.graphs.project || !sameProject(m.project_path))) return;
  var G = graphOf(level), tgt;
  switch (m.type) {
    case 'node_put': {
      if (!m.node || m.node.id == null) return;
      var old = upsertNode(level, m.node, 'new', m.via === 'repository' ? 'repository' : 'put');
      var id = String(m.node.id);
      tgt = { kind: 'node', level: level, id: id };
      if (!old) logEvent('+ node', 'v-new', level, id, tgt);
      else if (old.state !== (m.node.state || old.state)) logEvent('revived', 'v-upd', level, id + ' → ' + m.node.state, tgt);
      else logEvent('updated', 'v-upd', level, id, tgt);
      refreshPanelFor(level, id, false);
      break;
    }
    case 'node_deleted': {
      var did = m.id != null ? String(m.id) : (m.node && m.node.id != null ? String(m.node.id) : null);
      if (did == null) return;
      if (removeNode(level, did)) logEvent('− node', 'v-del', level, did, null);
      refreshPanelFor(level, did, true);
      break;
    }
    case 'edge_put':
    case 'edge_deleted': {
      var raw = m.edge || m;
      if (raw.from == null || raw.to == null || raw.rel == null) return;
      var e = normEdge(raw), k = ekey(e), put = m.type === 'edge_put';
      var existed = G.edges.has(k);
      if (put) G.edges.set(k, e); else if (existed) G.edges.delete(k); else return;
      logEvent(put ? (existed ? 'edge ✎' : '+ edge') : '− edge', put ? (existed ? 'v-upd' : 'v-new') : 'v-del', level,
        trunc(e.from, 28) + ' —' + e.rel + '→ ' + trunc(e.to, 28),
        G.nodes.has(e.from) ? { kind: 'node', level: level, id: e.from } : null);
      recomputeTokens(); scheduleRebuild();
      refreshPanelFor(level, e.from, false); if (S.selected && S.selected.id === e.to) refreshPanelFor(level, e.to, false);
      break;
    }
    case 'compacted': {
      var n = 0;
      function setState(ids, st) {
        (Array.isArray(ids) ? ids : []).forEach(function (id) {
          var x = G.nodes.get(String(id)); if (!x || x.state === st) return;
          G.nodes.set(x.id, Object.assign({}, x, { state: st })); n++;
        });
      }
      setState(m.archived, 'archived'); setState(m.restored, 'active'); setState(m.orphaned, 'orphaned');
      var dels = Array.isArray(m.deleted) ? m.deleted : [];
      dels.forEach(function (id) { if (removeNode(level, String(id))) n++; });
      var parts = [];
      [['archived', m.archived], ['restored', m.restored], ['orphaned', m.orphaned], ['deleted', m.deleted]].forEach(function (p) {
        if (Array.isArray(p[1]) && p[1].length) parts.push(p[1].length + ' ' + p[0]);
      });
      logEvent('compacted', 'v-cmp', level, parts.join(', ') || 'no change', null);
      recomputeTokens(); scheduleRebuild();
      if (S.selected && S.selected.level === level) refreshPanelFor(level, S.selected.id, dels.indexOf(S.selected.id) >= 0);
      break;
    }
    default: return;
  }
}

/* ------------------------------------------------------------- WebSocket */
function wsLive() { return !!(ws.sock && ws.sock.readyState === 1 && document.documentElement.dataset.kgdWs === 'live'); }
var ws = { sock: null, gen: 0, attempt: 0, timer: 0, ping: 0, lastMsg: 0, countdown: 0, everLive: false, wantResync: false };
function setLive(state, text) {
  var el = $('live');
  el.className = 'live ' + state;
  el.querySelector('span').textContent = text || state;
  document.documentElement.dataset.kgdWs = state;
}
function wsUrl() {
  var qs = [];
  if (S.project) qs.push('project_path=' + enc(S.project));
  if (S.token) qs.push('token=' + enc(S.token));
  return (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws' + (qs.length ? '?' + qs.join('&') : '');
}
function wsConnect(now) {
  clearTimeout(ws.timer); clearInterval(ws.countdown);
  var gen = ++ws.gen;
  if (ws.sock) { try { ws.sock.onclose = null; ws.sock.onmessage = null; ws.sock.close(); } catch (e) {} ws.sock = null; }
  if (now) ws.attempt = 0;
  setLive('connecting', 'connecting…');
  var sock;
  try { sock = new WebSocket(wsUrl()); } catch (e) { wsRetry(gen); return; }
  ws.sock = sock;
  sock.onmessage = function (ev) {
    if (gen !== ws.gen) return;
    ws.lastMsg = Date.now();
    var m; try { m = JSON.parse(ev.data); } catch (e) { return; }
    if (!m || typeof m !== 'object') return;
    if (m.type === 'connected') {
      ws.attempt = 0; sock.kgdLive = true;
      setLive('live', 'live');
      logEvent('live', 'v-sys', null, 'connected to the live feed', null);
      if (ws.everLive || ws.wantResync) { ws.wantResync = false; loadGraph({ keep: true, quiet: true }); }
      ws.everLive = true;
      return;
    }
    if (m.type === 'pong') return;
    applyEvent(m);
  };
  sock.onclose = function () {
    if (gen !== ws.gen) return;
    ws.sock = null;
    if (sock.kgdLive) logEvent('offline', 'v-sys', null, 'live feed dropped; reconnecting', null);
    wsRetry(gen);
  };
  sock.onerror = function () {};
  clearInterval(ws.ping);
  ws.lastMsg = Date.now();
  ws.ping = setInterval(function () {
    if (gen !== ws.gen || !ws.sock || ws.sock.readyState !== 1) return;
    try { ws.sock.send('ping'); } catch (e) {}
    if (Date.now() - ws.lastMsg > 75000) { try { ws.sock.close(); } catch (e) {} }
  }, 25000);
}
function wsRetry(gen) {
  if (gen !== ws.gen) return;
  var delay = Math.min(20000, 600 * Math.pow(2, ws.attempt)) * (0.8 + Math.random() * 0.4);
  ws.attempt = Math.min(ws.attempt + 1, 10);
  ws.wantResync = true;
  var until = Date.now() + delay;
  function show() { setLive('offline', 'offline · retry in ' + Math.max(1, Math.ceil((until - Date.now()) / 1000)) + 's'); }
  show();
  clearInterval(ws.countdown); ws.countdown = setInterval(show, 1000);
  clearTimeout(ws.timer);
  ws.timer = setTimeout(function () { clearInterval(ws.countdown); wsConnect(false); }, delay);
}
$('live').addEventListener('click', function () { if (!ws.sock) wsConnect(true); });

/* ------------------------------------------------------------ HUD, empty */
function renderHud() {
  var box = $('budgets'); clear(box);
  levels().forEach(function (level) {
    var G = graphOf(level); if (!G) return;
    var counts = { active: 0, archived: 0, orphaned: 0, stale: 0 };
    G.nodes.forEach(function (n) { counts[n.state]++; if (n.stale) counts.stale++; });
    var max = G.max_tokens || 0, tok = G.tokens || 0, frac = max ? tok / max : 0;
    var col = frac > 1 ? C.danger : frac > 0.8 ? C.warn : levelColor(level);
    var name = level === 'user' ? 'User graph' : 'Project · ' + projectLabel();
    var bar = h('b'); bar.style.width = Math.min(100, frac * 100).toFixed(1) + '%'; bar.style.background = col;
    box.append(h('div', { class: 'budget', title: level === 'user' ? 'Memory shared across all projects' : (S.projectCanon || S.project || '') },
      h('div', { class: 'row' }, h('span', { class: 'name' }, h('span', { class: 'dot', style: 'background:' + levelColor(level) }), h('span', { text: name })),
        h('span', { class: 'tok' + (frac > 1 ? ' over' : ''), title: max ? Math.round(frac * 100) + ' % of the budget' : '', text: nf.format(tok) + (max ? ' / ' + nf.format(max) : '') + ' tok' })),
      h('div', { class: 'meter', title: 'Active-graph token estimate; compaction archives down to 80 % when it exceeds the budget' }, bar, h('u')),
      h('div', { class: 'counts' },
        h('span', null, h('b', { text: nf.format(counts.active) }), 'active'),
        h('span', null, h('b', { text: nf.format(counts.archived) }), 'archived'),
        h('span', null, h('b', { text: nf.format(counts.orphaned) }), 'orphaned'),
        h('span', null, h('b', { text: nf.format(G.edges.size) }), 'edges'),
        counts.stale ? h('span', { class: 'stalecount', id: 'stale-' + level, title: 'Nodes whose touched code changed since they were written: check them, a put marks them current' }, h('b', { text: nf.format(counts.stale) }), 'stale') : null),
      level === 'project' ? h('div', { class: 'sharing', id: 'sharing', title: sharingTitle(G), text: sharingLine(G) }) : null,
      level === 'project' && pendingCount(G) ? h('div', { class: 'sharing pending', id: 'uncommitted', title: 'Knowledge written here that the last commit does not hold: kgd diff lists it, git add .kg && git commit publishes it',
        text: plural(pendingCount(G), 'change') + ' not yet committed \u00b7 kgd diff' }) : null));
  });
}
/* Contract 9: which knowledge is shared (in the repository's .kg/) and which is personal. One short
   line under the counts (a full path would wrap in the 300 px card); the path is in its title. */
function sharingLine(G) {
  var s = G && G.sharing;
  if (!s) return '';  // not loaded yet: say nothing rather than the opposite of the truth
  if (s.shared) return 'shared in the repository \u00b7 ' + plural(+s.nodes || 0, 'node');
  return s && s.off ? 'personal \u00b7 sharing turned off here' : 'personal \u00b7 not in the repository';
}
function sharingTitle(G) {
  var s = G && G.sharing;
  return (s && s.shared ? 'Shared in ' + s.kg_dir + '. ' : '') +
    'Knowledge in the repository is shared; what you read and archive stays personal (contract 9).';
}
function sharingOf(level, n) {
  var G = graphOf(level), s = level === 'project' && G && G.sharing;
  if (n && n.private) return 'private: kept out of the repository';
  if (n && n.unpublished) return 'personal until you run kgd share';
  if (s && s.shared && n && n.uncommitted) return 'changed here, not yet committed: git add .kg && git commit publishes it';
  return s && s.shared ? 'shared in the repository; what you read and archive is personal' : 'personal state only';
}
function totalNodes() { var t = 0; levels().forEach(function (l) { t += graphOf(l).nodes.size; }); return t; }
function updateEmpty() {
  var box = $('empty'), card = $('emptycard');
  $('loading').hidden = !S.loading || S.loadedOnce;
  if (S.loading && !S.loadedOnce) { box.hidden = true; return; }
  clear(card);
  if (S.loadError) {
    card.append(h('h2', { text: 'Could not load the graph' }), h('p', { text: S.loadError }),
      h('button', { class: 'btn primary', type: 'button', text: 'Retry', onclick: function () { loadGraph({}); } }));
    box.hidden = false; return;
  }
  var total = totalNodes();
  if (V.nodes.length) { box.hidden = true; return; }
  if (total > 0) {
    card.append(h('h2', { text: 'Everything here is hidden' }),
      h('p', { text: nf.format(V.hidden.orphaned) + ' orphaned and ' + nf.format(V.hidden.archived) + ' archived nodes are hidden by the filters above.' }),
      h('button', { class: 'btn primary', type: 'button', text: 'Show them', onclick: function () { $('t-orphaned').checked = true; $('t-archived').checked = true; onToggle(); } }));
    box.hidden = false; return;
  }
  var mcp = location.origin + '/mcp';
  card.append(
    h('h2', { text: S.project ? 'No memories yet for this project' : 'No memories yet' }),
    h('p', { text: 'kgd fills up as your coding agents work. They write memory through MCP, not through this page:' }),
    h('ol', null,
      h('li', null, 'the agent calls ', h('code', { text: 'kg_read' }), ' with its working directory to start a session,'),
      h('li', null, 'saves insights with ', h('code', { text: 'kg_put_node' }), ' and links them with ', h('code', { text: 'kg_put_edge' }), ','),
      h('li', null, 'and this view updates live as they do.')),
    h('p', { text: 'Connect an agent, for example Claude Code:' }),
    h('pre', { class: 'mono', text: 'claude mcp add --transport http kgd ' + mcp }));
  box.hidden = false;
}

/* ---------------------------------------------------------------- search */
var qEl = $('q'), resEl = $('results'), resIdx = -1;
function hideResults() { resEl.hidden = true; resIdx = -1; if (S.searchHits.size) { S.searchHits.clear(); kick(); } }
function markText(parent, text, words) {
  if (!words.length) { parent.append(text); return; }
  var lower = text.toLowerCase(), i = 0, guard = 0;
  while (i < text.length && guard++ < 200) {
    var best = -1, bl = 0;
    words.forEach(function (w) { var j = lower.indexOf(w, i); if (j >= 0 && (best < 0 || j < best)) { best = j; bl = w.length; } });
    if (best < 0) break;
    if (best > i) parent.append(text.slice(i, best));
    parent.append(h('mark', { text: text.slice(best, best + bl) }));
    i = best + bl;
  }
  if (i < text.length) parent.append(text.slice(i));
}
var runSearch = debounce(async function () {
  var text = qEl.value.trim();
  if (!text) { hideResults(); return; }
  var seq = ++S.searchSeq;
  try {
    var d = await api('/api/search?q=' + enc(text) + pq(false));
    if (seq !== S.searchSeq) return;
    renderResults(d && Array.isArray(d.results) ? d.results : [], text);
  } catch (err) {
    if (seq !== S.searchSeq) return;
    clear(resEl); resEl.append(h('div', { class: 'none', text: err.message })); resEl.hidden = false;
  }
}, 180);
function renderResults(results, text) {
  clear(resEl); resIdx = -1; S.searchHits.clear();
  var words = text.toLowerCase().split(/\s+/).filter(function (w) { return w.length > 0; });
  if (!results.length) { resEl.append(h('div', { class: 'none', text: 'No memory matches “' + trunc(text, 60) + '”.' })); resEl.hidden = false; kick(); return; }
  results.forEach(function (r, i) {
    if (!r || r.id == null) return;
    var level = levelName(r.level), id = String(r.id), st = r.state || 'active';
    S.searchHits.add(nkey(level, id));
    var idEl = h('span', { class: 'rid mono' }); markText(idEl, id, words);
    var gEl = h('div', { class: 'rgist' }); markText(gEl, trunc(r.gist == null ? '' : String(r.gist), 240), words);
    var b = h('button', { class: 'res', type: 'button', role: 'option', dataset: { i: i },
      onclick: function () { hideResults(); qEl.blur(); openNode(level, id, { focus: true }); } },
      h('div', { class: 'top' }, h('span', { class: 'chip lv-' + level, text: level }), st !== 'active' ? h('span', { class: 'chip st-' + st, text: st }) : null, idEl,
        typeof r.score === 'number' ? h('span', { class: 'score', text: r.score.toFixed(2) }) : null),
      gEl);
    resEl.append(b);
  });
  resEl.hidden = false; kick();
}
function moveRes(d) {
  var items = resEl.querySelectorAll('.res'); if (!items.length) return;
  resIdx = (resIdx + d + items.length) % items.length;
  items.forEach(function (x, i) { x.classList.toggle('on', i === resIdx); });
  items[resIdx].scrollIntoView({ block: 'nearest' });
}
qEl.addEventListener('input', function () { $('qkbd').hidden = !!qEl.value; runSearch(); });
qEl.addEventListener('focus', function () { if (qEl.value.trim() && resEl.childNodes.length) resEl.hidden = false; });
qEl.addEventListener('keydown', function (e) {
  if (e.key === 'ArrowDown') { e.preventDefault(); moveRes(1); }
  else if (e.key === 'ArrowUp') { e.preventDefault(); moveRes(-1); }
  else if (e.key === 'Enter') { e.preventDefault(); var items = resEl.querySelectorAll('.res'); var it = items[resIdx >= 0 ? resIdx : 0]; if (it) it.click(); }
  else if (e.key === 'Escape') { qEl.value = ''; $('qkbd').hidden = false; hideResults(); qEl.blur(); }
});
document.addEventListener('pointerdown', function (e) { if (!resEl.hidden && !e.target.closest('.search')) { resEl.hidden = true; } });
document.addEventListener('keydown', function (e) {
  var t = e.target, typing = t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT');
  if (e.key === '/' && !typing) { e.preventDefault(); qEl.focus(); qEl.select(); }
  else if (e.key === 'Escape' && !typing) { if (!$('auth').hidden) return; if (S.selected) closePanel(); }
  else if ((e.key === 'f' || e.key === 'F') && !typing && !e.ctrlKey && !e.metaKey) fitNow(true);
});

/* -------------------------------------------------------- toggles, theme */
function onToggle() {
  S.show.archived = $('t-archived').checked; S.show.orphaned = $('t-orphaned').checked; S.show.files = $('t-files').checked;
  store('kgd.show', JSON.stringify(S.show));
  rebuild(true);
}
(function () {
  try { var s = JSON.parse(load('kgd.show') || 'null'); if (s) { ['archived', 'orphaned', 'files'].forEach(function (k) { if (typeof s[k] === 'boolean') S.show[k] = s[k]; }); } } catch (e) {}
  $('t-archived').checked = S.show.archived; $('t-orphaned').checked = S.show.orphaned; $('t-files').checked = S.show.files;
  ['t-archived', 't-orphaned', 't-files'].forEach(function (id) { $(id).addEventListener('change', onToggle); });
})();
var THEMES = ['auto', 'dark', 'light'];
function applyTheme(t) {
  if (t === 'dark' || t === 'light') document.documentElement.dataset.theme = t; else delete document.documentElement.dataset.theme;
  $('theme').title = 'Theme: ' + (t || 'auto') + ' (click to change)';
  $('theme').textContent = t === 'dark' ? '☾' : t === 'light' ? '☀' : '◐';
  readColors(); renderHud(); kick();
}
$('theme').addEventListener('click', function () {
  var cur = load('kgd.theme') || 'auto', next = THEMES[(THEMES.indexOf(cur) + 1) % THEMES.length];
  store('kgd.theme', next); applyTheme(next);
});
if (window.matchMedia) { var mq = matchMedia('(prefers-color-scheme: dark)'); if (mq.addEventListener) mq.addEventListener('change', function () { readColors(); renderHud(); kick(); }); }

/* ------------------------------------------------------ projects, loading */
function hashProject() {
  var raw = location.hash.replace(/^#\??/, '');
  var p = new URLSearchParams(raw);
  if (p.has('project')) return { given: true, value: p.get('project') || null };
  var q = new URLSearchParams(location.search);
  if (q.has('project')) return { given: true, value: q.get('project') || null };
  return { given: false, value: null };
}
function setHash(project, replace) {
  var h2 = '#?project=' + (project ? enc(project) : '');
  if (location.hash === h2) return;
  if (replace) history.replaceState(null, '', h2); else history.pushState(null, '', h2);
}
var picker = $('project');
function renderPicker() {
  clear(picker);
  picker.append(h('option', { value: '', text: 'User graph only' }));
  var current = '';
  S.projects.forEach(function (p) {
    if (!p || !p.project_path) return;
    var label = (p.slug || baseName(p.project_path)) + '  ·  ' + plural(p.nodes || 0, 'node');
    picker.append(h('option', { value: p.project_path, title: p.project_path, text: label }));
    if (p.project_path === S.project || p.project_path === S.projectCanon) current = p.project_path;
  });
  if (S.project && !current) {
    picker.append(h('option', { value: S.project, title: S.project, text: baseName(S.project) + '  ·  (no graph on disk yet)' }));
    current = S.project;
  }
  picker.value = current;
  picker.title = S.project ? S.project : 'Project graph shown next to the user graph';
  pickerKey = JSON.stringify([S.projects, S.project, S.projectCanon]);
}
var pickerKey = '';
async function loadProjects(quiet) {
  try {
    var d = await api('/api/projects');
    S.projects = d && Array.isArray(d.projects) ? d.projects : [];
  } catch (err) { if (!quiet) toast('Projects: ' + err.message, 'error'); return; }
  // Never rebuild the list under an open dropdown, nor when nothing changed.
  if (quiet && (document.activeElement === picker || pickerKey === JSON.stringify([S.projects, S.project, S.projectCanon]))) return;
  renderPicker();
}
setInterval(function () { if (!document.hidden && S.loadedOnce) loadProjects(true); }, 30000);
/* Stale marks follow the code, not the feed (no event says a file changed): look again now and then. */
async function refreshMarks() {
  if (S.loading || !S.loadedOnce) return;
  var d; try { d = await api('/api/graph' + pq(true)); } catch (err) { return; }
  if (S.loading) return;
  var changed = false;
  [['user', d && d.user], ['project', d && d.project]].forEach(function (p) {
    var G = graphOf(p[0]); if (!G || !p[1]) return;
    if (p[1].sharing && typeof p[1].sharing === 'object') G.sharing = p[1].sharing;
    (p[1].nodes || []).forEach(function (raw) {
      var n = raw && G.nodes.get(String(raw.id)); if (!n) return;
      var st = staleOf(raw.stale), u = raw.uncommitted === true;
      if ((n.stale && n.stale.mark) !== (st && st.mark) || n.uncommitted !== u) { n.stale = st; n.uncommitted = u; changed = true; }
    });
  });
  renderHud();
  if (changed) {
    rebuild(true);   /* each drawn node takes its graph's object again (a panel's GET may have replaced it) */
    if (S.selected && S.selected.kind === 'node' && S.panelMode === 'view') refreshPanelFor(S.selected.level, S.selected.id, false);
  }
}
setInterval(function () { if (!document.hidden) refreshMarks(); }, 15000);
document.addEventListener('visibilitychange', function () { if (!document.hidden && S.loadedOnce) loadProjects(true); });
picker.addEventListener('change', function () { switchProject(picker.value || null, false); });
window.addEventListener('hashchange', function () { var hp = hashProject(); if ((hp.value || null) !== (S.project || null)) switchProject(hp.value, true); });
window.addEventListener('popstate', function () { var hp = hashProject(); if ((hp.value || null) !== (S.project || null)) switchProject(hp.value, true); });
function switchProject(p, fromHash) {
  S.project = p || null; S.projectCanon = null;
  if (!fromHash) setHash(S.project, false);
  closePanel(); hideResults();
  renderPicker();
  loadGraph({});
  wsConnect(true);
}
async function loadGraph(opts) {
  opts = opts || {};
  var seq = ++S.loadSeq;
  S.loading = true; S.loadError = null;
  if (!opts.quiet) updateEmpty();
  try {
    var d, projectErr = null;
    try { d = await api('/api/graph' + pq(true)); }
    catch (err) {
      // An unknown project (stale link, moved repository) still shows the user graph.
      if (!S.project || (err.status !== 404 && err.status !== 400)) throw err;
      projectErr = err.message;
      d = await api('/api/graph');
      d.project = null; d.project_path = S.project;
    }
    if (seq !== S.loadSeq) return;
    if (projectErr) toast('Project graph: ' + projectErr, 'error');
    S.graphs.user = toGraph(d && d.user) || emptyGraph();
    S.graphs.project = S.project ? (toGraph(d && d.project) || emptyGraph()) : null;
    S.projectCanon = d && d.project_path ? String(d.project_path) : S.project;
    if (!opts.keep) { V.byKey = new Map(); S.autoFit = true; camAnim = null; }
    S.loading = false; S.loadedOnce = true;
    rebuild(false);
    var q = S.pending; S.pending = [];
    q.forEach(applyEvent);
    if (!opts.keep) {
      reheat(1);
      prerun(V.nodes.length > 1500 ? 250 : 160);
      var t = fitTarget(); cam.x = t.x; cam.y = t.y; cam.k = t.k;
      // Draw the first layout now: the animation frames that refine it come when the browser
      // gets round to them (a headless or background tab may wait seconds).
      draw(clock()); stats.frames++;
    } else kick();
    renderHud(); renderPicker(); updateEmpty();
    if (S.selected && S.selected.kind === 'node' && S.panelMode === 'view') { var n = graphOf(S.selected.level); if (n && n.nodes.has(S.selected.id)) refreshPanelFor(S.selected.level, S.selected.id, false); }
    document.documentElement.dataset.kgdReady = '1';
  } catch (err) {
    if (seq !== S.loadSeq) return;
    S.loading = false;
    var q2 = S.pending; S.pending = [];
    if (S.loadedOnce) { toast(err.message, 'error'); q2.forEach(applyEvent); }
    else { S.loadError = err.message; updateEmpty(); }
  }
}

/* ------------------------------------------------------------------ boot */
var ro = window.ResizeObserver ? new ResizeObserver(function () { resize(); }) : null;
if (ro) ro.observe(canvas); else window.addEventListener('resize', resize);
window.kgd = {
  state: S, vis: V, stats: stats,
  reload: function () { return loadGraph({ keep: true }); },
  refreshMarks: function () { return refreshMarks(); },
  open: function (level, id) { return openNode(level, id); },   /* what a click on a node does */
  fit: function () { fitNow(false); },
  /* page coordinates of a drawn node, or null: lets a test click it */
  screenOf: function (level, id, file) {
    var v = V.byKey.get(file ? fkey(level, id) : nkey(level, id)); if (!v) return null;
    var r = canvas.getBoundingClientRect();
    return { x: r.left + sx(v.x), y: r.top + sy(v.y) };
  }
};
(async function boot() {
  applyTheme(load('kgd.theme') || 'auto');
  resize();
  renderHud();
  var hp = hashProject();
  S.project = hp.value;
  renderPicker();
  await loadProjects();
  if (!hp.given) {
    var best = null;
    S.projects.forEach(function (p) { if (p && p.project_path && (!best || (p.active || 0) > (best.active || 0) || ((p.active || 0) === (best.active || 0) && (p.nodes || 0) > (best.nodes || 0)))) best = p; });
    if (best) { S.project = best.project_path; setHash(S.project, true); renderPicker(); }
  }
  wsConnect(true);
  await loadGraph({});
})();
})();
