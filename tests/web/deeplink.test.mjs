// web/deeplink.js: the URLs a result is shared with, both ways.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildDeepLink, parseDeepLink } from '../../web/deeplink.js';

test('parse: each view, its options, defaults', () => {
  assert.deepEqual(parseDeepLink(''), { view: 'chat', value: '', band: 'knowledge', mode: 'compare', top: 8, session: '' });
  assert.deepEqual(parseDeepLink('?describe=France'), { view: 'describe', value: 'France', band: 'knowledge', mode: 'compare', top: 8, session: '' });
  assert.equal(parseDeepLink('?describe=France&band=all').band, 'all');
  assert.equal(parseDeepLink('?describe=France&band=bogus').band, 'knowledge');
  assert.deepEqual(parseDeepLink('?walk=The%20capital%20of%20France%20is'), { view: 'walk', value: 'The capital of France is', band: 'knowledge', mode: 'compare', top: 8, session: '' });
  assert.equal(parseDeepLink('?walk=a+b').value, 'a b');
  assert.deepEqual(parseDeepLink('?infer=x&mode=dense'), { view: 'infer', value: 'x', band: 'knowledge', mode: 'dense', top: 8, session: '' });
  assert.equal(parseDeepLink('?edit').view, 'edit');
  // a view named without a value opens the view with nothing asked
  assert.deepEqual(parseDeepLink('?walk'), { view: 'walk', value: '', band: 'knowledge', mode: 'compare', top: 8, session: '' });
  assert.equal(parseDeepLink('?describe=&walk=w').view, 'describe');
  assert.equal(parseDeepLink('?describe=%20%20').value, '');
  assert.equal(parseDeepLink('?walk=x&top=3').top, 3);
  for (const bad of ['0', '65', '2.5', 'x', '-1']) assert.equal(parseDeepLink('?walk=x&top=' + bad).top, 8, bad);
  assert.equal(parseDeepLink('?edit&session=web-0a1b').session, 'web-0a1b');
  for (const bad of ['a b', 'x/y', '<i>', 'x'.repeat(129)]) assert.equal(parseDeepLink('?session=' + encodeURIComponent(bad)).session, '', bad);
  assert.equal(parseDeepLink('?describe=' + 'x'.repeat(10000)).value.length, 4000);
});

test('hostile values come back as the same text', () => {
  const evil = '<img src=x onerror=alert(1)>&"\'#?=%';
  const link = buildDeepLink('describe', evil);
  assert.ok(!/[<>"' ]/.test(link), link);
  assert.equal(parseDeepLink(link).value, evil);
});

test('build: round trips, spaces as %20, defaults left out', () => {
  assert.equal(buildDeepLink('describe', 'France'), '?describe=France');
  assert.equal(buildDeepLink('describe', 'France', { band: 'all' }), '?describe=France&band=all');
  assert.equal(buildDeepLink('walk', 'The capital of France is'), '?walk=The%20capital%20of%20France%20is');
  assert.equal(buildDeepLink('infer', 'x', { mode: 'compare' }), '?infer=x');
  assert.equal(buildDeepLink('infer', 'x', { mode: 'walk' }), '?infer=x&mode=walk');
  assert.equal(buildDeepLink('chat', 'ignored'), '');
  assert.equal(buildDeepLink('edit', ''), '?edit');
  assert.equal(buildDeepLink('walk', ''), '?walk');
  assert.equal(buildDeepLink('walk', 'x', { top: 4 }), '?walk=x&top=4');
  assert.equal(buildDeepLink('walk', 'x', { top: 8 }), '?walk=x');
  assert.equal(buildDeepLink('edit', '', { session: 'web-1' }), '?edit&session=web-1');
  assert.equal(buildDeepLink('chat', '', { session: 'web-1' }), '?session=web-1');
  assert.equal(buildDeepLink('describe', '', { session: 'web-1' }), '?describe&session=web-1');
  assert.equal(buildDeepLink('describe', 'x', { session: 'bad id' }), '?describe=x');
  for (const [v, val, ex] of [['walk', 'a+b & c', {}], ['infer', 'é ü 日本', { mode: 'dense' }], ['describe', 'x', { band: 'syntax' }]]) {
    const d = parseDeepLink(buildDeepLink(v, val, ex));
    assert.equal(d.view, v);
    assert.equal(d.value, val);
  }
});
