// web/export.js, web/noise.js, web/edits.js and api.js's decoder: results as CSV/JSON, the
// describe noise floor, the edit view's rules, lone bytes made visible.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { decodeVisible } from '../../web/api.js';
import { showToken } from '../../web/dom.js';
import { canonicalPrompt, editPrompts, editsOf, insertVerdict, modeLabel, probText, takeAim } from '../../web/edits.js';
import { exportText, fileName, tableOf, toCSV } from '../../web/export.js';
import { noiseVerdict } from '../../web/noise.js';

const DESCRIBE = { entity: 'France', edges: [{ target: 'Paris', gate_score: 10.9, layer: 2, relation: 'capital', source: 'cluster', also: ['ap', 'x,y'] }, { target: '=cmd', gate_score: 1, layer: 1 }] };

test('CSV: quoting, formulas defused, one row per edge / hit / prediction', () => {
  assert.equal(toCSV(['a', 'b'], [{ a: 'x,y', b: 'say "hi"' }, { a: 'line\nbreak', b: 3 }]), 'a,b\r\n"x,y","say ""hi"""\r\n"line\nbreak",3\r\n');
  assert.equal(exportText('describe', DESCRIBE, 'csv'),
    'rank,entity,relation,relation_source,target,gate_score,layer,also\r\n1,France,capital,cluster,Paris,10.9,2,ap | x,y\r\n'.replace('ap | x,y', '"ap | x,y"') + "2,France,,,'=cmd,1,1,\r\n");
  const walk = tableOf('walk', { prompt: 'p', hits: [{ layer: 0, feature: 3, gate_score: -1.5, target: 't' }] });
  assert.deepEqual(walk.rows, [{ prompt: 'p', layer: 0, feature: 3, gate_score: -1.5, target: 't', relation: '' }]);
  const inf = tableOf('infer', { prompt: 'p', walk: [{ token: 'a', probability: 0.5 }], dense: [{ token: 'b', probability: 0.25 }] });
  assert.deepEqual(inf.rows.map((r) => r.mode + r.rank + r.token), ['walk1a', 'dense1b']);
  assert.deepEqual(JSON.parse(exportText('describe', DESCRIBE, 'json')), DESCRIBE);
  assert.equal(fileName('walk', 'The capital of France is', 'csv'), 'larql-walk-The-capital-of-France-is.csv');
  assert.equal(fileName('describe', '<>/', 'json'), 'larql-describe-result.json');
});

test('noise floor: edges no stronger than a made-up name are noise', () => {
  const v = noiseVerdict([{ gate_score: 12 }, { gate_score: 5 }], [[{ gate_score: 4.8 }], [{ gate_score: 3 }]]);
  assert.equal(v.floor, 4.8);
  assert.deepEqual(v.noisy, [false, true]);
  assert.equal(v.known, true);
  assert.equal(noiseVerdict([{ gate_score: 5 }], [[{ gate_score: 5 }]]).known, false);
  assert.equal(noiseVerdict([], [[]]).known, null);
  assert.deepEqual(noiseVerdict([{ gate_score: 1 }], [[], null]).noisy, [false]);
});

test('edits: canonical prompt, mode names, did it take, per-edit rows', () => {
  assert.equal(canonicalPrompt('Lemuria', 'capital_city-of'), 'The capital city of of Lemuria is');
  assert.equal(modeLabel('constellation'), 'compose');
  assert.equal(modeLabel('embedding'), 'compose (embedding key)');
  assert.equal(modeLabel('knn'), 'knn');
  assert.equal(modeLabel('subject'), 'subject');
  assert.equal(modeLabel(undefined), '');
  assert.equal(probText(0.9999), '0.999');
  assert.equal(probText(1), '1');
  assert.equal(probText(0.002), '0.002');
  assert.equal(probText(0.0001), '<0.001');
  assert.equal(probText(0), '0');
  assert.equal(probText(undefined), '–');
  assert.match(takeAim('subject'), /subject edit/);
  assert.match(takeAim('constellation'), /0\.30 to 0\.95/);
  assert.equal(insertVerdict({ mode: 'subject', target_probability: 0.9999, tokens_on_logits: 0, id: 'e1' }).took, true);
  assert.equal(insertVerdict({ mode: 'subject', target_probability: 0.01 }).took, false);
  assert.equal(insertVerdict({ target_probability: 0.002 }).took, false);
  assert.equal(insertVerdict({ target_probability: 0.5 }).took, true);
  assert.equal(insertVerdict({ mode: 'knn' }).took, null);
  assert.equal(insertVerdict({ target_probability: 0.9, warning: 'target not first' }).took, false);
  assert.deepEqual(editsOf({ patches: [{ name: 'p' }] }), []);
  assert.deepEqual(editsOf({ edits: [{ id: 'e1' }, { id: '' }, null, { x: 1 }], patches: [{ name: 'p', edits: [{ id: 2 }] }] }), [{ id: 'e1' }, { patch: 'p', id: 2 }]);
  assert.deepEqual(editPrompts({ entity: 'A', relation: 'r' }), ['The r of A is']);
  assert.deepEqual(editPrompts({ prompts: ['x', 'y'] }), ['x', 'y']);
});

test('decodeVisible: lone bytes become marks showToken shows as <0xE2>', () => {
  const enc = new TextEncoder();
  assert.equal(decodeVisible(enc.encode('{"a":"日本"}')), '{"a":"日本"}');
  assert.equal(showToken(JSON.parse(decodeVisible(new Uint8Array([0x22, 0xe2, 0x82, 0x22])))), '<0xE2><0x82>');
  assert.equal(showToken(decodeVisible(new Uint8Array([0x41, 0xff, 0xc3, 0xa9, 0xed, 0xa0, 0x80]))), 'A<0xFF>é<0xED><0xA0><0x80>');
});
