// The edit view's logic without the DOM: the canonical prompt an insert is written and
// measured with, the names of the insert modes, whether an insert took (a server that
// refuses one answers 422 instead; one that keeps it with a low probability is warned of), the
// per-edit rows of GET /v1/patches (each edit with an id that DELETE /v1/edits/{id} removes;
// a server without them lists whole patches only).

export const TAKE_MIN = 0.3; // the balance's aim is [0.30, 0.95] with the target first

// "The {relation, '-' and '_' as spaces} of {entity} is", as the library builds it
export function canonicalPrompt(entity, relation) {
  return `The ${String(relation ?? '').replace(/[-_]/g, ' ')} of ${String(entity ?? '')} is`;
}

// The server names a compose insert by how it was keyed: "constellation" (the residuals of
// the canonical prompt) or "embedding" (the entity's embedding, on a browse-only vindex);
// "subject" (every phrasing reads it back) and "knn" are named as they are.
export function modeLabel(mode) {
  if (mode === 'constellation') return 'compose';
  if (mode === 'embedding') return 'compose (embedding key)';
  if (mode === 'subject' || mode === 'knn' || mode === 'compose') return mode;
  return typeof mode === 'string' ? mode : '';
}

// A measured probability with 3 decimals that never reads as certain or impossible when it is
// not: 0.9999 is "0.999", not "1"; 0.0004 is "<0.001", not "0".
export function probText(p) {
  if (!Number.isFinite(p)) return '–';
  if (p > 0 && p < 0.0005) return '<0.001';
  if (p < 1 && p >= 0.9995) return '0.999';
  return String(Math.round(p * 1000) / 1000);
}

// What a mode's measured probability is expected to be, for a reply that did not get there.
export function takeAim(mode) {
  if (mode === 'subject') return 'a subject edit normally puts the target first, near 1';
  return `a compose insert aims for ${TAKE_MIN.toFixed(2)} to 0.95 with the target first`;
}

// An insert's reply -> {took: true|false|null (not measured), why}
export function insertVerdict(j) {
  if (!j || typeof j !== 'object') return { took: null, why: '' };
  const warn = typeof j.warning === 'string' ? j.warning : '';
  if (j.took === false || warn) return { took: false, why: warn || 'the server says the insert did not take' };
  if (!Number.isFinite(j.target_probability)) return { took: null, why: '' };
  if (j.target_probability < TAKE_MIN)
    return { took: false, why: `the target's probability after the canonical prompt is ${j.target_probability}, under ${TAKE_MIN}` };
  return { took: true, why: '' };
}

// GET /v1/patches -> the per-edit rows, whether at the top level (edits) or inside each
// patch (patches[].edits); only rows with an id (string or integer) count.
export function editsOf(j) {
  const out = [];
  const ok = (e) => e && typeof e === 'object' && ((typeof e.id === 'string' && e.id) || Number.isInteger(e.id));
  if (j && Array.isArray(j.edits)) out.push(...j.edits.filter(ok));
  for (const p of (j && Array.isArray(j.patches) ? j.patches : []))
    if (p && Array.isArray(p.edits)) out.push(...p.edits.filter(ok).map((e) => ({ patch: p.name, ...e })));
  return out;
}

// The prompts an edit was written with: its own list, one prompt, or the canonical one.
export function editPrompts(e) {
  if (Array.isArray(e.prompts) && e.prompts.length) return e.prompts.map(String);
  if (typeof e.prompt === 'string' && e.prompt) return [e.prompt];
  return e.entity && e.relation ? [canonicalPrompt(e.entity, e.relation)] : [];
}
