// Sluice dashboard: reads the HTTP API v1 of the gateway that serves it.
//
// Data flow: GET /v1/stats every second (admission gauge, counts, workers,
// recent 429s); GET /v1/jobs?limit=50 once and after every (re)connection
// of the event stream; then GET /v1/events, read with fetch() and a stream
// parser (EventSource cannot send the Authorization header), resuming with
// Last-Event-ID after a drop. While the stream is unavailable the job list
// is polled instead.
//
// The page is built with DOM methods only (the Content-Security-Policy
// enforces Trusted Types): no HTML strings anywhere.
(() => {
  'use strict';

  const STATES = ['pending', 'running', 'succeeded', 'failed', 'cancelled'];
  const FINAL = new Set(['succeeded', 'failed', 'cancelled']);
  const RANK = { pending: 0, running: 1, succeeded: 2, failed: 2, cancelled: 2 };
  const TOKEN_KEY = 'sluice.dashboard.token';
  const LIST_LIMIT = 50;
  const MAX_ROWS = 200;
  const STATS_EVERY_MS = 1000;
  const POLL_EVERY_MS = 2000;
  const STREAM_IDLE_MS = 45000; // three missed pings
  const MAX_SLOTS_SHOWN = 64;

  const $ = (id) => document.getElementById(id);

  // el builds an element: el('td', {className: 'x', dataset: {a: 'b'}}, child, 'text', …).
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (k === 'dataset') Object.assign(e.dataset, v);
        else e[k] = v;
      }
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c);
    }
    return e;
  }

  // ---- API -------------------------------------------------------------

  let token = '';
  try { token = localStorage.getItem(TOKEN_KEY) || ''; } catch (_) { /* storage off */ }

  class HTTPError extends Error {
    constructor(status, message) {
      super(message || ('HTTP ' + status));
      this.status = status;
    }
  }

  function authHeaders(extra) {
    const h = Object.assign({ Accept: 'application/json' }, extra || {});
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function api(path, init) {
    const opts = Object.assign({ cache: 'no-store' }, init || {});
    opts.headers = authHeaders(opts.headers);
    const res = await fetch(path, opts);
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    if (!res.ok) {
      const msg = body && body.error ? body.error.message : '';
      throw new HTTPError(res.status, msg);
    }
    return body;
  }

  let alertTimer = 0;
  function showAlert(msg, sticky) {
    const a = $('alert');
    a.textContent = msg;
    a.hidden = false;
    clearTimeout(alertTimer);
    if (!sticky) alertTimer = setTimeout(() => { a.hidden = true; }, 6000);
  }
  function clearAlert() { $('alert').hidden = true; }

  function noteAuthError(err) {
    if (err instanceof HTTPError && err.status === 401) {
      setConn('unauthorized', 'token needed');
      showAlert(token ? 'The API token was refused.' : 'This gateway needs an API token: type it above.', true);
      return true;
    }
    return false;
  }

  // ---- formatting --------------------------------------------------------

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return '–';
    ms = Math.max(0, ms);
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + 'm ' + Math.floor(s % 60) + 's';
    return Math.floor(m / 60) + 'h ' + (m % 60) + 'm';
  }

  // fmtPercent rounds a progress percent to a tenth: "30%" for
  // 30.0003138, "42.5%" for 42.46.
  function fmtPercent(p) { return String(Math.round(p * 10) / 10) + '%'; }

  function fmtClock(t) {
    const d = new Date(t);
    if (isNaN(d)) return '';
    return d.toLocaleTimeString([], { hour12: false });
  }

  function parseTime(v) {
    if (!v) return null;
    const t = Date.parse(v);
    return isNaN(t) ? null : t;
  }

  function shortID(id) { return id.length > 12 ? '…' + id.slice(-12) : id; }

  // ---- connection badge ----------------------------------------------------

  function setConn(state, text) {
    const c = $('conn');
    c.dataset.conn = state;
    c.textContent = text || state;
  }

  // ---- stats -------------------------------------------------------------------

  function level(active, cap) {
    if (!cap) return 'uncapped';
    const f = active / cap;
    if (f >= 1) return 'full';
    if (f >= 0.8) return 'warn';
    return 'ok';
  }

  function setGauge(box, fill, value, active, cap) {
    box.dataset.level = level(active, cap);
    // With no cap there is nothing to fill: the bar stays empty (and is
    // marked "no cap"), never a full bar that reads as 100 %.
    fill.style.width = (cap ? Math.min(100, (100 * active) / cap) : 0) + '%';
    value.textContent = cap ? active + ' / ' + cap : active + ' active · no cap';
  }

  function renderGauges(s) {
    setGauge($('gauge-global'), $('gauge-global-fill'), $('gauge-global-value'), s.active, s.max_active);
    const tenants = Object.keys(s.tenant_active || {}).sort();
    const rows = tenants.map((t) => {
      const n = s.tenant_active[t];
      const value = el('span', { className: 'gauge-value' });
      const fill = el('div', { className: 'fill' });
      const box = el('div', { className: 'gauge', dataset: { tenant: t } },
        el('div', { className: 'gauge-label' }, el('span', { textContent: 'tenant ' + t }), value),
        el('div', { className: 'bar' }, fill));
      setGauge(box, fill, value, n, s.tenant_max_active);
      return box;
    });
    $('gauge-tenants').replaceChildren(...rows);
  }

  function renderCounts(s) {
    const counts = s.counts || {};
    $('count-tiles').replaceChildren(...STATES.map((st) =>
      el('div', { className: 'tile', dataset: { state: st } },
        el('div', { className: 'n', textContent: String(counts[st] || 0) }),
        el('div', { className: 's', textContent: st }))));
  }

  function renderWorkers(s) {
    // Stable order, as the scheduler offers: sorted by id (byte order).
    const ws = (s.workers || []).slice().sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    // The schedulers' latest requests for one more worker (spawn on
    // overflow). Only those a spawner acts on are listed: with none
    // configured (the request is only published) one line says so and
    // names the kinds short of workers.
    const recent = s.recent_scale_requests || [];
    const scale = recent.filter((r) => r.spawner).slice(0, 3).map((r) => el('p', {
      className: 'muted scale-request', dataset: { kind: r.kind },
      textContent: 'asked for a ' + r.kind + ' worker at ' + fmtClock(parseTime(r.at)) + ': ' + r.ready +
        ' ready, oldest waiting ' + fmtDuration(r.oldest_wait_ms),
    }));
    const unserved = [...new Set(recent.filter((r) => !r.spawner).map((r) => r.kind))].sort();
    if (scale.length === 0 && unserved.length > 0) {
      scale.push(el('p', {
        className: 'muted no-spawner', dataset: { kinds: unserved.join(' ') },
        textContent: 'no spawner configured: ready ' + unserved.join(', ') + ' jobs wait for a worker to join',
      }));
    }
    if (ws.length === 0) {
      $('worker-rows').replaceChildren(el('p', { className: 'muted', textContent: 'no live workers' }), ...scale);
      return;
    }
    $('worker-rows').replaceChildren(...scale, ...ws.map((w) => {
      const inFlight = Math.max(0, w.in_flight || 0);
      const unlimited = !w.capacity;
      const total = unlimited ? inFlight : Math.max(w.capacity, inFlight);
      const shown = Math.min(total, MAX_SLOTS_SHOWN);
      const slots = [];
      for (let i = 0; i < shown; i++) {
        slots.push(el('span', { className: i < inFlight ? 'slot filled' : 'slot' }));
      }
      if (total > shown) slots.push(el('span', { className: 'unlimited', textContent: '+' + (total - shown) }));
      if (unlimited) slots.push(el('span', { className: 'unlimited', textContent: 'no limit' }));
      return el('div', {
        className: 'worker',
        title: (w.kinds || []).join(', ') + (w.version ? ' · version ' + w.version : ''),
        dataset: {
          workerId: w.id, inFlight: String(inFlight), capacity: String(w.capacity || 0),
          draining: w.draining ? 'true' : 'false', spawned: w.spawned ? 'true' : 'false', version: w.version || '',
          isolation: w.isolation || '',
        },
      },
      el('span', { className: 'wid', textContent: w.id },
        w.spawned ? el('span', { className: 'tag', title: 'started on a scale request (SLUICE_SCHEDULER_SPAWN)', textContent: 'spawned' }) : null,
        isolationTag(w.isolation)),
      el('div', { className: 'slots' }, ...slots),
      el('span', { className: 'load', textContent: unlimited ? inFlight + ' running' : inFlight + ' / ' + w.capacity }),
      resourceMeters(w));
    }));
  }

  // ISOLATIONS say what each isolation of exec runs holds
  // (contracts.Isolation; docs/security.md).
  const ISOLATIONS = {
    'uid+namespace': 'exec runs: a uid of their own, private /tmp and /dev/shm, a /proc showing only their own processes',
    'uid': 'exec runs: a uid of their own; /tmp and /proc shared with other runs (the worker may not make mount namespaces)',
    'none': "exec runs keep the worker's uid: not walled off from it or from each other (the worker's log says why)",
  };

  // isolationTag marks a worker that runs exec jobs with the walls its
  // runs get; none is a warning.
  function isolationTag(iso) {
    if (!iso) return null;
    return el('span', {
      className: iso === 'none' ? 'tag warn' : 'tag iso',
      title: ISOLATIONS[iso] || iso,
      textContent: iso === 'none' ? 'exec unwalled' : iso,
    });
  }

  // ---- Resources ---------------------------------------------------------

  // MEMORY_UNITS are the IEC units a memory amount carries on the wire
  // ("512MiB"; a plain count is bytes).
  const MEMORY_UNITS = { TiB: 2 ** 40, GiB: 2 ** 30, MiB: 2 ** 20, KiB: 2 ** 10, B: 1 };

  // parseMemory reads a memory amount of the API ("1GiB", "1000", or a
  // number of bytes); 0 when absent or unreadable.
  function parseMemory(v) {
    if (typeof v === 'number') return v;
    if (typeof v !== 'string') return 0;
    const m = /^([0-9.]+)\s*(TiB|GiB|MiB|KiB|B)?$/.exec(v.trim());
    return m ? Math.floor(parseFloat(m[1]) * (MEMORY_UNITS[m[2] || 'B'])) : 0;
  }

  // fmtMemory writes bytes with the largest IEC unit it reaches, to a
  // tenth ("1.5 GiB").
  function fmtMemory(bytes) {
    for (const u of ['TiB', 'GiB', 'MiB', 'KiB']) {
      if (bytes >= MEMORY_UNITS[u]) {
        const n = bytes / MEMORY_UNITS[u];
        return (Number.isInteger(n) ? String(n) : n.toFixed(1)) + ' ' + u;
      }
    }
    return bytes + ' B';
  }

  // fmtCores writes cores to at most two decimals ("1.5").
  function fmtCores(c) { return String(Math.round(c * 100) / 100); }

  // resourceMeters draws what the declarations of a worker's running jobs
  // take of its CPU and memory against its capacity: /v1/stats gives its
  // capacity (resources) and what is left free (free_resources, never
  // below 0). Nothing for a worker that announces no capacity (an earlier
  // release).
  function resourceMeters(w) {
    const cap = w.resources;
    if (!cap) return null;
    const free = w.free_resources || cap;
    const cpuCap = cap.cpu || 0;
    const memCap = parseMemory(cap.memory);
    const cpuUsed = Math.max(0, Math.min(cpuCap, cpuCap - (free.cpu || 0)));
    const memUsed = Math.max(0, Math.min(memCap, memCap - parseMemory(free.memory)));
    return el('div', {
      className: 'res',
      dataset: {
        cpuUsed: fmtCores(cpuUsed), cpuCapacity: fmtCores(cpuCap),
        memoryUsed: String(memUsed), memoryCapacity: String(memCap),
      },
    },
    meter('cpu', cpuUsed, cpuCap, fmtCores(cpuUsed) + ' / ' + fmtCores(cpuCap) + ' cores'),
    meter('memory', memUsed, memCap, fmtMemory(memUsed) + ' / ' + fmtMemory(memCap)));
  }

  // meter is one labelled bar: used of capacity.
  function meter(name, used, capacity, text) {
    const fill = el('div', { className: 'fill' });
    const pct = capacity > 0 ? Math.min(100, (100 * used) / capacity) : 0;
    fill.style.width = pct + '%';
    return el('div', {
      className: 'meter', dataset: { resource: name, percent: String(Math.round(pct)) },
      title: name + ' declared by the running jobs, of the worker\'s capacity',
    },
    el('span', { className: 'name', textContent: name }),
    el('div', { className: 'bar' }, fill),
    el('span', { className: 'amount', textContent: text }));
  }

  function limitText(r) {
    switch (r.limit) {
      case 'global': return 'global cap';
      case 'tenant': return 'tenant cap';
      case 'tenant_rate': return 'tenant rate limit';
      case 'ip_rate': return 'IP rate limit';
      case 'tenant_items': return 'tenant items in flight';
      case 'tenant_read_rate': return 'tenant read rate limit';
      case 'tenant_streams': return 'tenant stream share';
      case 'tenant_pins': return 'tenant pin share';
      default: return r.limit || '?';
    }
  }

  // At most this many rows in the 429 panel, so it never pushes the jobs
  // table off the first screen.
  const maxRejectionRows = 6;

  // collapseRejections folds the 429s (newest first) into one row per
  // tenant and limit: the newest time, the oldest, and how many.
  function collapseRejections(rs) {
    const rows = [];
    const byKey = new Map();
    for (const r of rs) {
      const key = (r.tenant || '') + '\u0000' + r.limit;
      let row = byKey.get(key);
      if (!row) {
        row = { at: r.at, first: r.at, tenant: r.tenant, limit: r.limit, count: 0 };
        byKey.set(key, row);
        rows.push(row);
      }
      row.first = r.at;
      row.count++;
    }
    return rows;
  }

  function renderRejections(s) {
    const rs = s.recent_rejections || [];
    if (rs.length === 0) {
      $('rejection-rows').replaceChildren(el('tr', null, el('td', { className: 'empty', colSpan: 4, textContent: 'none recently' })));
      return;
    }
    const rows = collapseRejections(rs);
    const shown = rows.slice(0, maxRejectionRows).map((r) => el('tr', { className: 'rejection' },
      el('td', { className: 'mono', textContent: fmtClock(r.at), title: r.count > 1 ? r.first + ' … ' + r.at : r.at }),
      el('td', { textContent: r.tenant || '(unknown)' }),
      el('td', null, el('span', { className: 'limit', dataset: { limit: r.limit }, textContent: limitText(r) })),
      el('td', { className: 'count', textContent: r.count > 1 ? '×' + r.count : '' })));
    if (rows.length > maxRejectionRows) {
      const rest = rows.slice(maxRejectionRows).reduce((n, r) => n + r.count, 0);
      shown.push(el('tr', { className: 'rejection more' }, el('td', { colSpan: 4, className: 'empty', textContent: '+' + rest + ' more' })));
    }
    $('rejection-rows').replaceChildren(...shown);
  }

  let statsBusy = false;
  async function refreshStats() {
    if (statsBusy) return;
    statsBusy = true;
    try {
      const s = await api('/v1/stats');
      renderGauges(s);
      renderCounts(s);
      renderWorkers(s);
      renderRejections(s);
      $('updated').textContent = 'updated ' + fmtClock(Date.now());
    } catch (err) {
      if (!noteAuthError(err)) $('updated').textContent = 'stats unavailable';
    } finally {
      statsBusy = false;
    }
  }

  // ---- jobs --------------------------------------------------------------------

  // rows maps a job id to its model and table row.
  const rows = new Map();

  function order(claim, state) { return (claim || 0) * 10 + (RANK[state] || 0); }

  function newRow(id) {
    const r = {
      id, kind: '', state: '', claim: 0, attempt: 0, maxAttempts: 0, runClaim: -1, worker: '', error: '',
      created: null, started: null, finished: null, progress: null, cancelRequested: false,
      children: null, open: false, kids: null,
      tr: null, cells: null, fetched: false,
    };
    rows.set(id, r);
    return r;
  }

  // mergeJob applies a whole job (list, get, cancel answer or snapshot
  // event). Jobs only move forward: an older view never overwrites a newer
  // one (by claim, then pending < running < final).
  function mergeJob(j) {
    if (!j || !j.id) return;
    const r = rows.get(j.id) || newRow(j.id);
    r.kind = j.kind || r.kind;
    r.created = parseTime(j.created_at) || r.created;
    r.maxAttempts = j.max_attempts || r.maxAttempts; // never changes: taken from any view
    if (!r.state || order(j.claim, j.state) >= order(r.claim, r.state)) {
      r.state = j.state;
      r.claim = j.claim || 0;
      r.attempt = j.attempt || 0; // the run number
      // The claim whose run r.attempt already counts (none while pending).
      r.runClaim = j.state === 'pending' ? -1 : r.claim;
      r.worker = j.worker || '';
      r.error = j.error || '';
      r.started = j.state === 'pending' ? null : (parseTime(j.started_at) || r.started);
      r.startedClaim = r.claim;
      r.finished = parseTime(j.finished_at) || (FINAL.has(j.state) ? r.finished : null);
      r.cancelRequested = !!j.cancel_requested;
      if (j.children) r.children = j.children;
      if (j.progress) r.progress = j.progress;
      else if (j.state !== 'running' && j.state !== 'succeeded') r.progress = null;
    }
    render(r);
  }

  // applyState merges a state event (a delta) into its row.
  function applyState(ev) {
    let r = rows.get(ev.job_id);
    const known = !!r;
    if (!r) r = newRow(ev.job_id);
    if (ev.kind) r.kind = ev.kind;
    if (!r.created && ev.state === 'pending' && (ev.claim || 0) === 0) r.created = parseTime(ev.at);
    if (r.state && order(ev.claim, ev.state) < order(r.claim, r.state)) {
      render(r);
      return; // stale: the row already shows a later change
    }
    if ((ev.claim || 0) !== r.claim) r.progress = null;
    r.state = ev.state;
    r.claim = ev.claim || 0;
    r.worker = ev.worker || '';
    r.error = ev.error || '';
    if (ev.state === 'running' && (!r.started || r.startedClaim !== r.claim)) {
      r.started = parseTime(ev.at);
      r.startedClaim = r.claim;
    }
    if (ev.attempt) {
      r.attempt = ev.attempt; // the run number, which state events carry
      if (ev.state !== 'pending') r.runClaim = r.claim;
    } else if (ev.state === 'running' && r.runClaim !== r.claim) {
      r.attempt++; // a new run; the next read of the job corrects it if need be
      r.runClaim = r.claim;
    }
    if (ev.state === 'pending') r.started = null;
    if (FINAL.has(ev.state)) r.finished = parseTime(ev.at);
    render(r);
    // A parent's final event carries no counts: read them once more.
    if (FINAL.has(ev.state) && r.children) touchParent(r.id);
    // Events carry neither the creation time of a job first seen mid-life
    // nor its max attempts: read a new job once.
    if (!known && (!r.created || !r.maxAttempts)) fillFromAPI(r);
  }

  function applyProgress(ev) {
    let r = rows.get(ev.job_id);
    if (!r) {
      r = newRow(ev.job_id);
      r.claim = ev.claim || 0;
      fillFromAPI(r);
    }
    if ((ev.claim || 0) < r.claim || FINAL.has(r.state) && r.state !== 'succeeded') return;
    r.progress = ev.progress || null;
    render(r);
  }

  // A fan-out's children fold under their parent: their events only
  // refresh the parent's row (its counts, its bar), at most twice a second.
  // An event that comes while a read is under way asks for one more read
  // after it: that read may have left the store before the event's change,
  // and the last child's event must not be lost that way.
  const parentReads = new Map(); // parent id -> { again }
  function touchParent(id) {
    const pending = parentReads.get(id);
    if (pending) {
      pending.again = true;
      return;
    }
    const read = { again: false };
    parentReads.set(id, read);
    const run = async () => {
      read.again = false; // what came before now is in this read
      try {
        const p = await api('/v1/jobs/' + encodeURIComponent(id));
        mergeJob(p);
        const r = rows.get(id);
        if (r && r.open) loadChildren(r);
      } catch (_) { /* the next event tries again */ }
      if (read.again) setTimeout(run, 500);
      else parentReads.delete(id);
    };
    setTimeout(run, 500);
  }

  // loadChildren shows the first page of a parent's children under its row.
  async function loadChildren(r) {
    let page;
    try {
      page = await api('/v1/jobs?parent=' + encodeURIComponent(r.id) + '&limit=' + LIST_LIMIT);
    } catch (_) { return; }
    if (!r.open) return;
    const list = (page.jobs || []).slice().sort((a, b) => (a.index || 0) - (b.index || 0));
    const items = list.map((c) => el('li', { className: 'kid', dataset: { state: c.state } },
      el('span', { className: 'mono', textContent: '#' + (c.index || 0) }),
      el('span', { className: 'badge', dataset: { state: c.state }, textContent: c.state }),
      el('span', { className: 'mono', textContent: c.worker || '' }),
      el('span', { className: 'err', textContent: c.error || '' })));
    if (page.next_cursor) items.push(el('li', { className: 'kid more', textContent: 'and more: sluice ls --parent ' + r.id }));
    r.kids.firstChild.replaceChildren(el('ul', { className: 'kids' }, ...items));
  }

  function toggleChildren(r) {
    r.open = !r.open;
    if (r.open) {
      r.kids = el('tr', { className: 'kids-row' }, el('td', { colSpan: 11 }));
      r.tr.after(r.kids);
      loadChildren(r);
    } else if (r.kids) {
      r.kids.remove();
      r.kids = null;
    }
  }

  async function fillFromAPI(r) {
    if (r.fetched) return;
    r.fetched = true;
    try {
      mergeJob(await api('/v1/jobs/' + encodeURIComponent(r.id)));
    } catch (_) { /* it shows what the events said */ }
  }

  // listed is set once the first list arrived: rows added later flash.
  let listed = false;

  async function loadJobs() {
    const page = await api('/v1/jobs?limit=' + LIST_LIMIT);
    for (const j of (page.jobs || [])) mergeJob(j);
    listed = true;
    renderEmpty();
  }

  // ---- job table -------------------------------------------------------------

  function buildRow(r) {
    const c = {
      id: el('td', { className: 'id', title: r.id, textContent: shortID(r.id) }),
      kind: el('td', { className: 'kind' }),
      state: el('td', { className: 'state' }),
      attempt: el('td', { className: 'attempt num' }),
      claim: el('td', { className: 'claim num' }),
      worker: el('td', { className: 'worker-id mono' }),
      wait: el('td', { className: 'wait num' }),
      run: el('td', { className: 'run num' }),
      progress: el('td', { className: 'prog' }),
      error: el('td', { className: 'err' }),
      act: el('td', { className: 'act' }),
    };
    c.badge = el('span', { className: 'badge' });
    c.state.append(c.badge);
    c.cancel = el('button', { type: 'button', className: 'cancel', textContent: 'cancel' });
    c.cancel.addEventListener('click', () => cancelJob(r));
    c.act.append(c.cancel);
    c.fold = el('button', { type: 'button', className: 'fold', textContent: 'children', hidden: true });
    c.fold.addEventListener('click', () => toggleChildren(r));
    c.act.append(c.fold);
    r.cells = c;
    r.tr = el('tr', { className: listed ? 'job fresh' : 'job', dataset: { jobId: r.id } },
      c.id, c.kind, c.state, c.attempt, c.claim, c.worker, c.wait, c.run, c.progress, c.error, c.act);
    placeRow(r);
  }

  // placeRow puts a new row in id order, newest first (job ids are
  // time-ordered UUIDv7), and trims the oldest finished rows.
  function placeRow(r) {
    const body = $('job-rows');
    let before = null;
    for (const tr of body.children) {
      const id = tr.dataset.jobId;
      if (id && id < r.id) { before = tr; break; }
    }
    body.insertBefore(r.tr, before);
    if (rows.size > MAX_ROWS) {
      const ids = [...rows.keys()].sort();
      for (const id of ids) {
        if (rows.size <= MAX_ROWS) break;
        const old = rows.get(id);
        if (FINAL.has(old.state)) {
          if (old.tr) old.tr.remove();
          rows.delete(id);
        }
      }
    }
    renderEmpty();
  }

  function renderEmpty() {
    const body = $('job-rows');
    const empty = body.querySelector('tr.empty-row');
    if (rows.size === 0 && !empty) {
      body.append(el('tr', { className: 'empty-row' }, el('td', { className: 'empty', colSpan: 11, textContent: 'no jobs yet' })));
    } else if (rows.size > 0 && empty) {
      empty.remove();
    }
  }

  function setText(node, text) { if (node.textContent !== text) node.textContent = text; }

  function renderTimes(r, now) {
    const c = r.cells;
    let wait = null;
    if (r.created) wait = (r.started || (r.state === 'pending' ? now : r.finished || now)) - r.created;
    let run = null;
    if (r.started && r.state !== 'pending') run = (r.finished || (FINAL.has(r.state) ? r.started : now)) - r.started;
    setText(c.wait, fmtDuration(wait));
    setText(c.run, fmtDuration(run));
  }

  function renderProgress(r) {
    const c = r.cells;
    const p = r.progress;
    if (!p) {
      if (c.progress.firstChild) c.progress.replaceChildren();
      return;
    }
    // A job that succeeded is done, whatever its last report said.
    const done = r.state === 'succeeded';
    const pct = done ? 100 : Math.max(0, Math.min(100, Number(p.percent) || 0));
    const fill = el('div', { className: 'fill' });
    fill.style.width = pct + '%';
    c.progress.replaceChildren(el('div', { className: 'progress', title: done ? '' : p.message || '' },
      el('div', { className: 'bar' }, fill),
      el('span', { className: 'pct', textContent: fmtPercent(pct) }),
      p.stage && !done ? el('span', { className: 'stage', textContent: p.stage }) : null));
  }

  function render(r) {
    if (!r.tr) buildRow(r);
    const c = r.cells;
    r.tr.dataset.state = r.state;
    setText(c.kind, r.kind);
    c.badge.dataset.state = r.state;
    setText(c.badge, r.state === 'running' && r.cancelRequested ? 'running · cancelling' : r.state || '…');
    // The attempt (the run number, what max_attempts limits) and, apart,
    // the claim counter, which also counts dispatch claims that never ran.
    const k = r.children;
    if (k) {
      // A fan-out parent runs nothing itself: its children's counts.
      const done = (k.succeeded || 0) + (k.failed || 0) + (k.cancelled || 0);
      setText(c.attempt, done + ' / ' + k.total);
      c.attempt.title = 'children: ' + k.succeeded + ' succeeded, ' + k.failed + ' failed, ' + k.cancelled +
        ' cancelled, ' + k.running + ' running, ' + k.pending + ' waiting';
      r.worker = k.running ? k.running + ' running' : '';
      c.fold.hidden = false;
      c.fold.textContent = r.open ? 'fold' : 'children';
    } else {
      setText(c.attempt, r.maxAttempts ? r.attempt + ' / ' + r.maxAttempts : String(r.attempt));
      c.attempt.title = 'run ' + r.attempt + (r.maxAttempts ? ' of at most ' + r.maxAttempts : '');
    }
    setText(c.claim, String(r.claim));
    c.claim.title = 'dispatch claim ' + r.claim + ' (fencing token; not a run count)';
    setText(c.worker, r.worker);
    setText(c.error, r.error);
    c.error.title = r.error;
    renderTimes(r, Date.now());
    renderProgress(r);
    const active = r.state === 'pending' || r.state === 'running';
    c.cancel.hidden = !active;
    c.cancel.disabled = !active || r.cancelRequested || r.cancelling;
    if (r.cancelRequested) c.cancel.textContent = 'cancelling';
  }

  function tickTimes() {
    const now = Date.now();
    for (const r of rows.values()) {
      if (r.tr && !FINAL.has(r.state)) renderTimes(r, now);
    }
  }

  async function cancelJob(r) {
    r.cancelling = true;
    render(r);
    try {
      mergeJob(await api('/v1/jobs/' + encodeURIComponent(r.id) + '/cancel', { method: 'POST' }));
    } catch (err) {
      if (!noteAuthError(err)) {
        if (err instanceof HTTPError && err.status === 409) {
          r.fetched = false;
          await fillFromAPI(r); // it finished meanwhile
        } else {
          showAlert('Cancel of ' + r.id + ' failed: ' + err.message);
        }
      }
    } finally {
      r.cancelling = false;
      render(r);
    }
  }

  // ---- event stream ------------------------------------------------------------

  let lastEventID = '';
  let streamCtl = null;
  let pollTimer = 0;

  function dispatch(type, data) {
    let ev;
    try { ev = JSON.parse(data); } catch (_) { return; }
    if (ev.parent) { touchParent(ev.parent); return; }
    switch (type) {
      case 'state': applyState(ev); break;
      case 'progress': applyProgress(ev); break;
      case 'snapshot': mergeJob(ev); break;
      default: break;
    }
  }

  // readSSE parses a text/event-stream body (the WHATWG event-stream
  // format: fields id, event, data; comment lines start with ':'; an empty
  // line dispatches) and calls onEvent(type, data, id) per event.
  async function readSSE(body, onEvent, onActivity) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let type = '';
    let data = [];
    let first = true;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      onActivity();
      buf += value;
      if (first) {
        if (buf.charCodeAt(0) === 0xfeff) buf = buf.slice(1);
        first = false;
      }
      for (;;) {
        const i = buf.search(/[\r\n]/);
        if (i < 0) break;
        if (buf[i] === '\r' && i === buf.length - 1) break; // a '\n' may follow in the next chunk
        const line = buf.slice(0, i);
        buf = buf.slice(buf[i] === '\r' && buf[i + 1] === '\n' ? i + 2 : i + 1);
        if (line === '') {
          if (data.length > 0) onEvent(type || 'message', data.join('\n'), lastEventID);
          type = '';
          data = [];
          continue;
        }
        if (line[0] === ':') continue; // comment: keep-alive ping
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? '' : line.slice(colon + 1);
        if (val[0] === ' ') val = val.slice(1);
        switch (field) {
          case 'event': type = val; break;
          case 'data': data.push(val); break;
          case 'id': if (!val.includes('\0')) lastEventID = val; break;
          default: break; // retry and unknown fields
        }
      }
    }
  }

  function startPolling() {
    if (pollTimer) return;
    const poll = async () => {
      try { await loadJobs(); } catch (err) { noteAuthError(err); }
    };
    poll();
    pollTimer = setInterval(poll, POLL_EVERY_MS);
  }

  function stopPolling() {
    clearInterval(pollTimer);
    pollTimer = 0;
  }

  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

  async function streamLoop() {
    let backoff = 500;
    for (;;) {
      const ctl = new AbortController();
      streamCtl = ctl;
      let idle = 0;
      const activity = () => {
        clearTimeout(idle);
        idle = setTimeout(() => ctl.abort(), STREAM_IDLE_MS);
      };
      let status = 0;
      try {
        const headers = authHeaders({ Accept: 'text/event-stream' });
        if (lastEventID) headers['Last-Event-ID'] = lastEventID;
        activity();
        const res = await fetch('/v1/events', { headers, signal: ctl.signal, cache: 'no-store' });
        status = res.status;
        const ct = res.headers.get('Content-Type') || '';
        if (!res.ok || !ct.startsWith('text/event-stream') || !res.body) {
          try { await res.body.cancel(); } catch (_) { /* nothing to drop */ }
          throw new HTTPError(res.status);
        }
        setConn('live');
        clearAlert();
        stopPolling();
        backoff = 500;
        // Listing after subscribing leaves no gap; the merge keeps the
        // newest of both views.
        loadJobs().catch(noteAuthError);
        await readSSE(res.body, dispatch, activity);
      } catch (err) {
        if (noteAuthError(err)) {
          clearTimeout(idle);
          await waitForToken();
          continue;
        }
      } finally {
        clearTimeout(idle);
      }
      if (streamCtl !== ctl) continue; // the token changed: reconnect at once
      // No stream here (404) or it dropped: poll the list meanwhile.
      setConn(status === 404 ? 'polling' : 'reconnecting', status === 404 ? 'polling' : 'reconnecting');
      startPolling();
      await sleep(status === 404 ? 10000 : backoff);
      backoff = Math.min(backoff * 2, 10000);
    }
  }

  let tokenWaiters = [];
  function waitForToken() { return new Promise((res) => tokenWaiters.push(res)); }

  function useToken(t) {
    token = t;
    try {
      if (t) localStorage.setItem(TOKEN_KEY, t);
      else localStorage.removeItem(TOKEN_KEY);
    } catch (_) { /* storage off */ }
    // Another tenant's view: start over.
    for (const r of rows.values()) if (r.tr) r.tr.remove();
    rows.clear();
    lastEventID = '';
    renderEmpty();
    clearAlert();
    setConn('connecting');
    const waiters = tokenWaiters;
    tokenWaiters = [];
    waiters.forEach((w) => w());
    if (streamCtl) {
      const ctl = streamCtl;
      streamCtl = null;
      ctl.abort();
    }
    refreshStats();
  }

  // ---- start ---------------------------------------------------------------------

  function start() {
    $('token').value = token;
    $('token-form').addEventListener('submit', (e) => {
      e.preventDefault();
      useToken($('token').value.trim());
    });
    renderEmpty();
    refreshStats();
    setInterval(() => { refreshStats(); tickTimes(); }, STATS_EVERY_MS);
    loadJobs().catch(noteAuthError);
    streamLoop();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
