// web/dom.js: data is only ever text or an attribute value; handler attributes and script
// URLs are refused; tokens are shown with their invisible characters made visible.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { h, num, put, s, showToken, useDocument } from '../../web/dom.js';
import { FakeDocument } from './fakedom.mjs';

const doc = new FakeDocument();
useDocument(doc);
const EVIL = '<img src=x onerror=alert(1)>';

test('strings become text nodes, never elements', () => {
  const el = h('td', { class: 'tok' }, EVIL, 42, null, false, ['a', h('b', {}, EVIL)]);
  assert.equal(el.textContent, EVIL + '42a' + EVIL);
  assert.deepEqual(el.childNodes.map((n) => n.nodeType), [3, 3, 3, 1]);
  assert.equal(el.querySelectorAll('img').length, 0);
  assert.equal(h('p', { text: EVIL }).textContent, EVIL);
});

test('attributes are values; handlers and script URLs are refused', () => {
  const el = h('a', { title: EVIL, 'data-x': '"><script>', href: '/assets/x' });
  assert.equal(el.getAttribute('title'), EVIL);
  assert.equal(el.getAttribute('data-x'), '"><script>');
  assert.throws(() => h('img', { onerror: 'alert(1)' }), /refused/);
  assert.throws(() => h('img', { OnLoad: 'x' }), /refused/);
  assert.throws(() => h('a', { href: ' JavaScript:alert(1)' }), /refused/);
  assert.throws(() => h('img', { src: 'data:text/html,x' }), /refused/);
  let clicked = 0;
  const b = h('button', { on: { click: () => clicked++ } }, 'go');
  b.click();
  assert.equal(clicked, 1);
});

test('svg elements get the SVG namespace; put replaces children', () => {
  const r = s('rect', { fill: 'rgb(1,2,3)' });
  assert.equal(r.namespaceURI, 'http://www.w3.org/2000/svg');
  const box = h('div', {}, 'old', h('i'));
  put(box, 'new', EVIL);
  assert.equal(box.textContent, 'new' + EVIL);
  assert.equal(box.childNodes.length, 2);
  put(box);
  assert.equal(box.childNodes.length, 0);
});

test('the markup setters of the test DOM throw (the page must never need them)', () => {
  assert.throws(() => { h('div').innerHTML = EVIL; }, /not allowed/);
});

test('showToken makes invisible characters visible', () => {
  assert.equal(showToken('Paris'), 'Paris');
  assert.equal(showToken(' Paris'), '␣Paris');
  assert.equal(showToken('a  '), 'a␣␣');
  assert.equal(showToken('a b'), 'a b');
  assert.equal(showToken('\n\t\u001e\u007f'), '↵⇥<0x1E><0x7F>');
  assert.equal(showToken('\ufffd'), '<0x??>');
  assert.equal(showToken(String.fromCodePoint(0x10fee2) + 'x'), '<0xE2>x');
  assert.equal(showToken('a\u200bb'), 'a<U+200B>b');
  assert.equal(showToken('\u0301a'), '<U+0301>a');
  assert.equal(showToken('e\u0301'), 'e\u0301');
  assert.equal(showToken(''), '∅');
  assert.equal(showToken(null), '∅');
  assert.equal(showToken('日本'), '日本');
  assert.equal(showToken(EVIL), EVIL); // text stays text; escaping is the DOM's job
});

test('num rounds finite numbers and marks the rest', () => {
  assert.equal(num(3.14159, 2), '3.14');
  assert.equal(num(2, 1), '2');
  assert.equal(num(NaN), '–');
  assert.equal(num(undefined), '–');
  assert.equal(num('7'), '–');
});
