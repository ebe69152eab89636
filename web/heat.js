// The walk heat map's model: rows are layers (every layer of the model, hit or not, in
// order), columns the top features a layer fired, ranked by |gate score|; colour by score
// relative to the largest |score| of the whole walk (positive warm, negative cool). No DOM
// here: app.js draws it as SVG.

// hits: /v1/walk's [{layer, feature, gate_score, target, relation?}]; numLayers: the model's
// layer count (0 or absent: only the layers present). -> {rows: [{layer, cells}], cols, maxAbs}
export function heatModel(hits, numLayers) {
  const by = new Map();
  let maxAbs = 0;
  for (const h of Array.isArray(hits) ? hits : []) {
    if (!h || !Number.isInteger(h.layer) || h.layer < 0 || !Number.isFinite(h.gate_score)) continue;
    if (!by.has(h.layer)) by.set(h.layer, []);
    by.get(h.layer).push(h);
    maxAbs = Math.max(maxAbs, Math.abs(h.gate_score));
  }
  const layers = new Set(by.keys());
  const n = Number.isInteger(numLayers) && numLayers > 0 && numLayers <= 4096 ? numLayers : 0;
  for (let l = 0; l < n; l++) layers.add(l);
  let cols = 0;
  const rows = [...layers].sort((a, b) => a - b).map((layer) => {
    const cells = (by.get(layer) || []).slice().sort((a, b) => Math.abs(b.gate_score) - Math.abs(a.gate_score));
    cols = Math.max(cols, cells.length);
    return { layer, cells };
  });
  return { rows, cols, maxAbs };
}

// A CSS colour for a score: white at 0, saturated red (positive) or blue (negative) at
// |score| == maxAbs; the intensity is linear in |score| / maxAbs and clamped to [0, 1].
export function heatColor(score, maxAbs) {
  if (!Number.isFinite(score) || !Number.isFinite(maxAbs) || maxAbs <= 0) return 'rgb(255,255,255)';
  const t = Math.min(1, Math.abs(score) / maxAbs);
  const fade = (c) => Math.round(255 + (c - 255) * t);
  return score >= 0 ? `rgb(${fade(200)},${fade(40)},${fade(30)})` : `rgb(${fade(30)},${fade(80)},${fade(200)})`;
}

// Dark or light text for a cell, so labels stay readable on any shade.
export function heatTextColor(score, maxAbs) {
  if (!Number.isFinite(score) || !(maxAbs > 0)) return '#222';
  return Math.abs(score) / maxAbs > 0.55 ? '#fff' : '#222';
}
