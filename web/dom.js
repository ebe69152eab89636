// Building the page without ever parsing data as markup: every string becomes a text node
// or an attribute value set through setAttribute, so an entity named
// "<img src=x onerror=alert(1)>" or a token full of control characters shows as the text it
// is. Event handler attributes and javascript: URLs are refused outright. The document is
// looked up when called (globalThis.document), or given with useDocument(), so the module
// imports under node without a DOM.

let doc = null;
export function useDocument(d) {
  doc = d;
}
function D() {
  const d = doc || globalThis.document;
  if (!d) throw new Error('dom.js: no document');
  return d;
}

const SVG_NS = 'http://www.w3.org/2000/svg';
const URL_ATTRS = new Set(['href', 'src', 'action', 'formaction', 'xlink:href']);

function setAttr(el, name, value) {
  const n = String(name).toLowerCase();
  if (n.startsWith('on')) throw new Error('dom.js: event handler attribute ' + name + ' refused');
  const v = String(value);
  if (URL_ATTRS.has(n) && /^\s*(javascript|data|vbscript):/i.test(v)) throw new Error('dom.js: URL scheme refused in ' + name);
  el.setAttribute(name, v);
}

function append(el, kids) {
  for (const k of kids) {
    if (k === null || k === undefined || k === false) continue;
    if (Array.isArray(k)) append(el, k);
    else if (typeof k === 'object' && k.nodeType) el.appendChild(k);
    else el.appendChild(D().createTextNode(String(k)));
  }
  return el;
}

function build(el, props, kids) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'text') el.textContent = String(v);
    else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'selected') el[k] = v;
    else setAttr(el, k, v === true ? '' : v);
  }
  return append(el, kids);
}

// h('div', {class: 'x', on: {click: f}}, 'text', child, [more]) -> an HTML element
export function h(tag, props, ...kids) {
  return build(D().createElement(tag), props, kids);
}

// s('rect', {x: 1, fill: 'red'}) -> an SVG element
export function s(tag, props, ...kids) {
  return build(D().createElementNS(SVG_NS, tag), props, kids);
}

// Replaces an element's children with the given ones.
export function put(el, ...kids) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return append(el, kids);
}

// A byte that is not UTF-8 text by itself (a piece of a character split across tokens), as
// api.js decodes it: U+10FE00 + the byte, a private-use code point no real text carries.
export const BYTE_BASE = 0x10fe00;

// A token as it should be seen (never as a blank or a font's empty box): newline ↵, tab ⇥,
// other controls and a lone byte as <0x11> / <0xE2>, U+FFFD (a byte the server could not
// send as text, its value lost) as <0x??>, leading/trailing spaces as ␣ (so " Paris" and
// "Paris" differ on screen), empty as ∅, and characters a font draws as nothing or a box
// (format and private-use characters, unusual spaces, a combining mark with nothing to combine
// with) as <U+200B>.
export function showToken(t) {
  const str = String(t ?? '');
  if (str === '') return '∅';
  let out = '';
  let first = true;
  for (const ch of str) {
    const c = ch.codePointAt(0);
    if (c === 0x0a) out += '↵';
    else if (c === 0x09) out += '⇥';
    else if (c < 0x20 || c === 0x7f) out += '<0x' + c.toString(16).toUpperCase().padStart(2, '0') + '>';
    else if (c >= BYTE_BASE + 0x80 && c <= BYTE_BASE + 0xff) out += '<0x' + (c - BYTE_BASE).toString(16).toUpperCase() + '>';
    else if (c === 0xfffd) out += '<0x??>';
    else if (/[\p{Cf}\p{Co}\p{Cn}\p{Zl}\p{Zp}\u00a0\u2000-\u200a\u202f\u205f\u3000]/u.test(ch) || (first && /\p{M}/u.test(ch)))
      out += '<U+' + c.toString(16).toUpperCase().padStart(4, '0') + '>';
    else out += ch;
    first = false;
  }
  return out.replace(/^ +| +$/g, (m) => '␣'.repeat(m.length));
}

// What the marks showToken uses mean, for a legend under token lists.
export const TOKEN_LEGEND = 'How tokens are shown: ␣ = a space at the start or end of a token (" Paris" and "Paris" are different tokens) · <0xE2> = a single byte, only part of a character (<0x??>: its value was lost on the way) · ↵ ⇥ = newline, tab · <U+200B> = a character with no visible glyph · ∅ = empty';

// A number with at most `digits` decimals, or '–' when it is not a finite number.
export function num(x, digits = 2) {
  return Number.isFinite(x) ? String(Math.round(x * 10 ** digits) / 10 ** digits) : '–';
}
