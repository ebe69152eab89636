// The URL is the page's state: the view (its tab), the view's query and options, and the
// session, so that a reload comes back to the same place and a copied link shows the same
// thing to someone else (/?describe=France&band=all, /?walk=The%20capital%20of%20France%20is&top=4,
// /?infer=...&mode=dense, /?edit, &session=ID on any of them). A view named without a value
// (/?walk) opens the view with nothing asked. parseDeepLink reads location.search,
// buildDeepLink writes it back. No DOM here.

export const VIEWS = ['describe', 'walk', 'infer'];
export const BANDS = ['knowledge', 'syntax', 'output', 'all'];
export const MODES = ['compare', 'walk', 'dense'];
export const TOP_DEFAULT = 8;
const MAX_VALUE = 4000; // longer values are cut: a URL is not a document
// a session id as the server takes it in X-Session-Id (printable, no spaces)
const SESSION_RE = /^[A-Za-z0-9._:-]{1,128}$/;

// -> {view: 'chat'|'describe'|'walk'|'infer'|'edit', value, band, mode, top, session}; unknown
// parameters are ignored; the first view parameter present wins.
export function parseDeepLink(search) {
  const q = new URLSearchParams(search || '');
  const out = { view: 'chat', value: '', band: 'knowledge', mode: 'compare', top: TOP_DEFAULT, session: '' };
  for (const v of VIEWS) {
    const val = q.get(v);
    if (val !== null) {
      out.view = v;
      out.value = val.trim() === '' ? '' : val.slice(0, MAX_VALUE);
      break;
    }
  }
  if (out.view === 'chat' && q.has('edit')) out.view = 'edit';
  const band = q.get('band');
  if (band && BANDS.includes(band)) out.band = band;
  const mode = q.get('mode');
  if (mode && MODES.includes(mode)) out.mode = mode;
  const top = Number(q.get('top'));
  if (Number.isInteger(top) && top >= 1 && top <= 64) out.top = top;
  const sid = q.get('session');
  if (sid && SESSION_RE.test(sid)) out.session = sid;
  return out;
}

// The query string (with its '?', or '' for the chat view without a session) of a view, its
// value and options (extra: band, mode, top, session).
export function buildDeepLink(view, value = '', extra = {}) {
  const q = new URLSearchParams();
  if (VIEWS.includes(view)) {
    q.set(view, String(value ?? '').slice(0, MAX_VALUE));
    if (view === 'describe' && extra.band && extra.band !== 'knowledge') q.set('band', extra.band);
    if (view === 'walk' && Number.isInteger(extra.top) && extra.top !== TOP_DEFAULT) q.set('top', String(extra.top));
    if (view === 'infer' && extra.mode && extra.mode !== 'compare') q.set('mode', extra.mode);
  } else if (view === 'edit') {
    q.set('edit', '');
  }
  if (extra.session && SESSION_RE.test(extra.session)) q.set('session', extra.session);
  const s = q.toString().replace(/\+/g, '%20').replace(/^edit=(&|$)/, 'edit$1').replace(/^(describe|walk|infer)=(&|$)/, '$1$2');
  return s ? '?' + s : '';
}
