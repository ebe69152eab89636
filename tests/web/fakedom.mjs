// A small DOM for running the page's modules under node (tests/web/): elements, text nodes,
// attributes, classList, dataset, events with bubbling, getElementById and simple
// querySelectorAll ("tag", ".cls", "tag.cls"), and a parser for web/index.html's plain
// HTML. It has no markup parser reachable from script: assigning innerHTML or
// outerHTML, or calling insertAdjacentHTML, throws, so a test run proves the page never
// turns data into markup.

export class FakeEvent {
  constructor(type, init = {}) {
    this.type = type;
    this.bubbles = init.bubbles ?? true;
    this.defaultPrevented = false;
    this.target = null;
    Object.assign(this, init);
  }
  preventDefault() {
    this.defaultPrevented = true;
  }
}

class Node {
  constructor(doc, type) {
    this.ownerDocument = doc;
    this.nodeType = type;
    this.parentNode = null;
    this.childNodes = [];
  }
  get firstChild() {
    return this.childNodes[0] || null;
  }
  get lastChild() {
    return this.childNodes[this.childNodes.length - 1] || null;
  }
  appendChild(n) {
    if (n.parentNode) n.parentNode.removeChild(n);
    n.parentNode = this;
    this.childNodes.push(n);
    return n;
  }
  removeChild(n) {
    const i = this.childNodes.indexOf(n);
    if (i < 0) throw new Error('removeChild: not a child');
    this.childNodes.splice(i, 1);
    n.parentNode = null;
    return n;
  }
  get textContent() {
    return this.nodeType === 3 ? this.data : this.childNodes.map((c) => c.textContent).join('');
  }
  set textContent(v) {
    if (this.nodeType === 3) {
      this.data = String(v);
      return;
    }
    for (const c of this.childNodes) c.parentNode = null;
    this.childNodes = [];
    if (String(v) !== '') this.appendChild(this.ownerDocument.createTextNode(String(v)));
  }
}

class Text extends Node {
  constructor(doc, data) {
    super(doc, 3);
    this.data = data;
  }
}

const MARKUP = () => {
  throw new Error('fakedom: markup parsing from script (innerHTML and friends) is not allowed');
};

class Element extends Node {
  constructor(doc, tag, ns) {
    super(doc, 1);
    this.tagName = tag.toUpperCase();
    this.localName = tag.toLowerCase();
    this.namespaceURI = ns || 'http://www.w3.org/1999/xhtml';
    this.attrs = new Map();
    this.listeners = new Map();
    this.style = {};
    const el = this;
    this.classList = {
      list: () => (el.getAttribute('class') || '').split(/\s+/).filter(Boolean),
      contains: (c) => el.classList.list().includes(c),
      add: (c) => { if (!el.classList.contains(c)) el.setAttribute('class', [...el.classList.list(), c].join(' ')); },
      remove: (c) => el.setAttribute('class', el.classList.list().filter((x) => x !== c).join(' ')),
      toggle: (c, on) => { (on ?? !el.classList.contains(c)) ? el.classList.add(c) : el.classList.remove(c); },
    };
    this.dataset = new Proxy({}, {
      get: (_, k) => el.getAttribute('data-' + String(k).replace(/[A-Z]/g, (m) => '-' + m.toLowerCase())) ?? undefined,
      set: (_, k, v) => { el.setAttribute('data-' + String(k).replace(/[A-Z]/g, (m) => '-' + m.toLowerCase()), v); return true; },
      deleteProperty: (_, k) => { el.attrs.delete('data-' + String(k)); return true; },
    });
  }
  setAttribute(k, v) {
    this.attrs.set(String(k).toLowerCase(), String(v));
  }
  getAttribute(k) {
    return this.attrs.has(k.toLowerCase()) ? this.attrs.get(k.toLowerCase()) : null;
  }
  hasAttribute(k) {
    return this.attrs.has(k.toLowerCase());
  }
  removeAttribute(k) {
    this.attrs.delete(k.toLowerCase());
  }
  get id() {
    return this.getAttribute('id') || '';
  }
  get hidden() {
    return this.hasAttribute('hidden');
  }
  set hidden(v) {
    if (v) this.setAttribute('hidden', '');
    else this.removeAttribute('hidden');
  }
  get value() {
    if (this._value !== undefined) return this._value;
    if (this.localName === 'textarea') return this.textContent;
    if (this.localName === 'select') {
      const o = this.querySelectorAll('option').find((x) => x.hasAttribute('selected')) || this.querySelectorAll('option')[0];
      return o ? o.getAttribute('value') ?? o.textContent : '';
    }
    return this.getAttribute('value') ?? '';
  }
  set value(v) {
    this._value = String(v);
  }
  set innerHTML(_) { MARKUP(); }
  get innerHTML() { return MARKUP(); }
  set outerHTML(_) { MARKUP(); }
  insertAdjacentHTML() { MARKUP(); }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }
  removeEventListener(type, fn) {
    const l = this.listeners.get(type) || [];
    const i = l.indexOf(fn);
    if (i >= 0) l.splice(i, 1);
  }
  dispatchEvent(ev) {
    ev.target = ev.target || this;
    for (let n = this; n; n = ev.bubbles ? n.parentNode : null) {
      for (const fn of [...((n.listeners && n.listeners.get(ev.type)) || [])]) fn.call(n, ev);
      if (!ev.bubbles) break;
    }
    return !ev.defaultPrevented;
  }
  click() {
    this.dispatchEvent(new FakeEvent('click'));
  }
  focus() {
    this.ownerDocument.activeElement = this;
  }
  scrollIntoView() {}
  *walk() {
    for (const c of this.childNodes)
      if (c.nodeType === 1) {
        yield c;
        yield* c.walk();
      }
  }
  querySelectorAll(sel) {
    const m = /^([a-z0-9]*)(?:\.([\w-]+))?$/i.exec(sel.trim());
    if (!m) throw new Error('fakedom: unsupported selector ' + sel);
    const [, tag, cls] = m;
    return [...this.walk()].filter((e) => (!tag || e.localName === tag.toLowerCase()) && (!cls || e.classList.contains(cls)));
  }
  querySelector(sel) {
    return this.querySelectorAll(sel)[0] || null;
  }
}

const VOID = new Set(['meta', 'link', 'input', 'br', 'img', 'hr']);
const ENTITIES = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };
const decode = (t) => t.replace(/&(#x[0-9a-f]+|#\d+|\w+);/gi, (m, e) =>
  e[0] === '#' ? String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10)) : ENTITIES[e] ?? m);

export class FakeDocument {
  constructor() {
    this.hidden = false;
    this.activeElement = null;
    this.listeners = new Map();
    this.documentElement = new Element(this, 'html');
    this.head = null;
    this.body = null;
  }
  createElement(tag) {
    return new Element(this, tag);
  }
  createElementNS(ns, tag) {
    return new Element(this, tag, ns);
  }
  createTextNode(t) {
    return new Text(this, String(t));
  }
  getElementById(id) {
    for (const e of this.documentElement.walk()) if (e.getAttribute('id') === id) return e;
    return null;
  }
  querySelectorAll(sel) {
    return this.documentElement.querySelectorAll(sel);
  }
  addEventListener(type, fn) {
    if (!this.listeners.has(type)) this.listeners.set(type, []);
    this.listeners.get(type).push(fn);
  }
  dispatchEvent(ev) {
    for (const fn of [...(this.listeners.get(ev.type) || [])]) fn.call(this, ev);
    return !ev.defaultPrevented;
  }
  // Every element and text node under root in document order, for checks over the page.
  all() {
    return [...this.documentElement.walk()];
  }

  // The page as it stands, as static HTML a person can open (scripts left out, form values
  // written into the markup, the stylesheet given inline): tests/web/e2e.mjs's snapshots.
  toHTML(css = '') {
    const esc = (t) => t.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
    const attr = (t) => esc(t).replace(/"/g, '&quot;');
    const ser = (n) => {
      if (n.nodeType === 3) return esc(n.data);
      if (n.localName === 'script' || (n.localName === 'link' && n.getAttribute('rel') === 'stylesheet')) return '';
      const attrs = new Map(n.attrs);
      if (n._value !== undefined && n.localName === 'input') attrs.set('value', n._value);
      const open = '<' + n.localName + [...attrs].map(([k, v]) => ` ${k}="${attr(v)}"`).join('') + '>';
      if (VOID.has(n.localName)) return open;
      const inner = n.localName === 'textarea' && n._value !== undefined ? esc(n._value) : n.childNodes.map(ser).join('');
      const extra = n.localName === 'head' && css ? '<style>' + css + '</style>' : '';
      return open + inner + extra + '</' + n.localName + '>';
    };
    return '<!doctype html>\n<html>' + this.documentElement.childNodes.map(ser).join('') + '</html>\n';
  }

  // Parses plain, well-formed HTML (web/index.html): elements, attributes, text, comments.
  static fromHTML(html) {
    const doc = new FakeDocument();
    const stack = [doc.documentElement];
    const re = /<!--[\s\S]*?-->|<!doctype[^>]*>|<\/([a-z0-9]+)\s*>|<([a-z0-9]+)((?:\s+[^\s=>]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?)*)\s*\/?>|([^<]+)/gi;
    let m;
    while ((m = re.exec(html))) {
      const top = stack[stack.length - 1];
      if (m[1]) {
        const name = m[1].toLowerCase();
        if (name === 'html') continue;
        while (stack.length > 1 && stack[stack.length - 1].localName !== name) stack.pop();
        if (stack.length > 1) stack.pop();
      } else if (m[2]) {
        const name = m[2].toLowerCase();
        if (name === 'html') {
          continue;
        }
        const el = doc.createElement(name);
        const ar = /([^\s=>]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]+))?/g;
        let a;
        while ((a = ar.exec(m[3] || ''))) el.setAttribute(a[1], a[2] === undefined ? '' : decode(a[2].replace(/^["']|["']$/g, '')));
        top.appendChild(el);
        if (name === 'head') doc.head = el;
        if (name === 'body') doc.body = el;
        if (!VOID.has(name)) stack.push(el);
      } else if (m[4] !== undefined) {
        if (top !== doc.documentElement || m[4].trim()) top.appendChild(doc.createTextNode(decode(m[4])));
      }
    }
    return doc;
  }
}

// A Storage (localStorage / sessionStorage) over a Map.
export class FakeStorage {
  constructor() {
    this.m = new Map();
  }
  getItem(k) {
    return this.m.has(k) ? this.m.get(k) : null;
  }
  setItem(k, v) {
    this.m.set(String(k), String(v));
  }
  removeItem(k) {
    this.m.delete(k);
  }
  clear() {
    this.m.clear();
  }
}
