// Deep links: every explorer view is a URL (/?describe=France&band=all,
// /?walk=The%20capital%20of%20France%20is, /?infer=...&mode=compare) so a result can be
// shared. parseDeepLink reads location.search, buildDeepLink writes it back. No DOM here.

export const VIEWS = ['describe', 'walk', 'infer'];
export const BANDS = ['knowledge', 'syntax', 'output', 'all'];
export const MODES = ['compare', 'walk', 'dense'];
const MAX_VALUE = 4000; // longer values are cut: a URL is not a document

// -> {view: 'chat'|'describe'|'walk'|'infer'|'edit', value, band, mode}; unknown or empty
// parameters fall back to the chat view; the first view parameter present wins.
export function parseDeepLink(search) {
  const q = new URLSearchParams(search || '');
  const out = { view: 'chat', value: '', band: 'knowledge', mode: 'compare' };
  for (const v of VIEWS) {
    const val = q.get(v);
    if (val !== null && val.trim() !== '') {
      out.view = v;
      out.value = val.slice(0, MAX_VALUE);
      break;
    }
  }
  if (out.view === 'chat' && q.has('edit')) out.view = 'edit';
  const band = q.get('band');
  if (band && BANDS.includes(band)) out.band = band;
  const mode = q.get('mode');
  if (mode && MODES.includes(mode)) out.mode = mode;
  return out;
}

// The query string (with its '?', or '' for the chat view) of a view and its value.
export function buildDeepLink(view, value, extra = {}) {
  if (!VIEWS.includes(view)) return view === 'edit' ? '?edit' : '';
  const q = new URLSearchParams();
  q.set(view, String(value).slice(0, MAX_VALUE));
  if (view === 'describe' && extra.band && extra.band !== 'knowledge') q.set('band', extra.band);
  if (view === 'infer' && extra.mode && extra.mode !== 'compare') q.set('mode', extra.mode);
  return '?' + q.toString().replace(/\+/g, '%20');
}
