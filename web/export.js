// Results as files: describe's edges, walk's hits and infer's predictions as rows (one
// header, one object per row) for CSV (RFC 4180: fields with a comma, quote or line break are
// quoted, quotes doubled) or JSON (the server's answer as it came). Cells a spreadsheet would
// run as a formula (starting with = + - @ and a tab or CR) get a leading apostrophe. Token
// texts are exported as the server wrote them (a lone byte as U+FFFD, as any JSON reader would).
// No DOM here.

const raw = (t) => String(t ?? '').replace(/[\u{10fe80}-\u{10feff}]/gu, () => '\ufffd');

function cell(v) {
  let s = v === null || v === undefined ? '' : typeof v === 'number' ? String(v) : raw(v);
  if (typeof v === 'string' && /^[=+\-@\t\r]/.test(s)) s = "'" + s;
  return /[",\r\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
}

export function toCSV(columns, rows) {
  return [columns.map(cell).join(','), ...rows.map((r) => columns.map((c) => cell(r[c])).join(','))].join('\r\n') + '\r\n';
}

// -> {columns, rows} of a result (kind: describe | walk | infer)
export function tableOf(kind, j) {
  if (kind === 'describe')
    return {
      columns: ['rank', 'entity', 'relation', 'relation_source', 'target', 'gate_score', 'layer', 'also'],
      rows: (Array.isArray(j.edges) ? j.edges : []).map((e, i) => ({
        rank: i + 1, entity: j.entity, relation: e.relation ?? '', relation_source: e.source ?? '', target: e.target,
        gate_score: e.gate_score, layer: e.layer, also: Array.isArray(e.also) ? e.also.map(raw).join(' | ') : '',
      })),
    };
  if (kind === 'walk')
    return {
      columns: ['prompt', 'layer', 'feature', 'gate_score', 'target', 'relation'],
      rows: (Array.isArray(j.hits) ? j.hits : []).map((x) => ({ prompt: j.prompt, layer: x.layer, feature: x.feature, gate_score: x.gate_score, target: x.target, relation: x.relation ?? '' })),
    };
  if (kind === 'walk-positions')
    return {
      columns: ['prompt', 'pos', 'token', 'layer', 'feature', 'gate_score', 'target', 'relation'],
      rows: (Array.isArray(j.positions) ? j.positions : []).flatMap((p) => (Array.isArray(p.hits) ? p.hits : []).map((x) => (
        { prompt: j.prompt, pos: p.pos, token: p.token, layer: x.layer, feature: x.feature, gate_score: x.gate_score, target: x.target, relation: x.relation ?? '' }))),
    };
  const rows = [];
  for (const half of ['walk', 'dense', 'predictions'])
    if (Array.isArray(j[half]))
      j[half].forEach((p, i) => rows.push({ prompt: j.prompt, mode: half === 'predictions' ? j.mode : half, rank: i + 1, token: p.token, probability: p.probability }));
  return { columns: ['prompt', 'mode', 'rank', 'token', 'probability'], rows };
}

// A file name for a result: larql-describe-France.csv
export function fileName(kind, what, ext) {
  const base = raw(what).replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 40) || 'result';
  return `larql-${kind}-${base}.${ext}`;
}

export function exportText(kind, j, format) {
  if (format === 'json') return JSON.stringify(j, (k, v) => (typeof v === 'string' ? raw(v) : v), 2) + '\n';
  const t = tableOf(kind, j);
  return toCSV(t.columns, t.rows);
}
