// The edit view: the session every request carries, inserting an edge (with its canonical
// prompt shown before and its measured outcome after: an insert the server refuses (422) is
// its error, one it kept that did not take is a warning, neither is a success), and the edits
// in force, each with its own Remove when the server lists them one by one (else the patches
// as a whole).

import { ApiError } from './api.js';
import { canonicalPrompt, editPrompts, editsOf, insertVerdict, modeLabel, probText, takeAim, TAKE_MIN } from './edits.js';
import { buildDeepLink } from './deeplink.js';
import { h, num, put, showToken } from './dom.js';
import { $, client, errorText, scrollBox, SESSION_STORE, sessionId, setLink, showError } from './shared.js';

export function setSession(id, { quiet = false } = {}) {
  if (id) sessionStorage.setItem(SESSION_STORE, id);
  else sessionStorage.removeItem(SESSION_STORE);
  $('session').value = id;
  document.dispatchEvent(new Event('larql-session')); // the status line names it
  if (!quiet) {
    setLink('edit', true);
    loadPatches();
  }
}

function inferLink(prompt) {
  return h('a', { href: buildDeepLink('infer', prompt, { session: sessionId() }) }, '“' + prompt + '”');
}

function showCanonical() {
  const e = $('ins-entity').value.trim(), r = $('ins-relation').value.trim();
  put($('canonical'), e && r ? ['Canonical prompt: ', inferLink(canonicalPrompt(e, r)), ' — an insert is measured with it, a compose or knn insert keyed with it (the link infers it).'] : 'The canonical prompt appears here once entity and relation are typed.');
}

const probCell = (p) => {
  if (!Number.isFinite(p)) return h('td', { class: 'num muted' }, '–');
  return h('td', { class: 'num' + (p < TAKE_MIN ? ' error' : '') }, probText(p), p < TAKE_MIN ? h('span', { class: 'tag' }, 'did not take') : null);
};
const str = (x) => (typeof x === 'string' || Number.isFinite(x) ? String(x) : '');

export async function loadPatches() {
  const out = $('patches-out');
  try {
    const j = await client.patches();
    const list = Array.isArray(j.patches) ? j.patches : [];
    const edits = editsOf(j);
    const who = 'Requests use ' + (sessionId() ? `session “${sessionId()}”` : 'the global state') + '.';
    // the probability column only when the server measured some edit (ours lists none)
    const measured = edits.some((e) => Number.isFinite(e.target_probability));
    const editTable = edits.length
      ? scrollBox('edits', h('table', { class: 'edits' },
        h('tr', {}, ['entity', 'relation', 'target', 'mode', 'layer', 'prompts', measured ? 'target probability' : null, ''].filter((c) => c !== null)
          .map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr' }, 'remove')))),
        edits.map((e) => h('tr', { 'data-id': String(e.id) },
          h('td', {}, str(e.entity)), h('td', {}, str(e.relation)), h('td', { class: 'tok' }, showToken(str(e.target))),
          h('td', {}, modeLabel(e.mode)),
          h('td', { class: 'num' }, Array.isArray(e.layers) ? e.layers.join(' ') : str(e.layer)),
          h('td', { class: 'prompts' }, editPrompts(e).map((p, i) => [i ? '; ' : '', inferLink(p)])),
          measured ? probCell(e.target_probability) : null,
          h('td', {}, h('button', { type: 'button', 'aria-label': `Remove: ${str(e.entity)} ${str(e.relation)} ${str(e.target)}`.trim(), on: { click: () => removeEdit(e.id) } }, 'Remove'))))))
      : null;
    const patchTable = list.length
      ? scrollBox('patches', h('table', { class: 'patches' }, h('tr', {}, ['patch', 'operations', 'base model', ''].map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr' }, 'remove')))),
        list.map((p) => h('tr', {},
          h('td', {}, p.name), h('td', { class: 'num' }, p.operations), h('td', {}, p.base_model ?? ''),
          h('td', {}, h('button', { type: 'button', 'aria-label': `${edits.length ? 'Remove all' : 'Remove'}: patch ${p.name}`, on: { click: () => removePatch(p.name) } }, edits.length ? 'Remove all' : 'Remove'))))))
      : null;
    put(out, h('p', { class: 'muted' }, who),
      editTable ? [h('h3', {}, 'Each edit'), editTable] : null,
      patchTable
        ? [h('h3', {}, 'Patches'), edits.length ? null : h('p', { class: 'muted small' }, 'This server lists whole patches, not each edit: “edits” (or “session:…”) holds the inserts made here, and Remove takes them all.'), patchTable]
        : h('p', { class: 'muted' }, 'No patches.'));
  } catch (e) {
    showError(out, e);
  }
}

async function removeEdit(id) {
  try {
    await client.call('DELETE', '/v1/edits/' + encodeURIComponent(String(id)));
  } catch (e) {
    showError($('insert-out'), e);
  }
  loadPatches();
}

async function removePatch(name) {
  try {
    await client.removePatch(name);
  } catch (e) {
    showError($('insert-out'), e);
  }
  loadPatches();
}

async function runInsert() {
  const edge = { entity: $('ins-entity').value, relation: $('ins-relation').value, target: $('ins-target').value, mode: $('ins-mode').value };
  const layer = parseInt($('ins-layer').value, 10);
  if (Number.isInteger(layer)) edge.layer = layer;
  const out = $('insert-out');
  try {
    const j = await client.insert(edge);
    const v = insertVerdict(j);
    // the reply names what was written; the form's values stand in for any field it lacks
    const entity = str(j.entity) || edge.entity, relation = str(j.relation) || edge.relation;
    const prompt = canonicalPrompt(entity, relation);
    const what = (Number.isFinite(j.inserted) ? `${j.inserted} ` : '') + `(${modeLabel(j.mode ?? edge.mode)}) ${entity} —${relation}→ ${str(j.target) || edge.target}` +
      (j.session ? ` in session “${j.session}”` : ' into the global state') + (Number.isFinite(j.latency_ms) ? ` in ${num(j.latency_ms, 1)} ms` : '');
    const scale = Number.isFinite(j.down_scale) ? ` (down scaled ×${num(j.down_scale, 3)})` : '';
    const forced = Number.isInteger(j.tokens_on_logits) && j.tokens_on_logits > 0
      ? `; ${j.tokens_on_logits} of the target's tokens written on the logits (the model's head could not put them first)` : '';
    const p = probText(j.target_probability);
    const measured = Number.isFinite(j.target_probability)
      ? [`; the target's probability after the canonical prompt `, inferLink(prompt), `: ${p}`, scale, forced, '.']
      : [forced, '.'];
    if (v.took === false)
      put(out, h('div', { class: 'warnbox', role: 'alert' }, h('b', {}, 'The insert did not take: '),
        Number.isFinite(j.target_probability)
          ? ['after the canonical prompt ', inferLink(prompt), ` the target has probability ${p}${scale}; ${takeAim(j.mode)}.`]
          : null,
        typeof j.warning === 'string' && j.warning ? ` The server says: ${j.warning}` : Number.isFinite(j.target_probability) ? null : v.why + '.',
        h('br'), `Written: ${what}.`, h('br'),
        'Try another layer, another wording of the relation, or another mode; remove this edit below if it is of no use.'));
    else put(out, h('p', {}, `Inserted ${what}`, measured));
  } catch (e) {
    // a refusal (422: the server kept nothing) is said as such, in the server's words
    if (e instanceof ApiError && e.status === 422)
      put(out, h('p', { class: 'error', role: 'alert' }, h('b', {}, 'Refused by the server, nothing was inserted: '), errorText(e)));
    else showError(out, e);
  }
  loadPatches();
}

export function initEdit() {
  $('session').value = sessionId();
  $('session').addEventListener('change', () => setSession($('session').value.trim()));
  $('session-new').addEventListener('click', () => {
    const b = new Uint8Array(8);
    crypto.getRandomValues(b);
    setSession('web-' + [...b].map((x) => x.toString(16).padStart(2, '0')).join(''));
  });
  $('session-global').addEventListener('click', () => setSession(''));
  $('insert-form').addEventListener('submit', (ev) => { ev.preventDefault(); runInsert(); });
  $('patches-refresh').addEventListener('click', loadPatches);
  for (const id of ['ins-entity', 'ins-relation']) $(id).addEventListener('input', showCanonical);
  showCanonical();
}
