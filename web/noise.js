// The noise floor of describe: a gate matches some feature for any string, so a name the
// model has never seen still gets edges. The floor is the strongest edge of made-up names
// (NONSENSE, asked in the same band); an edge no stronger than MARGIN times the floor is
// indistinguishable from what a made-up name gets, and an entity whose strongest edge is in
// the noise is probably unknown to the model. No DOM here.

export const NONSENSE = ['Qwxzvbkjhq', 'Zhorvalemtu'];
export const MARGIN = 1.1;

const best = (edges) => edges.reduce((m, e) => (Number.isFinite(e && e.gate_score) ? Math.max(m, e.gate_score) : m), 0);

// edges: the entity's; floors: the made-up names' edge lists. -> {floor, limit, noisy:
// [bool per edge], known: true (its best edge is above the noise), false (not), null (no
// edges at all)}
export function noiseVerdict(edges, floors) {
  const list = Array.isArray(edges) ? edges : [];
  const floor = Math.max(0, ...floors.map((f) => best(Array.isArray(f) ? f : [])));
  const limit = floor * MARGIN;
  const noisy = list.map((e) => !(Number.isFinite(e && e.gate_score) && e.gate_score > limit));
  return { floor, limit, noisy, known: list.length ? noisy.some((n) => !n) : null };
}
