// Keyboard access to a group of items with one tab stop (the "roving tabindex" pattern): the
// current item has tabindex 0, the others -1; arrow keys move the focus (Left/Right along a
// row, Up/Down to the same column of the next row), Home/End to the row's ends, Enter or
// Space activates. grid: rows of elements (a flat group is one row). onFocus(el) runs when an
// item gets the focus (keyboard or not), onActivate(el) on Enter/Space.

export function rove(grid, { onFocus, onActivate, wrap = false } = {}) {
  const rows = grid.filter((r) => r.length);
  if (!rows.length) return;
  const at = new Map();
  rows.forEach((r, i) => r.forEach((el, j) => at.set(el, [i, j])));
  let cur = rows[0][0];
  const make = (el) => {
    if (cur !== el) cur.setAttribute('tabindex', '-1');
    el.setAttribute('tabindex', '0');
    cur = el;
  };
  for (const [el] of at) {
    el.setAttribute('tabindex', el === cur ? '0' : '-1');
    el.addEventListener('focus', () => {
      make(el);
      if (onFocus) onFocus(el);
    });
    el.addEventListener('keydown', (ev) => {
      const [i, j] = at.get(el);
      const row = rows[i];
      let to = null;
      if (ev.key === 'ArrowRight') to = row[j + 1] || (wrap ? row[0] : null);
      else if (ev.key === 'ArrowLeft') to = row[j - 1] || (wrap ? row[row.length - 1] : null);
      else if (ev.key === 'ArrowDown' && rows[i + 1]) to = rows[i + 1][Math.min(j, rows[i + 1].length - 1)];
      else if (ev.key === 'ArrowUp' && rows[i - 1]) to = rows[i - 1][Math.min(j, rows[i - 1].length - 1)];
      else if (ev.key === 'Home') to = row[0];
      else if (ev.key === 'End') to = row[row.length - 1];
      else if ((ev.key === 'Enter' || ev.key === ' ') && onActivate) {
        ev.preventDefault();
        onActivate(el);
        return;
      } else return;
      ev.preventDefault();
      if (to) {
        make(to);
        to.focus();
      }
    });
  }
}
