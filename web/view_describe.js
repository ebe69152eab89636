// The describe view: an entity's edges; each target links to its own describe (click-through),
// relations named from the vindex's probe labels or relation clusters (a note says when the
// vindex has neither), edges within the noise floor greyed with the reason given, and the
// band selector turned off when the model has no layer bands.

import { buildDeepLink } from './deeplink.js';
import { h, num, put, showToken, TOKEN_LEGEND } from './dom.js';
import { NONSENSE, noiseVerdict } from './noise.js';
import { $, client, exportBar, model, scrollBox, sessionId, setLink, showError } from './shared.js';

const LIMIT = 30;
let floors = new Map(); // band|session -> the made-up names' edges
let relInfo = null; // /v1/relations' counts, asked once

// Forgets what was learned from the server (a page load; an edit changes the noise floor).
export function resetDescribe() {
  floors = new Map();
  relInfo = null;
}

// The band selector does nothing on a model without layer bands: it is disabled and says so.
export function bandsKnown() {
  const sel = $('describe-band'), note = $('band-note');
  if (model.layerBands === null) {
    sel.value = 'all';
    sel.disabled = true;
    note.hidden = false;
    note.textContent = 'This model has no layer bands (fewer than 8 layers): every layer is scanned.';
  } else if (model.layerBands) {
    sel.disabled = false;
    note.hidden = true;
  }
}

async function noiseFloor(band) {
  const key = band + '|' + sessionId();
  if (!floors.has(key)) floors.set(key, await Promise.all(NONSENSE.map((n) => client.describe(n, band, LIMIT).then((j) => j.edges || []))));
  return floors.get(key);
}

async function relationNote(edges) {
  if (edges.some((e) => e.relation)) return null;
  if (!relInfo) relInfo = await client.call('GET', '/v1/relations').catch(() => ({}));
  if (!relInfo.cluster_count && !relInfo.probe_count)
    return 'This vindex has no relation clusters and no probe labels (clusters are built for models of 8 layers or more, unless --no-clusters), so edges have no relation names.';
  return 'None of these features belongs to a named relation cluster or probe label.';
}

function targetLink(t) {
  const name = String(t ?? '').trim();
  if (!name) return showToken(t);
  const href = buildDeepLink('describe', name, { band: $('describe-band').value, session: sessionId() });
  return h('a', {
    href, class: 'tok', title: `describe “${name}”`,
    on: { click: (ev) => { ev.preventDefault(); $('describe-entity').value = name; runDescribe(); } },
  }, showToken(t));
}

export async function runDescribe() {
  const entity = $('describe-entity').value.trim();
  const band = $('describe-band').value;
  if (!entity) return;
  setLink('describe');
  const out = $('describe-out');
  put(out, h('p', { class: 'muted' }, 'describing…'));
  try {
    const [j, fl] = await Promise.all([client.describe(entity, band, LIMIT), noiseFloor(band).catch(() => [])]);
    const edges = Array.isArray(j.edges) ? j.edges : [];
    if (!edges.length) {
      put(out, h('p', { class: 'muted' }, `No edges for “${entity}” in the ${band} band: the model has nothing above the minimum score for it.`));
      return;
    }
    const v = noiseVerdict(edges, fl);
    const rel = await relationNote(edges);
    const rows = edges.map((e, i) =>
      h('tr', { class: v.noisy[i] ? 'noise' : null },
        h('td', { class: 'num' }, i + 1),
        h('td', {}, e.relation ?? '', e.relation ? h('span', { class: 'tag' }, e.source ?? '') : null),
        h('td', { class: 'target' }, targetLink(e.target)),
        h('td', { class: 'num' }, num(e.gate_score, 2), v.noisy[i] ? h('span', { class: 'tag' }, 'noise') : null),
        h('td', { class: 'num' }, e.layer),
        h('td', { class: 'tok muted' }, Array.isArray(e.also) ? e.also.map(showToken).join('  ') : '')));
    const floorText = `Noise floor: made-up names (${NONSENSE.join(', ')}) get edges up to score ${num(v.floor, 2)} in this band; ` +
      `edges not above ${num(v.limit, 2)} (1.1 × that) are greyed and marked “noise”: the gate matches pieces of the word, not knowledge.`;
    put(out,
      h('div', { class: 'row' }, h('p', { class: 'muted' }, `${edges.length} edges for “${j.entity ?? entity}” (${num(j.latency_ms, 1)} ms). Click a target to describe it.`),
        exportBar('describe', j, entity)),
      v.known === false
        ? h('p', { class: 'warnbox', role: 'status' }, h('b', {}, 'Probably unknown to the model: '),
          `its strongest edge (${num(Math.max(...edges.map((e) => e.gate_score)), 2)}) is no stronger than a made-up name's.`)
        : null,
      rel ? h('p', { class: 'muted small' }, rel) : null,
      scrollBox('edges of the entity', h('table', { class: 'edges' },
        h('tr', {}, ['#', 'relation', 'target', 'score', 'layer', 'also'].map((c) => h('th', { scope: 'col' }, c))), rows)),
      h('p', { class: 'muted small' }, floorText),
      h('p', { class: 'muted small legend' }, TOKEN_LEGEND));
  } catch (e) {
    showError(out, e);
  }
}
