import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ConfigError, DecodeError, fromJson, parseConfig, schema as s } from '../src/index.js';

const Rule = s.struct('Rule', { kind: s.string });
const Cfg = s.struct('Cfg', { max_attempts: s.u32, rules: s.vec(Rule) }, { default: () => ({ max_attempts: 0, rules: [] }) });

function configError(json, schema = Cfg) {
  try {
    parseConfig(json, schema);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `${json}: ${e}`);
    return e.message;
  }
  assert.fail(`${json} was accepted`);
}

test('empty means defaults', () => {
  assert.deepEqual(parseConfig('  ', Cfg), { max_attempts: 0, rules: [] });
  assert.deepEqual(parseConfig('', Cfg), { max_attempts: 0, rules: [] });
  assert.equal(configError('\ufeff'), 'config: expected value at line 1 column 1', 'U+FEFF is not blank to Rust');
});

test('errors name the field', () => {
  assert.equal(configError('{"max_attempts": "five"}'), 'config.max_attempts: invalid type: string "five", expected u32');
  assert.equal(
    configError('{"rules": [{"kind": "a"}, {"kidn": "b"}]}'),
    'config.rules[1].kidn: unknown field `kidn`, expected `kind`',
  );
  assert.equal(configError('{} trailing'), 'config: trailing characters at line 1 column 4');
});

test('a missing field names both fixes', () => {
  const NoDefaults = s.struct('NoDefaults', { max_attempts: s.u32 });
  const e = configError('{}', NoDefaults);
  assert.ok(e.startsWith('config: missing field `max_attempts`'), e);
  assert.ok(e.includes("route's config") && e.includes('withDefault') && e.includes('default: () =>'), e);
  assert.ok(!configError('{"max_attempts": "five"}', NoDefaults).includes('withDefault'));
});

test('numbers are read as serde_json reads them', () => {
  const cases = [
    ['{"max_attempts": 5000000000}', 'config.max_attempts: invalid value: integer `5000000000`, expected u32'],
    ['{"max_attempts": -1}', 'config.max_attempts: invalid value: integer `-1`, expected u32'],
    ['{"max_attempts": 1.0}', 'config.max_attempts: invalid type: floating point `1.0`, expected u32'],
    ['{"max_attempts": 1e3}', 'config.max_attempts: invalid type: floating point `1000.0`, expected u32'],
    ['{"max_attempts": -0}', 'config.max_attempts: invalid type: floating point `-0.0`, expected u32'],
    ['{"max_attempts": null}', 'config.max_attempts: invalid type: null, expected u32'],
    ['{"max_attempts": true}', 'config.max_attempts: invalid type: boolean `true`, expected u32'],
    ['{"max_attempts": [1]}', 'config.max_attempts: invalid type: sequence, expected u32'],
    ['{"rules": {}}', 'config.rules: invalid type: map, expected a sequence'],
    ['{"rules": [5]}', 'config.rules[0]: invalid type: integer `5`, expected struct Rule'],
    ['null', 'config: invalid type: null, expected struct Cfg'],
  ];
  for (const [json, want] of cases) assert.equal(configError(json), want, json);
  const Big = s.struct('Big', { v: s.u64 });
  assert.deepEqual(fromJson('{"v": 18446744073709551615}', Big), { v: 18446744073709551615n });
  assert.equal(
    configError('{"v": 18446744073709551616}', Big),
    'config.v: invalid type: floating point `1.8446744073709552e19`, expected u64',
  );
});

test('duplicates and syntax errors are reported where serde reports them', () => {
  const cases = [
    ['{"max_attempts": 1, "max_attempts": 2}', 'config: duplicate field `max_attempts`'],
    ['{"max_attempts": }', 'config.max_attempts: expected value at line 1 column 18'],
    ['{"max_attempts": 5,}', 'config.?: trailing comma at line 1 column 20'],
    ['{"max_attempts" 5}', 'config: expected `:` at line 1 column 17'],
    ['{"max_attempts": 5 "rules": []}', 'config.?: expected `,` or `}` at line 1 column 20'],
    ['{"rules": [{"kind": "a"},]}', 'config.rules: trailing comma at line 1 column 26'],
    ['{"rules": [{"kind": "a"} {"kind": "b"}]}', 'config.rules: expected `,` or `]` at line 1 column 26'],
    ['{"rules": [{"kind": "a\\q"}]}', 'config.rules[0].kind: invalid escape at line 1 column 24'],
    ['{"rules": [{"kind": tru}]}', 'config.rules[0].kind: expected ident at line 1 column 24'],
    ['{"rules": [{"kind": true}]}', 'config.rules[0].kind: invalid type: boolean `true`, expected a string'],
    ['{"rules": [{"kind": nul}]}', 'config.rules[0].kind: expected ident at line 1 column 24'],
    ['[', 'config: EOF while parsing a list at line 1 column 1'],
    ['{"max_attempts": 1', 'config.?: EOF while parsing an object at line 1 column 18'],
    // A wrong field is found before broken syntax later in the document, as serde streams.
    ['{"bogus": 1, "max_attempts": }', 'config.bogus: unknown field `bogus`, expected one of `max_attempts`, `rules`'],
    ['{"max_attempts":\n  x}', 'config.max_attempts: expected value at line 2 column 3'],
    // serde refuses the first `[` where a string belongs without reading further.
    [`{"rules": ${'['.repeat(200)}`, 'config.rules[0][0]: invalid type: sequence, expected a string'],
  ];
  for (const [json, want] of cases) assert.equal(configError(json), want, json);
  assert.throws(() => fromJson('['.repeat(200), s.any), { message: /recursion limit exceeded at line 1 column 128$/ });
});

test('objects may also be written as arrays of their fields, as serde allows', () => {
  assert.deepEqual(parseConfig('[3, [["a"]]]', Cfg), { max_attempts: 3, rules: [{ kind: 'a' }] });
  assert.deepEqual(parseConfig('[3]', Cfg), { max_attempts: 3, rules: [] }, 'missing elements take the struct default');
  // Paths follow the array form too; Rust's `config.` prefix then reads oddly but exactly.
  assert.equal(configError('[3, [[]]]'), 'config.[1][0]: invalid length 0, expected struct Rule with 1 element');
  assert.equal(configError('[3, [], 4]'), 'config: trailing characters');
});

test('unit enums, options and defaults', () => {
  const Mode = s.unitEnum('Mode', ['dead_letter', 'discard']);
  const C = s.struct('C', { mode: Mode, note: s.option(s.string), n: s.withDefault(s.u32, () => 7) });
  assert.deepEqual(fromJson('{"mode": "discard"}', C), { mode: 'discard', note: undefined, n: 7 });
  assert.deepEqual(fromJson('{"mode": {"discard": null}, "note": null}', C), { mode: 'discard', note: undefined, n: 7 });
  assert.throws(() => fromJson('{"mode": "drop"}', C), {
    message: 'mode: unknown variant `drop`, expected one of `dead_letter`, `discard`',
  });
  assert.throws(() => fromJson('{"mode": 1}', C), { message: 'mode: expected value' });
  assert.throws(() => fromJson('{"mode": {"discard": 1}}', C), { message: 'mode.discard: invalid type: integer `1`, expected unit' });
  assert.throws(() => fromJson('{}', C), { message: 'missing field `mode`' });
  assert.throws(() => fromJson('{"mode": "discard", "note": 5}', C), DecodeError);
});

test('unknown fields may be allowed', () => {
  const Loose = s.struct('Loose', { a: s.u32 }, { denyUnknownFields: false });
  assert.deepEqual(fromJson('{"a": 1, "b": {"c": [1, 2]}}', Loose), { a: 1 });
  assert.throws(() => fromJson('{"a": 1, "b": {"c": [1 2]}}', Loose), { message: /^b: expected `,` or `]`/ });
});

test('tagged enums read their tag first and report inside at their own path', () => {
  const Shape = s.tagged('Shape', 'kind', { dot: null, box: { w: s.u32, h: s.withDefault(s.u32, () => 1) } });
  assert.deepEqual(fromJson('{"kind": "box", "w": 2}', Shape), { kind: 'box', w: 2, h: 1 });
  assert.deepEqual(fromJson('{"w": 2, "kind": "box", "h": 3}', Shape), { kind: 'box', w: 2, h: 3 });
  assert.deepEqual(fromJson('["box", 4]', Shape), { kind: 'box', w: 4, h: 1 });
  const cases = [
    ['{"w": 2}', 'missing field `kind`'],
    ['{"kind": "circle"}', 'kind: unknown variant `circle`, expected one of `dot`, `box`'],
    ['{"kind": 5}', 'kind: invalid type: integer `5`, expected variant identifier'],
    ['{"kind": "box"}', 'missing field `w`'],
    ['{"kind": "box", "w": "2"}', 'invalid type: string "2", expected u32'],
    ['{"kind": "box", "w": 2, "d": 1}', 'unknown field `d`, expected one of `w`, `h`'],
    ['{"kind": "box", "kind": "dot"}', 'duplicate field `kind`'],
    ['{"kind": "box", "w": [1,]}', 'w: trailing comma at line 1 column 25'],
    ['"box"', 'invalid type: string "box", expected internally tagged enum Shape'],
    ['["box"]', 'invalid length 0, expected struct variant Shape::Box with 2 elements'],
    ['["box", 1, 2, 3]', 'invalid length 3, expected 2 elements in sequence'],
  ];
  for (const [json, want] of cases) assert.throws(() => fromJson(json, Shape), { message: want }, json);
});
