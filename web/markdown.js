// A small Markdown reader for chat replies, of our own: paragraphs (a single newline is a
// line break), # headings, fenced code blocks (``` or ~~~, an unclosed fence runs to the end,
// as while a reply streams), - * + and 1. lists (one level), `inline code`, **bold**,
// *italic* / _italic_, and [links](url) whose scheme is http, https or mailto (any other link
// stays as the text it was typed as). Nothing here makes markup from text: the result is a
// tree of {tag, attrs, kids} and strings, and toDom builds it with dom.js's h(), so HTML in a
// reply shows as the characters it is. No DOM here.

const SAFE_URL = /^(https?:\/\/|mailto:)[^\s<>"]+$/i;
const INLINE = /`([^`\n]+)`|\[([^\]\n]+)\]\(([^()\s]+)\)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__|\*(?=[^\s*])([^*]*?[^\s*])\*|(?<![\p{L}\p{N}_])_(?=[^\s_])([^_]*?[^\s_])_(?![\p{L}\p{N}_])/gu;

export function parseInline(text) {
  const out = [];
  let last = 0;
  const re = new RegExp(INLINE.source, 'gu'); // parseInline recurses: each call its own lastIndex
  for (let m; (m = re.exec(text));) {
    if (m.index > last) out.push(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[1] !== undefined) out.push({ tag: 'code', kids: [m[1]] });
    else if (m[2] !== undefined) {
      if (SAFE_URL.test(m[3])) out.push({ tag: 'a', attrs: { href: m[3], rel: 'noopener noreferrer nofollow', target: '_blank' }, kids: parseInline(m[2]) });
      else out.push(m[0]);
    } else if (m[4] !== undefined || m[5] !== undefined) out.push({ tag: 'strong', kids: parseInline(m[4] ?? m[5]) });
    else out.push({ tag: 'em', kids: parseInline(m[6] ?? m[7]) });
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

const FENCE = /^ {0,3}(```|~~~)\s*([\w+#.-]*)\s*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const ITEM = /^ {0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;

// lines of a paragraph (or a list item) -> inline nodes with a <br> between lines
function lines(ls) {
  const out = [];
  ls.forEach((l, i) => {
    if (i) out.push({ tag: 'br' });
    out.push(...parseInline(l.trim()));
  });
  return out;
}

export function parseMarkdown(src) {
  const ls = String(src ?? '').replace(/\r\n?/g, '\n').split('\n');
  const blocks = [];
  for (let i = 0; i < ls.length;) {
    const l = ls[i];
    let m;
    if ((m = FENCE.exec(l))) {
      const body = [];
      for (i++; i < ls.length && !(ls[i].trim().startsWith(m[1]) && FENCE.test(ls[i])); i++) body.push(ls[i]);
      i++;
      blocks.push({ tag: 'pre', kids: [{ tag: 'code', attrs: m[2] ? { 'data-lang': m[2] } : {}, kids: [body.join('\n')] }] });
    } else if (!l.trim()) {
      i++;
    } else if ((m = HEADING.exec(l))) {
      blocks.push({ tag: m[1].length === 1 ? 'h3' : m[1].length === 2 ? 'h4' : 'h5', kids: parseInline(m[2]) });
      i++;
    } else if ((m = ITEM.exec(l))) {
      const ordered = /\d/.test(m[1][0]);
      const items = [];
      while (i < ls.length) {
        const it = ITEM.exec(ls[i]);
        if (it && /\d/.test(it[1][0]) === ordered) {
          items.push([it[2]]);
          i++;
        } else if (items.length && /^\s{2,}\S/.test(ls[i]) && !ITEM.exec(ls[i])) {
          items[items.length - 1].push(ls[i]); // a continuation line of the item
          i++;
        } else break;
      }
      const start = ordered ? parseInt(m[1], 10) : 1;
      blocks.push({ tag: ordered ? 'ol' : 'ul', attrs: ordered && start !== 1 ? { start: String(start) } : {}, kids: items.map((it) => ({ tag: 'li', kids: lines(it) })) });
    } else {
      const para = [];
      while (i < ls.length && ls[i].trim() && !FENCE.test(ls[i]) && !HEADING.test(ls[i]) && !(para.length && ITEM.test(ls[i]))) para.push(ls[i++]);
      blocks.push({ tag: 'p', kids: lines(para) });
    }
  }
  return blocks;
}

// The tree as DOM nodes, built with h (dom.js): strings become text nodes.
export function toDom(nodes, h) {
  return nodes.map((n) => (typeof n === 'string' ? n : h(n.tag, n.attrs || {}, toDom(n.kids || [], h))));
}
