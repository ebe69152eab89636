// web/heat.js: rows per layer, columns by |score|, colour scaled to the walk's largest |score|.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { heatColor, heatModel, heatTextColor } from '../../web/heat.js';

const HITS = [
  { layer: 2, feature: 5, gate_score: 1.0, target: 'a' },
  { layer: 0, feature: 9, gate_score: -4.0, target: 'b' },
  { layer: 0, feature: 3, gate_score: 2.0, target: 'c' },
  { layer: 2, feature: 8, gate_score: -3.0, target: 'd' },
];

test('one row per layer of the model, in order, hit or not', () => {
  const m = heatModel(HITS, 4);
  assert.deepEqual(m.rows.map((r) => r.layer), [0, 1, 2, 3]);
  assert.deepEqual(m.rows[1].cells, []);
  assert.equal(m.cols, 2);
  assert.equal(m.maxAbs, 4);
  assert.deepEqual(m.rows[0].cells.map((c) => c.feature), [9, 3]); // |-4| before |2|
  assert.deepEqual(m.rows[2].cells.map((c) => c.feature), [8, 5]);
});

test('without a layer count: only the layers hit; junk hits ignored', () => {
  const m = heatModel([...HITS, { layer: -1, gate_score: 9 }, { layer: 1.5, gate_score: 9 }, { layer: 3, gate_score: NaN }, null, 'x'], 0);
  assert.deepEqual(m.rows.map((r) => r.layer), [0, 2]);
  assert.equal(m.maxAbs, 4);
  assert.deepEqual(heatModel(undefined, 2), { rows: [{ layer: 0, cells: [] }, { layer: 1, cells: [] }], cols: 0, maxAbs: 0 });
  assert.equal(heatModel(HITS, 1e9).rows.length, 2); // an absurd layer count is not believed
});

test('colours: white at 0, full at maxAbs, linear, clamped, sign picks the hue', () => {
  assert.equal(heatColor(0, 4), 'rgb(255,255,255)');
  assert.equal(heatColor(4, 4), 'rgb(200,40,30)');
  assert.equal(heatColor(-4, 4), 'rgb(30,80,200)');
  assert.equal(heatColor(8, 4), heatColor(4, 4));
  assert.equal(heatColor(2, 4), 'rgb(228,148,143)'); // halfway
  assert.equal(heatColor(1, 0), 'rgb(255,255,255)');
  assert.equal(heatColor(NaN, 4), 'rgb(255,255,255)');
  assert.equal(heatTextColor(4, 4), '#fff');
  assert.equal(heatTextColor(1, 4), '#222');
});
