// web/markdown.js: the small Markdown reader of chat replies. HTML stays text, only
// http/https/mailto links become links, an unclosed fence (a reply still streaming) is code.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseInline, parseMarkdown, toDom } from '../../web/markdown.js';
import { h, useDocument } from '../../web/dom.js';
import { FakeDocument } from './fakedom.mjs';

const tags = (nodes) => nodes.map((n) => (typeof n === 'string' ? n : { [n.tag]: n.kids ? tags(n.kids) : [] }));

test('inline: code, bold, italic, links with safe schemes only', () => {
  assert.deepEqual(tags(parseInline('a `x<b>` **bold** *it* _it2_ snake_case_name')), ['a ', { code: ['x<b>'] }, ' ', { strong: ['bold'] }, ' ', { em: ['it'] }, ' ', { em: ['it2'] }, ' snake_case_name']);
  const [a] = parseInline('[the **site**](https://example.com/a?b=1)');
  assert.equal(a.tag, 'a');
  assert.equal(a.attrs.href, 'https://example.com/a?b=1');
  assert.equal(a.attrs.rel, 'noopener noreferrer nofollow');
  assert.deepEqual(tags(a.kids), ['the ', { strong: ['site'] }]);
  for (const bad of ['javascript:alert(1)', 'data:text/html,x', 'vbscript:x', '//evil.com', '/local', 'JAVASCRIPT:x'])
    assert.deepEqual(parseInline(`[x](${bad})`), [`[x](${bad})`], bad);
  assert.equal(parseInline('[m](mailto:a@b.c)')[0].tag, 'a');
  assert.deepEqual(parseInline('2 * 3 * 4'), ['2 * 3 * 4']);
  assert.deepEqual(parseInline('<img src=x onerror=alert(1)>'), ['<img src=x onerror=alert(1)>']);
});

test('blocks: paragraphs, line breaks, headings, lists, fenced code', () => {
  const md = '# Title\nfirst line\nsecond\n\n- one\n- **two**\n  more\n\n3. c\n4. d\n\n```js\nlet a = "<b>";\n```\nafter';
  assert.deepEqual(tags(parseMarkdown(md)), [
    { h3: ['Title'] },
    { p: ['first line', { br: [] }, 'second'] },
    { ul: [{ li: ['one'] }, { li: [{ strong: ['two'] }, { br: [] }, 'more'] }] },
    { ol: [{ li: ['c'] }, { li: ['d'] }] },
    { pre: [{ code: ['let a = "<b>";'] }] },
    { p: ['after'] },
  ]);
  assert.equal(parseMarkdown('3. c')[0].attrs.start, '3');
  assert.deepEqual(tags(parseMarkdown('```\nstill streaming\n<i>')), [{ pre: [{ code: ['still streaming\n<i>'] }] }]);
  assert.deepEqual(parseMarkdown(''), []);
  assert.deepEqual(tags(parseMarkdown('a\r\nb')), [{ p: ['a', { br: [] }, 'b'] }]);
});

test('toDom builds elements and text nodes, never markup', () => {
  useDocument(new FakeDocument());
  const [p] = toDom(parseMarkdown('**<script>x</script>** [a](javascript:alert(1))'), h);
  assert.equal(p.localName, 'p');
  assert.equal(p.querySelector('strong').textContent, '<script>x</script>');
  assert.equal(p.querySelectorAll('script').length, 0);
  assert.equal(p.querySelectorAll('a').length, 0);
  useDocument(null);
});
