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

// A token as it should be seen: C0 controls and DEL as their Unicode control pictures,
// leading/trailing spaces as ␣ (so " Paris" and "Paris" differ on screen), empty as ∅.
export function showToken(t) {
  const str = String(t ?? '');
  if (str === '') return '∅';
  let out = '';
  for (const ch of str) {
    const c = ch.codePointAt(0);
    out += c < 0x20 ? String.fromCodePoint(0x2400 + c) : c === 0x7f ? '␡' : ch;
  }
  return out.replace(/^ +| +$/g, (m) => '␣'.repeat(m.length));
}

// A number with at most `digits` decimals, or '–' when it is not a finite number.
export function num(x, digits = 2) {
  return Number.isFinite(x) ? String(Math.round(x * 10 ** digits) / 10 ** digits) : '–';
}
