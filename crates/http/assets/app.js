// Strata dashboard. Every figure on these pages comes from the JSON API (/api/*) with the
// sign-in cookie; every change carries the sign-in's CSRF token. The DOM is built from text
// nodes only: nothing from the server is ever parsed as HTML, so a tool result or message
// containing markup shows as text.
'use strict';

const S = { me: null, timers: [], source: null, page: null };
const main = () => document.getElementById('main');

// --- DOM helpers: strings become text nodes; links may only point inside this page. ---
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'class') e.className = v;
    else if (k === 'href' && !/^[#/]/.test(String(v))) continue;
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : String(kid));
  }
  return e;
}
const text = (v) => (v === null || v === undefined ? '' : typeof v === 'string' ? v : JSON.stringify(v));
const pretty = (v) => el('pre', {}, typeof v === 'string' ? v : JSON.stringify(v, null, 2));
function table(label, heads, rows, empty) {
  if (!rows.length) return el('p', { class: 'muted' }, empty || 'Nothing here.');
  return el('div', { class: 'table-wrap' },
    el('table', { 'aria-label': label },
      el('thead', {}, el('tr', {}, heads.map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c)))))));
}
function card(n, l) { return el('div', { class: 'card' }, el('div', { class: 'n' }, text(n)), el('div', { class: 'l' }, l)); }
function ago(secs) {
  if (secs === null || secs === undefined) return '';
  const s = Math.max(0, Math.round(secs));
  if (s < 90) return `${s}s`;
  if (s < 5400) return `${Math.round(s / 60)}m`;
  if (s < 172800) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}
function when(t) {
  if (t === null || t === undefined || t === '') return '';
  const d = typeof t === 'number' ? new Date(t > 1e12 ? t : t * 1000) : new Date(t);
  return isNaN(d) ? text(t) : d.toLocaleString();
}
// Replaces an element's children, skipping the empty ones (the DOM would print `null`).
function fill(parent, ...kids) {
  parent.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
}
function problem(msg) { return el('p', { class: 'problem', role: 'alert' }, msg); }
function render(title, ...nodes) {
  document.title = `${title} · Strata`;
  fill(main(), el('h1', {}, title), ...nodes);
}
function every(ms, f) { S.timers.push(setInterval(f, ms)); }

// --- The API ---
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') {
    headers['X-Strata-CSRF'] = S.me ? S.me.csrf : '';
    headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) { location.assign('/ui/login'); throw new Error('signed out'); }
  let v = null;
  try { v = await r.json(); } catch (_) { v = { ok: false, error: `HTTP ${r.status}` }; }
  if (!v.ok) throw new Error(v.error || `HTTP ${r.status}`);
  return v.value;
}
async function invoke(tool, args) { return api('POST', '/api/invoke', { tool, args }); }

// --- Pages ---
const pages = {};

pages.overview = async () => {
  const [st, tools] = await Promise.all([api('GET', '/api/status'), api('GET', '/api/tools')]);
  const appr = st.approvals || {};
  const agents = st.agents || [];
  const store = st.store || {};
  const nodes = [
    el('div', { class: 'cards' },
      card(st.version, 'version'), card(ago(st.uptime_secs), 'uptime'),
      card(agents.length, 'agents'), card((tools.tools || []).length, 'tools'),
      card(st.live_sessions ?? '–', 'live sessions'), card(appr.pending ?? '–', 'pending approvals'),
      card(store.state || store.backend || '–', 'store')),
    el('h2', {}, 'Agents'),
    table('Agents', ['Agent', 'Provider', 'Health'], agents.map((a) => [
      el('a', { href: `#agents/${encodeURIComponent(a.id)}` }, a.id), text(a.provider),
      a.healthy ? el('span', { class: 'ok' }, 'running') : el('span', { class: 'bad lines' }, `not started: ${text(a.reason)}`)]),
    'No agents.'),
    el('h2', {}, 'Connectors'),
    table('Connectors', ['Connector', 'State', 'Since', 'Reconnects'], (st.connectors || []).map((c) => [
      c.name, c.up === null || c.up === undefined ? 'unknown' : c.up ? el('span', { class: 'ok' }, 'up') : el('span', { class: 'bad' }, 'down'),
      when(c.since_ms), text(c.reconnects)]), 'No connectors.'),
  ];
  if (st.cluster && !st.cluster.error) {
    nodes.push(el('h2', {}, 'Instances'), pretty(st.cluster));
  }
  const spend = (st.spend_today && st.spend_today.rows) || [];
  nodes.push(el('h2', {}, 'Spend today'),
    table('Spend today', ['Agent', 'Calls', 'Input tokens', 'Output tokens', 'Cost (USD)'],
      spend.map((r) => [r.key, text(r.calls), text(r.input_tokens), text(r.output_tokens), (r.cost_usd || 0).toFixed(4)]),
      'No model calls today.'));
  nodes.push(el('h2', {}, 'Recent warnings and alerts'),
    table('Recent warnings', ['When', 'Level', 'Where', 'Message'], (st.errors || []).slice().reverse().map((e) => [
      when(e.ts), el('span', { class: e.level === 'ERROR' ? 'bad' : 'warn' }, text(e.level)), text(e.target), el('span', { class: 'lines' }, text(e.message))]),
    'Nothing logged at warning level or above.'));
  render('Overview', ...nodes);
};

pages.approvals = async () => {
  const list = el('div', {}, el('p', {}, 'Loading…'));
  const decided = el('div', {});
  let shown = null;
  render('Approvals',
    S.me.can_approve ? null : el('p', { class: 'notice' }, 'You may look but not decide: your token is not an approver.'),
    el('h2', {}, 'Waiting'), list, el('h2', {}, 'Decided recently'), decided);
  const refresh = async () => {
    const [pending, all] = await Promise.all([
      api('GET', '/api/approvals?status=pending&limit=100'),
      api('GET', '/api/approvals?status=all&limit=50')]);
    const rows = pending.approvals || [];
    const key = rows.map((r) => r.id).join(',');
    if (key !== shown) {
      shown = key;
      const now = Date.now() / 1000;
      fill(list, table('Waiting approvals',
        ['Agent', 'Tool', 'For', 'What', 'Arguments', 'Age', 'Decision'],
        rows.map((r) => [text(r.agent_id), el('code', {}, r.tool), text(r.principal), text(r.description),
          pretty(r.args), ago(now - r.created_at), S.me.can_approve ? decide(r) : el('span', { class: 'muted' }, '—')]),
        'Nothing is waiting for a decision.'));
    }
    fill(decided, table('Decided approvals', ['Tool', 'Outcome', 'By', 'Reason', 'When'],
      (all.approvals || []).filter((r) => r.status !== 'pending').map((r) => [
        el('code', {}, r.tool), el('span', { class: r.status === 'approved' ? 'ok' : 'bad' }, r.status),
        text(r.approver), text(r.reason), when(r.decided_at)]), 'None yet.'));
  };
  await refresh();
  every(2000, () => refresh().catch(() => {}));
};

function decide(r) {
  const reason = el('input', { type: 'text', 'aria-label': `Reason for ${r.tool} (${r.id})`, placeholder: 'reason (optional)', class: 'reason' });
  const out = el('span', { role: 'status' });
  const go = (decision) => async (ev) => {
    ev.target.disabled = true;
    try {
      const v = await api('POST', `/api/approvals/${encodeURIComponent(r.id)}/${decision}`, { reason: reason.value || undefined });
      fill(out, el('span', { class: v.status === 'approved' ? 'ok' : 'bad' }, v.status));
    } catch (e) { fill(out, problem(e.message)); ev.target.disabled = false; }
  };
  return el('div', { class: 'row' }, reason,
    el('button', { type: 'button', class: 'primary approve', 'data-id': r.id, onclick: go('approve') }, 'Approve'),
    el('button', { type: 'button', class: 'danger deny', 'data-id': r.id, onclick: go('deny') }, 'Deny'), out);
}

pages.activity = async () => {
  const f = { agent: '', tool: '', status: '', principal: '' };
  const filters = el('div', { class: 'row', role: 'search' }, Object.keys(f).map((k) => el('div', {},
    el('label', { for: `f-${k}` }, k), el('input', { id: `f-${k}`, type: 'text', oninput: (e) => { f[k] = e.target.value.trim(); draw(); } }))));
  const chain = el('p', { class: 'notice', role: 'status' }, 'Checking the audit chain…');
  const body = el('div', {});
  let events = [];
  const keep = (e) => (!f.agent || text(e.agent_id).includes(f.agent)) && (!f.tool || text(e.tool || e.event).includes(f.tool))
    && (!f.status || text(e.status) === f.status) && (!f.principal || text(e.principal).includes(f.principal));
  const draw = () => fill(body, table('Events', ['When', 'Agent', 'Tool or event', 'Principal', 'Status', 'ms', 'Details'],
    events.filter(keep).slice(0, 300).map((e) => [when(e.ts), text(e.agent_id), el('code', {}, text(e.tool || e.event)),
      text(e.principal), el('span', { class: e.status === 'ok' ? 'ok' : e.status ? 'bad' : '' }, text(e.status)),
      e.elapsed_ms === undefined ? '' : Math.round(e.elapsed_ms), pretty(e.error ? { error: e.error, args: e.args } : (e.args ?? e))]),
    'No events match.'));
  render('Activity', chain, filters, body);
  const first = await api('GET', '/api/events?limit=200');
  events = (first.events || []).slice().reverse();
  draw();
  api('GET', '/api/audit/verify').then((v) => {
    fill(chain, v.intact
      ? el('span', { class: 'ok' }, `Audit chain intact: ${v.records} records${v.starts_mid_chain ? ' (the oldest file starts mid-chain: older files were deleted)' : ''}.`)
      : el('span', { class: 'bad' }, `Audit chain broken in ${v.file} at line ${v.line}: ${v.reason}`));
  }).catch((e) => fill(chain, problem(e.message)));
  const src = new EventSource('/api/events/stream');
  S.source = src;
  src.addEventListener('audit', (m) => {
    try { events.unshift(JSON.parse(m.data)); } catch (_) { return; }
    events.length = Math.min(events.length, 1000);
    draw();
  });
};

pages.tools = async (arg) => {
  const v = await api('GET', '/api/tools');
  const tools = v.tools || [];
  if (arg) {
    const t = tools.find((x) => x.name === arg);
    if (!t) return render('Tools', problem(`No tool ${arg} you may see.`));
    return render(`Tool ${t.name}`, el('p', {}, t.description), el('p', { class: 'muted' },
      `Layer ${text(t.layer)} · side effects ${text(t.side_effects)}${t.hitl ? ' · asks for approval' : ''}`),
    el('h2', {}, 'Invoke'), form(t), el('h2', {}, 'JSON Schema'), pretty(t.input_schema));
  }
  const byLayer = {};
  for (const t of tools) (byLayer[text(t.layer)] ||= []).push(t);
  render('Tools', ...Object.keys(byLayer).sort().flatMap((layer) => [el('h2', {}, `Layer ${layer}`),
    table(`Tools in ${layer}`, ['Tool', 'Description', 'Side effects'], byLayer[layer].map((t) => [
      el('a', { href: `#tools/${encodeURIComponent(t.name)}` }, t.name), t.description, text(t.side_effects)]))]));
};

// An invoke form generated from a tool's JSON Schema: typed inputs, required fields, enums as
// selects; anything else (objects, arrays) as JSON in a text area.
function form(t) {
  const schema = t.input_schema || {};
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const fields = [];
  for (const [name, p0] of Object.entries(props)) {
    const p = resolve(p0, schema);
    const id = `arg-${name}`;
    const types = [].concat(p.type || []);
    const type = types.find((x) => x !== 'null') || (p.enum ? 'string' : 'json');
    let input;
    if (p.enum) {
      input = el('select', { id, name }, required.has(name) ? null : el('option', { value: '' }, '—'),
        p.enum.filter((x) => x !== null).map((x) => el('option', { value: text(x) }, text(x))));
    } else if (type === 'boolean') {
      input = el('select', { id, name }, el('option', { value: '' }, '—'), el('option', { value: 'true' }, 'true'), el('option', { value: 'false' }, 'false'));
    } else if (type === 'integer' || type === 'number') {
      input = el('input', { id, name, type: 'number', step: type === 'integer' ? '1' : 'any' });
    } else if (type === 'string') {
      input = el('input', { id, name, type: 'text' });
    } else {
      input = el('textarea', { id, name, placeholder: 'JSON' });
    }
    if (required.has(name)) input.required = true;
    input.dataset.kind = p.enum ? 'enum' : type;
    fields.push(el('div', { class: 'field' }, el('label', { for: id }, name, required.has(name) ? ' *' : ''),
      p.description ? el('div', { class: 'desc' }, p.description) : null, input));
  }
  const out = el('div', { role: 'status', id: 'invoke-result' });
  const f = el('form', { id: 'invoke-form', 'aria-label': `Invoke ${t.name}` }, fields,
    el('button', { type: 'submit', class: 'primary' }, 'Invoke'), out);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const args = {};
    try {
      for (const i of f.querySelectorAll('[name]')) {
        if (i.value === '') continue;
        const k = i.dataset.kind;
        args[i.name] = k === 'integer' ? parseInt(i.value, 10) : k === 'number' ? Number(i.value)
          : k === 'boolean' ? i.value === 'true' : k === 'json' ? JSON.parse(i.value) : i.value;
      }
    } catch (e) { fill(out, problem(`Not JSON: ${e.message}`)); return; }
    fill(out, el('p', { class: 'muted' }, t.hitl ? 'Waiting for approval…' : 'Running…'));
    try {
      const r = await api('POST', '/api/invoke', { tool: t.name, args });
      fill(out, el('p', {}, 'Status: ', el('strong', { class: r.status === 'ok' ? 'ok' : 'bad' }, r.status),
        ` in ${Math.round(r.elapsed_ms)} ms`), r.error ? problem(r.error) : null, pretty(r.value));
    } catch (e) { fill(out, problem(e.message)); }
  });
  return f;
}
function resolve(p, root) {
  if (p && p.$ref) {
    const name = p.$ref.split('/').pop();
    return ((root.$defs || root.definitions || {})[name]) || {};
  }
  if (p && (p.anyOf || p.oneOf)) {
    const alt = (p.anyOf || p.oneOf).find((x) => x.type !== 'null') || {};
    return { ...resolve(alt, root), description: p.description || alt.description };
  }
  return p || {};
}

pages.sessions = async (arg) => {
  if (arg) return transcript(arg);
  const q = el('input', { id: 's-q', type: 'search', placeholder: 'agent or session id' });
  const body = el('div', {});
  const load = async () => {
    const v = await api('GET', `/api/sessions?limit=200&q=${encodeURIComponent(q.value.trim())}`);
    fill(body, table('Sessions', ['Agent', 'Session', 'Turns', 'Last active'], (v.sessions || []).map((s) => [
      s.agent_id, el('a', { href: `#sessions/${encodeURIComponent(s.agent_id)}/${encodeURIComponent(s.session_id)}` }, s.session_id),
      text(s.turns), when(s.updated_at)]), 'No sessions.'));
  };
  q.addEventListener('input', () => load().catch((e) => fill(body, problem(e.message))));
  render('Sessions', el('div', { class: 'row', role: 'search' }, el('div', {}, el('label', { for: 's-q' }, 'Search'), q)), body);
  await load();
};

async function transcript(arg) {
  const [agent, session] = arg.split('/').map(decodeURIComponent);
  const v = await api('GET', `/api/sessions/${encodeURIComponent(agent)}/${encodeURIComponent(session)}`);
  const msgs = [];
  if (v.summary) msgs.push(el('div', { class: 'msg summary' }, el('div', { class: 'meta' }, 'Summary of what came before'), el('div', { class: 'text' }, v.summary)));
  for (const t of v.turns || []) {
    for (const m of t.messages || []) {
      msgs.push(el('div', { class: `msg ${m.role}` },
        el('div', { class: 'meta' }, `${m.role}${m.tool_call_id ? ` · result of ${m.tool_call_id}` : ''} · ${when(t.at_ms)}`),
        m.content ? el('div', { class: 'text' }, m.content) : null,
        (m.tool_calls || []).map((c) => el('div', {}, 'Calls ', el('code', {}, c.name), ` (${c.id})`, pretty(c.arguments)))));
    }
  }
  const reset = el('button', { type: 'button', class: 'danger', onclick: async () => {
    if (!confirm(`Reset session ${session} of ${agent}? The agent forgets this conversation.`)) return;
    try { await api('POST', `/api/sessions/${encodeURIComponent(agent)}/${encodeURIComponent(session)}/reset`, {}); location.hash = '#sessions'; }
    catch (e) { reset.after(problem(e.message)); }
  } }, 'Reset session');
  render(`Session ${session}`, el('p', {}, el('a', { href: '#sessions' }, '← All sessions'), ` · agent ${agent}`),
    S.me.tier === 'viewer' ? null : reset, el('div', { id: 'transcript' }, msgs.length ? msgs : el('p', { class: 'muted' }, 'No messages.')));
}

pages.memory = async () => {
  const q = el('input', { id: 'm-q', type: 'search', placeholder: 'what to look for' });
  const mode = el('select', { id: 'm-mode' }, el('option', { value: 'memory_search' }, 'keyword and meaning'),
    el('option', { value: 'memory_semantic_search' }, 'meaning only'));
  const scope = el('input', { id: 'm-scope', type: 'text', placeholder: 'global, agent:<id>, group:<name>' });
  const body = el('div', {});
  const show = (list) => fill(body, table('Memories', ['Memory', 'Scope', 'Kind', 'Metadata', ''], list.map((m) => [
    el('div', { class: 'text' }, m.content ?? m.text ?? ''), text(m.scope), text(m.type ?? m.kind),
    pretty(Object.fromEntries(Object.entries(m).filter(([k]) => !['content', 'text'].includes(k)))),
    S.me.tier === 'viewer' ? '' : forget(m)]), 'No memories found.'));
  const run = async (ev) => {
    if (ev) ev.preventDefault();
    try {
      const r = q.value.trim()
        ? await invoke(mode.value, { query: q.value.trim(), limit: 50 })
        : await invoke('memory_list', scope.value.trim() ? { scope: scope.value.trim(), limit: 100 } : { limit: 100 });
      if (r.status !== 'ok') return fill(body, problem(r.error || r.status));
      show(r.value.memories || []);
    } catch (e) { fill(body, problem(e.message)); }
  };
  render('Memory', el('form', { class: 'row', role: 'search', onsubmit: run },
    el('div', {}, el('label', { for: 'm-q' }, 'Search'), q), el('div', {}, el('label', { for: 'm-mode' }, 'Mode'), mode),
    el('div', {}, el('label', { for: 'm-scope' }, 'Scope (list)'), scope), el('button', { type: 'submit' }, 'Go')), body);
  await run();
};

function forget(m) {
  const reason = el('input', { type: 'text', 'aria-label': `Reason to forget ${m.id}`, placeholder: 'reason', required: true });
  const out = el('span', { role: 'status' });
  return el('div', { class: 'row' }, reason, el('button', { type: 'button', class: 'danger forget', onclick: async () => {
    if (!reason.value.trim()) { fill(out, problem('Give a reason.')); return; }
    try {
      const r = await invoke('memory_forget', { id: m.id, reason: reason.value.trim() });
      fill(out, r.status === 'ok' ? el('span', { class: 'ok' }, 'forgotten') : problem(r.error || r.status));
    } catch (e) { fill(out, problem(e.message)); }
  } }, 'Forget'), out);
}

pages.agents = async (arg) => {
  const v = await api('GET', '/api/agents');
  const agents = v.agents || [];
  const one = arg && agents.find((a) => a.id === arg);
  if (one) {
    return render(`Agent ${one.id}`, el('p', {}, el('a', { href: '#agents' }, '← All agents')),
      el('p', {}, one.running ? el('span', { class: 'ok' }, 'running') : el('span', { class: 'bad lines' }, `not started: ${text(one.reason)}`)),
      el('h2', {}, 'Tools it may use'), el('p', {}, (one.tools || []).map((t) => el('code', {}, t, ' '))),
      el('h2', {}, 'Configuration (merged, secrets masked)'), pretty(one.config));
  }
  render('Agents & skills',
    table('Agents', ['Agent', 'State', 'Provider', 'Tools'], agents.map((a) => [
      el('a', { href: `#agents/${encodeURIComponent(a.id)}` }, a.id),
      a.running ? el('span', { class: 'ok' }, 'running') : el('span', { class: 'bad lines' }, text(a.reason)),
      text(a.provider), text((a.tools || []).length)]), 'No agents.'),
    el('h2', {}, 'Skills'),
    table('Skills', ['Skill', 'Kind', 'Description', 'From', ''], (v.skills || []).map((s) => [
      el('code', {}, s.name), text(s.kind), text(s.description), text(s.origin),
      s.tool ? el('a', { href: `#tools/${encodeURIComponent(s.tool)}` }, 'run') : '']), 'No skills.'));
};

pages.schedules = async () => {
  const body = el('div', {});
  const load = async () => {
    const v = await api('GET', '/api/schedules');
    fill(body, table('Schedules', ['Schedule', 'When', 'Runs', 'Next', 'Last', 'Status', 'Failures', ''],
      (v.schedules || []).map((s) => [el('code', {}, s.name), text(s.when), `${text(s.kind)} ${text(s.runs)}`,
        s.paused ? el('span', { class: 'warn' }, 'paused') : when(s.next_run), when(s.last_run), text(s.last_status), text(s.failures),
        S.me.can_approve ? el('div', { class: 'row' }, act(s.name, 'run', 'Run now', load), act(s.name, s.paused ? 'resume' : 'pause', s.paused ? 'Resume' : 'Pause', load)) : '']),
      'No schedules.'));
  };
  render('Schedules', body);
  await load();
};
pages.goals = async (id) => {
  if (id) return goalPage(id);
  const v = await api('GET', '/api/goals');
  render('Goals', el('p', { class: 'muted' }, 'Long-running goals agents and people pursue together (docs/GOALS.md); agents change them with the goal_* tools.'),
    table('Goals', ['Goal', 'State', 'Participants', 'Open tasks', 'Open proposals', 'Updated'],
      (v.goals || []).map((g) => [
        el('a', { href: `#goals/${encodeURIComponent(g.id)}` }, text(g.title)), text(g.state),
        (g.participants || []).join(', '), text(g.open_tasks), text(g.open_proposals), when(g.updated_ms)]),
      'No goals yet.'));
};
async function goalPage(id) {
  const [v, ev] = await Promise.all([
    api('GET', `/api/goals/${encodeURIComponent(id)}`),
    api('GET', `/api/goals/${encodeURIComponent(id)}/events?limit=200`)]);
  const g = v.goal;
  const votes = (p) => (p.votes || []).map((x) => `${x.voter}: ${x.choice}${x.reason ? ` (${x.reason})` : ''}`).join('; ');
  render(text(g.title),
    el('p', {}, el('a', { href: '#goals' }, '← all goals')),
    el('div', { class: 'cards' }, card(g.state, 'state'), card((g.participants || []).length, 'participants'),
      card(g.turn_budget, 'turn budget'), card(g.channel || '–', 'channel')),
    g.description ? el('p', {}, g.description) : null,
    el('p', { class: 'muted' }, `Owner ${text(g.owner)} · participants ${(g.participants || []).map((p) => p.id).join(', ')}`),
    g.blocked ? el('p', { class: 'notice' }, `Waiting for ${text(g.blocked.person)}: ${text(g.blocked.question)}`) : null,
    el('h2', {}, 'Tasks'),
    table('Tasks', ['#', 'Task', 'Assignee', 'Status', 'Due'], (g.tasks || []).map((t) => [
      text(t.id), text(t.title), text(t.assignee), text(t.status), text(t.due)]), 'No tasks.'),
    el('h2', {}, 'Proposals'),
    table('Proposals', ['#', 'Proposal', 'Kind', 'By', 'Votes', 'Window closes', 'Status'], (g.proposals || []).map((p) => [
      text(p.id), text(p.title), text(p.kind), text(p.by), votes(p), when(p.closes_ms),
      p.outcome ? `${text(p.status)}: ${text(p.outcome)}` : text(p.status)]), 'No proposals.'),
    el('h2', {}, 'Log'),
    table('Log', ['#', 'When', 'Who', 'What', 'Details', 'Why'], (ev.events || []).slice().reverse().map((e) => [
      text(e.seq), when(e.at_ms), text(e.actor), text(e.kind), text(e.detail), text(e.reason)]), 'Nothing logged.'));
}

pages.turns = async (id) => {
  if (id) return turnPage(id);
  const v = await api('GET', '/api/turns?limit=200');
  render('Turns', el('p', { class: 'muted' }, 'Every turn is journaled: one cut off by a crash continues from its last step when Strata starts again, without repeating what it did (docs/DURABILITY.md). Unfinished: running now, or its process died.'),
    table('Turns', ['Turn', 'Started', 'Outcome', 'Agent', 'Channel', 'Sender', 'Resumed', 'Steps', 'Message'],
      (v.turns || []).map((t) => [
        el('a', { href: `#turns/${encodeURIComponent(t.turn_id)}` }, text(t.turn_id)), text(t.started),
        t.outcome === 'unfinished' ? el('span', { class: 'warn' }, 'unfinished') : text(t.outcome),
        text(t.agent), text(t.channel), text(t.sender), text(t.resumed), text(t.steps), text(t.message)]),
      'No journaled turns.'));
};
async function turnPage(id) {
  const v = await api('GET', `/api/turns/${encodeURIComponent(id)}`);
  const t = v.turn;
  const cost = (s) => s.kind === 'model' ? `${text(s.input_tokens)} in / ${text(s.output_tokens)} out tokens`
    : (s.elapsed_ms !== undefined && s.elapsed_ms !== null ? `${Number(s.elapsed_ms).toFixed(1)} ms` : '');
  render(text(t.turn_id),
    el('p', {}, el('a', { href: '#turns' }, '← all turns')),
    el('div', { class: 'cards' }, card(t.outcome, 'outcome'), card(t.resumed, 'resumed'), card(t.steps, 'steps'), card(t.agent, 'agent')),
    el('p', { class: 'muted' }, `${text(t.channel)} · ${text(t.sender)} · started ${text(t.started)}${t.ended ? ` · ended ${text(t.ended)}` : ''}`),
    el('p', {}, text(t.message)),
    table('Steps', ['#', 'When', 'Step', 'Key', 'Status', 'Tool', 'Cost', 'Detail'], (v.steps || []).map((s) => [
      text(s.seq), text(s.at), text(s.kind), text(s.key), text(s.status), text(s.tool), cost(s), text(s.detail)]), 'No steps recorded.'));
}

function act(name, action, label, after) {
  return el('button', { type: 'button', onclick: async (ev) => {
    try { await api('POST', `/api/schedules/${encodeURIComponent(name)}/${action}`, {}); await after(); }
    catch (e) { ev.target.after(problem(e.message)); }
  } }, label);
}

pages.usage = async () => {
  const by = el('select', { id: 'u-by' }, ['agent', 'model', 'day', 'sender', 'session'].map((b) => el('option', { value: b }, b)));
  const since = el('select', { id: 'u-since' }, [['1d', 'last day'], ['7d', 'last 7 days'], ['30d', 'last 30 days']].map(([v, l]) => el('option', { value: v }, l)));
  since.value = '7d';
  const body = el('div', {});
  const load = async () => {
    const v = await api('GET', `/api/usage?by=${by.value}&since=${since.value}`);
    const rows = v.rows || [];
    const max = Math.max(1e-9, ...rows.map((r) => r.cost_usd || 0));
    const maxTok = Math.max(1, ...rows.map((r) => (r.input_tokens || 0) + (r.output_tokens || 0)));
    const useCost = rows.some((r) => r.cost_usd > 0);
    fill(body, 
      el('div', { class: 'bars', role: 'img', 'aria-label': `${useCost ? 'Cost' : 'Tokens'} by ${by.value}` }, rows.map((r) => {
        const n = useCost ? r.cost_usd : (r.input_tokens + r.output_tokens);
        const pct = Math.round(100 * n / (useCost ? max : maxTok));
        return el('div', { class: 'bar' }, el('span', {}, r.key), el('div', {}, el('div', { class: 'fill', style: null, 'data-pct': pct })),
          el('span', {}, useCost ? `$${n.toFixed(4)}` : `${n} tok`));
      })),
      table('Usage', [by.value, 'Calls', 'Input', 'Output', 'Cached input', 'Cost (USD)', 'Unpriced calls'], rows.map((r) => [
        r.key, text(r.calls), text(r.input_tokens), text(r.output_tokens), text(r.cached_input_tokens), (r.cost_usd || 0).toFixed(4), text(r.unpriced_calls)]),
      'No model calls in this period.'));
    // Widths from the data, set through the CSSOM (the policy allows no inline style attributes).
    for (const f of body.querySelectorAll('.fill')) f.style.width = `${f.dataset.pct}%`;
  };
  by.addEventListener('change', load);
  since.addEventListener('change', load);
  render('Usage', el('div', { class: 'row' }, el('div', {}, el('label', { for: 'u-by' }, 'By'), by), el('div', {}, el('label', { for: 'u-since' }, 'Since'), since)), body);
  await load();
};

pages.config = async () => {
  const v = await api('GET', '/api/config');
  const rows = (v.values || []).map((r) => [el('code', {}, r.key), pretty(r.value), text(r.origin)]);
  const filter = el('input', { id: 'c-q', type: 'search', placeholder: 'key' });
  const body = el('div', {}, table('Configuration', ['Key', 'Value', 'Set by'], rows));
  filter.addEventListener('input', () => {
    const q = filter.value.trim();
    fill(body, table('Configuration', ['Key', 'Value', 'Set by'], rows.filter((r) => r[0].textContent.includes(q))));
  });
  render('Config', el('p', { class: 'muted' }, 'The merged configuration, core → modules → overlay (later wins); secrets masked.'),
    el('div', { class: 'row', role: 'search' }, el('div', {}, el('label', { for: 'c-q' }, 'Filter'), filter)), body);
};

// --- Routing ---
async function route() {
  for (const t of S.timers) clearInterval(t);
  S.timers = [];
  if (S.source) { S.source.close(); S.source = null; }
  const [name, ...rest] = (location.hash.slice(1) || 'overview').split('/');
  const page = pages[name] ? name : 'overview';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.getAttribute('href') === `#${page}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  S.page = page;
  try {
    await pages[page](rest.length ? rest.join('/') : undefined);
  } catch (e) {
    if (S.page === page) render(page[0].toUpperCase() + page.slice(1), problem(e.message));
  }
  main().focus({ preventScroll: true });
}

async function start() {
  S.me = await api('GET', '/api/session');
  document.getElementById('who').textContent = `${S.me.token_name || S.me.principal} · ${S.me.tier}`;
  document.getElementById('logout').addEventListener('click', async () => {
    await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin', headers: { 'X-Strata-CSRF': S.me.csrf } });
    location.assign('/ui/login');
  });
  window.addEventListener('hashchange', route);
  await route();
}
document.addEventListener('DOMContentLoaded', () => start().catch((e) => fill(main(), problem(e.message))));
