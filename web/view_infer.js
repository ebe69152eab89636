// The infer view: next-token probabilities, walk and dense side by side (or one mode); a KNN
// override is marked on the token it put first, with what the weights alone would say.

import { h, num, put, showToken, TOKEN_LEGEND } from './dom.js';
import { $, client, exportBar, scrollBox, setLink, showError } from './shared.js';

function predTable(title, preds, ms, override) {
  const list = Array.isArray(preds) ? preds : [];
  return h('div', { class: 'half' },
    h('h3', {}, title, Number.isFinite(ms) ? h('span', { class: 'muted' }, ` ${num(ms, 1)} ms`) : null),
    scrollBox('predictions', h('table', {}, h('tr', {}, ['token', 'probability', ''].map((c) => h('th', { scope: 'col' }, c || h('span', { class: 'sr' }, 'bar')))),
      list.map((p, i) => h('tr', {},
        h('td', { class: 'tok' }, showToken(p.token),
          override && i === 0 && p.token === override.token ? h('span', { class: 'badge', title: 'the KNN store answered, not the weights' }, `KNN override · layer ${override.layer} · cos ${num(override.cosine, 3)}`) : null),
        h('td', { class: 'num' }, num(p.probability, 4)),
        h('td', {}, h('span', { class: 'bar', 'data-w': p.probability })))))));
}

export async function runInfer() {
  const prompt = $('infer-prompt').value;
  const mode = $('infer-mode').value;
  if (!prompt.trim()) return;
  setLink('infer');
  const out = $('infer-out');
  put(out, h('p', { class: 'muted' }, 'inferring…'));
  try {
    const j = await client.infer(prompt, mode, 10);
    const ov = j.knn_override && typeof j.knn_override === 'object' ? j.knn_override : null;
    const halves = [];
    if (j.walk) halves.push(predTable('walk (vindex + KNN store)', j.walk, j.walk_ms, ov));
    if (j.dense) halves.push(predTable('dense (the weights)', j.dense, j.dense_ms, null));
    if (j.predictions) halves.push(predTable(mode, j.predictions, j.latency_ms, mode === 'walk' ? ov : null));
    put(out, h('div', { class: 'row' }, exportBar('infer', j, prompt)), h('div', { class: 'pair' }, halves),
      ov ? h('p', { class: 'muted' }, `The KNN override fired at layer ${ov.layer}: the weights alone would say ${showToken(ov.model_top1 && ov.model_top1.token)}. ` +
        'Its row shows the store’s answer, not a share of one distribution, so the walk column can add up to more than 1.') : null,
      h('p', { class: 'muted small legend' }, TOKEN_LEGEND));
    for (const b of out.querySelectorAll('span')) if (b.classList.contains('bar')) b.style.width = Math.round(Math.max(0, Math.min(1, Number(b.dataset.w) || 0)) * 120) + 'px';
  } catch (e) {
    showError(out, e);
  }
}
