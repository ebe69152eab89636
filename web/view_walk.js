// The walk view: the heat map of the features the prompt's last token fires, layer by layer.
// Every cell and row label is reachable by keyboard (one tab stop, arrow keys inside the map);
// pointing at, tapping or focusing a cell shows its feature; a click, a tap on the row label or
// Enter opens the layer's strongest features from /v1/select, the ones this prompt fired first.

import { h, num, put, s, showToken, TOKEN_LEGEND } from './dom.js';
import { heatColor, heatModel, heatTextColor } from './heat.js';
import { rove } from './roving.js';
import { $, client, exportBar, model, scrollBox, setLink, showError } from './shared.js';

const CELL_W = 64, CELL_H = 22, LABEL_W = 40;

function hoverText(layer, c) {
  return `layer ${layer} · feature ${c.feature} · gate ${num(c.gate_score, 2)} · top token ${showToken(c.target)}` +
    (c.relation ? ` · relation ${c.relation}` : '');
}

function drawHeat(m) {
  const w = LABEL_W + Math.max(1, m.cols) * CELL_W, hgt = m.rows.length * CELL_H + 4;
  const svg = s('svg', { class: 'heat', width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}`, role: 'group', 'aria-label': 'Heat map: one row per layer' });
  const grid = [];
  m.rows.forEach((row, r) => {
    const y = r * CELL_H + 2;
    const g = s('g', { class: 'row', 'data-layer': row.layer });
    const open = () => showLayer(row.layer, row, g);
    const label = s('text', { class: 'rowlabel', x: 4, y: y + 15, role: 'button', 'aria-label': `L${row.layer}: list layer ${row.layer}'s features`, on: { click: open } }, 'L' + row.layer);
    g.appendChild(label);
    const items = [label];
    row.cells.forEach((c, i) => {
      const x = LABEL_W + i * CELL_W;
      const show = (ev) => {
        $('walk-hover').textContent = hoverText(row.layer, c);
        for (const o of $('walk-out').querySelectorAll('rect.cur')) o.classList.remove('cur');
        if (ev && ev.currentTarget) ev.currentTarget.classList.add('cur');
      };
      const rect = s('rect', {
        class: 'cell', x, y, width: CELL_W - 2, height: CELL_H - 2, fill: heatColor(c.gate_score, m.maxAbs),
        role: 'button', 'aria-label': hoverText(row.layer, c),
        on: { mouseenter: show, focus: show, click: (ev) => { show(ev); open(); } },
      }, s('title', {}, hoverText(row.layer, c)));
      g.appendChild(rect);
      items.push(rect);
      const t = showToken(c.target);
      g.appendChild(s('text', { x: x + 4, y: y + 15, fill: heatTextColor(c.gate_score, m.maxAbs), 'pointer-events': 'none', 'aria-hidden': 'true' },
        t.length > 8 ? t.slice(0, 7) + '…' : t));
    });
    grid.push(items);
    svg.appendChild(g);
  });
  rove(grid, { onActivate: (el) => el.dispatchEvent(new Event('click')) });
  return svg;
}

async function showLayer(layer, row, g) {
  for (const el of $('walk-out').querySelectorAll('g')) el.classList.remove('sel');
  g.classList.add('sel');
  const out = $('walk-layer');
  put(out, h('p', { class: 'muted' }, `layer ${layer}: loading its features…`));
  const fired = new Map(row.cells.map((c) => [c.feature, c]));
  try {
    const j = await client.select(layer, 30);
    const edges = Array.isArray(j.edges) ? j.edges : [];
    // the prompt's own features first (those the list has, then those it lacks), then the rest
    const mine = row.cells.map((c) => ({ ...(edges.find((e) => e.feature === c.feature) || { feature: c.feature, target: c.target, relation: c.relation }) }));
    const rest = edges.filter((e) => !fired.has(e.feature));
    put(out, h('h3', {}, `Layer ${layer}`),
      h('p', { class: 'muted' }, `The ${row.cells.length} features this prompt fired here first, then the layer's strongest features by confidence (${edges.length} of ${j.total ?? '?'} asked for; “–”: a fired feature not among them):`),
      scrollBox('the layer’s features', h('table', {}, h('tr', {}, ['feature', 'top token', 'confidence', 'relation', 'this prompt'].map((c) => h('th', { scope: 'col' }, c))),
        [...mine, ...rest].map((e) => h('tr', {},
          h('td', { class: 'num' }, e.feature),
          h('td', { class: 'tok' }, showToken(e.target)),
          h('td', { class: 'num' }, num(e.c_score, 2)),
          h('td', {}, e.relation ?? ''),
          h('td', { class: 'num' }, fired.has(e.feature) ? 'gate ' + num(fired.get(e.feature).gate_score, 2) : ''))))));
  } catch (e) {
    showError(out, e);
  }
}

export async function runWalk() {
  const prompt = $('walk-prompt').value;
  if (!prompt.trim()) return;
  let top = Number($('walk-top').value);
  let note = null;
  if (!(Number.isInteger(top) && top >= 1 && top <= 64)) {
    const was = $('walk-top').value;
    top = Number.isFinite(top) ? Math.min(64, Math.max(1, Math.round(top))) : 8;
    $('walk-top').value = top;
    note = h('p', { class: 'note' }, `Top per layer “${was}” is out of range (1 to 64): using ${top}.`);
  }
  setLink('walk');
  const out = $('walk-out');
  put($('walk-layer'));
  put(out, h('p', { class: 'muted' }, 'walking…'));
  if ($('walk-positions').checked) return walkPositions(prompt, out, note);
  try {
    const j = await client.walk(prompt, top);
    const m = heatModel(j.hits, model.layers);
    put(out, note,
      h('div', { class: 'row' }, h('p', { class: 'muted' }, `${m.rows.length} layers × top ${top} features of the last token by |gate score| (${num(j.latency_ms, 1)} ms); red fires positive, blue negative, scaled to the strongest (${num(m.maxAbs, 2)}).`),
        exportBar('walk', j, prompt)),
      scrollBox('heat map', drawHeat(m)),
      h('p', { class: 'legend row' }, h('span', {}, '−' + num(m.maxAbs, 1)), h('span', { class: 'heatlegend', role: 'img', 'aria-label': 'colour scale: blue negative, white zero, red positive' }),
        h('span', {}, '+' + num(m.maxAbs, 1)), h('span', { class: 'muted' }, 'gate score: blue fires negative, red positive, white near zero')),
      h('p', { class: 'muted small legend' }, TOKEN_LEGEND));
  } catch (e) {
    showError(out, e);
  }
}

// Every position: one row per token, one column per layer, each cell the token's strongest
// feature there (its target and gate score), coloured like the heat map.
async function walkPositions(prompt, out, note) {
  try {
    const j = await client.walkPositions(prompt, 1);
    const layers = [...new Set(j.positions.flatMap((p) => p.hits.map((x) => x.layer)))].sort((a, b) => a - b);
    const maxAbs = Math.max(1e-9, ...j.positions.flatMap((p) => p.hits.map((x) => Math.abs(x.gate_score))));
    const cell = (hit) => {
      if (!hit) return h('td', {}, '');
      const a = Math.min(1, Math.abs(hit.gate_score) / maxAbs);
      const bg = hit.gate_score >= 0 ? `rgba(220, 60, 40, ${(0.15 + 0.6 * a).toFixed(2)})` : `rgba(40, 90, 220, ${(0.15 + 0.6 * a).toFixed(2)})`;
      const td = h('td', { title: `L${hit.layer} F${hit.feature}: gate ${num(hit.gate_score, 2)}` }, showToken(hit.target), h('span', { class: 'muted small' }, ' ' + num(hit.gate_score, 1)));
      td.style.background = bg;
      return td;
    };
    put(out, note,
      h('div', { class: 'row' }, h('p', { class: 'muted' }, `${j.positions.length} positions × ${layers.length} layers: each token's strongest feature by |gate score| (${num(j.latency_ms, 1)} ms).`),
        exportBar('walk-positions', j, prompt)),
      scrollBox('positions', h('table', { class: 'positions' },
        h('tr', {}, h('th', { scope: 'col' }, 'position'), h('th', { scope: 'col' }, 'token'), ...layers.map((l) => h('th', { scope: 'col' }, 'L' + l))),
        ...j.positions.map((p) => h('tr', {}, h('td', { class: 'num' }, p.pos), h('td', {}, showToken(p.token)),
          ...layers.map((l) => cell(p.hits.find((x) => x.layer === l))))))),
      h('p', { class: 'muted small legend' }, TOKEN_LEGEND));
  } catch (e) {
    showError(out, e);
  }
}
