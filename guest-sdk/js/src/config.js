// Typed decoding of JSON (the operator's config, a payload) with serde's rules and paths.
//
// A schema says what a value must be; decoding it from JSON gives plain JS values or
// throws an error naming the path of the offending field, exactly where the Rust SDK
// (serde + serde_path_to_error) names it: `config.rules[2].retry: missing field `cap_ms``.
// Messages use serde's wording; unlike serde_json they carry a line and column only for
// syntax errors.

import { parseJson } from './json.js';

/** @typedef {import('./json.js').JsonNode} JsonNode */

/**
 * A config the policy refuses. `init` returns its message as the error the host shows the
 * operator, so it should name the field: `config.max_attempts: must be at least 1`.
 */
export class ConfigError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** JSON that does not fit its schema; `path` is the offending field (`items[2].sku`). */
export class DecodeError extends Error {
  /** @param {string} path @param {string} detail */
  constructor(path, detail) {
    super(path === '.' ? detail : `${path}: ${detail}`);
    this.name = 'DecodeError';
    this.path = path;
    this.detail = detail;
  }
}

/**
 * @template T
 * @typedef {object} Schema
 * @property {string} expecting what serde calls the type in "expected ..." (`u32`, `struct Rule`)
 * @property {(node: JsonNode, at: Cursor) => T} decode
 * @property {(() => T) | undefined} [missing] the value of an omitted field, when it has one
 * @property {boolean} [optional] an omitted field is `undefined` (serde's `Option`)
 */

// Where the decoder is. Inside a value serde buffers (an internally tagged enum) errors
// stay at the buffered value's path, so a cursor can be pinned: its children are itself.
class Cursor {
  /** @param {Array<string | number>} path @param {boolean} pinned */
  constructor(path, pinned = false) {
    this.path = path;
    this.pinned = pinned;
  }

  /** @param {string | number} segment */
  child(segment) {
    return this.pinned ? this : new Cursor([...this.path, segment]);
  }

  pin() {
    return new Cursor(this.path, true);
  }

  /** serde_path_to_error's rendering: `a.b[2].c`, `.` for the root. */
  toString() {
    if (this.path.length === 0) return '.';
    let out = '';
    for (const s of this.path) {
      if (typeof s === 'number') out += `[${s}]`;
      else out += out === '' ? s : `.${s}`;
    }
    return out;
  }

  /** @param {string} detail */
  fail(detail) {
    return new DecodeError(this.toString(), detail);
  }
}

/** Throw a syntax error node at the path serde reports it under. */
function syntax(node, at, parent) {
  throw (node.at === 'parent' ? parent : at).fail(node.message);
}

// How serde_json describes a value in "invalid type: ..." (its `JsonUnexpected`).
function unexpected(node) {
  switch (node.t) {
    case 'null':
      return 'null';
    case 'bool':
      return `boolean \`${node.v}\``;
    case 'num':
      return node.int !== undefined ? `integer \`${node.int}\`` : `floating point \`${float(node.f)}\``;
    case 'str':
      return `string ${rustDebug(node.v)}`;
    case 'arr':
      return 'sequence';
    case 'obj':
      return 'map';
    default:
      return 'value';
  }
}

// Rust's shortest float rendering: `1.0`, `0.5`, `1e20`.
function float(f) {
  if (Object.is(f, -0)) return '-0.0';
  const [digits, exp] = f.toExponential().split('e');
  const e = Number(exp);
  if (e >= -5 && e < 16) return Number.isInteger(f) ? `${BigInt(f)}.0` : String(f);
  return `${digits}e${e}`;
}

// Rust's `{:?}` of a string, as serde puts it in messages.
function rustDebug(s) {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (ch === '\0') out += '\\0';
    else if (c < 0x20 || c === 0x7f) out += `\\u{${c.toString(16)}}`;
    else out += ch;
  }
  return `${out}"`;
}

function invalidType(node, exp) {
  return `invalid type: ${unexpected(node)}, expected ${exp}`;
}

function oneOf(names, none) {
  if (names.length === 0) return none;
  if (names.length === 1) return `\`${names[0]}\``;
  return `one of ${names.map((n) => `\`${n}\``).join(', ')}`;
}

function integer(name, min, max, toValue) {
  return {
    expecting: name,
    decode(node, at) {
      if (node.t === 'err') syntax(node, at, at);
      if (node.t !== 'num' || node.int === undefined) throw at.fail(invalidType(node, name));
      if (node.int < min || node.int > max) {
        throw at.fail(`invalid value: integer \`${node.int}\`, expected ${name}`);
      }
      return toValue(node.int);
    },
  };
}

/** A `u32`, as a Number. */
export const u32 = integer('u32', 0n, 0xffff_ffffn, Number);
/** A `u64`, as a BigInt (Numbers lose precision above 2^53). */
export const u64 = integer('u64', 0n, (1n << 64n) - 1n, (v) => v);

/** A boolean. */
export const bool = {
  expecting: 'a boolean',
  decode(node, at) {
    if (node.t === 'err') syntax(node, at, at);
    if (node.t !== 'bool') throw at.fail(invalidType(node, 'a boolean'));
    return node.v;
  },
};

/** A string. */
export const string = {
  expecting: 'a string',
  decode(node, at) {
    if (node.t === 'err') syntax(node, at, at);
    if (node.t !== 'str') throw at.fail(invalidType(node, 'a string'));
    return node.v;
  },
};

/** Any JSON value, as JSON.parse gives it except that integers beyond 2^53 are BigInts. */
export const any = {
  expecting: 'any valid JSON value',
  decode(node, at) {
    switch (node.t) {
      case 'err':
        return syntax(node, at, at);
      case 'null':
        return null;
      case 'bool':
      case 'str':
        return node.v;
      case 'num':
        return node.int !== undefined && !Number.isSafeInteger(node.f) ? node.int : node.f;
      case 'arr':
        return node.items.map((item, i) => {
          if (item.t === 'err' && item.at === 'parent') syntax(item, at, at);
          return any.decode(item, at.child(i));
        });
      default: {
        const out = {};
        for (const [key, value] of node.entries) {
          if (key === undefined) syntax(value, at.child('?'), at);
          if (value.t === 'err' && value.at === 'parent') syntax(value, at, at);
          Object.defineProperty(out, key, {
            value: any.decode(value, at.child(key)),
            enumerable: true,
            writable: true,
            configurable: true,
          });
        }
        return out;
      }
    }
  },
};

/**
 * `Option<T>`: `null` (or an omitted field) is `undefined`.
 * @template T @param {Schema<T>} inner @returns {Schema<T | undefined>}
 */
export function option(inner) {
  return {
    expecting: inner.expecting,
    optional: true,
    decode(node, at) {
      if (node.t === 'null') return undefined;
      return inner.decode(node, at);
    },
  };
}

/**
 * `Vec<T>`: a JSON array.
 * @template T @param {Schema<T>} inner @returns {Schema<T[]>}
 */
export function vec(inner) {
  return {
    expecting: 'a sequence',
    decode(node, at) {
      if (node.t === 'err') syntax(node, at, at);
      if (node.t !== 'arr') throw at.fail(invalidType(node, 'a sequence'));
      return node.items.map((item, i) => {
        if (item.t === 'err' && item.at === 'parent') syntax(item, at, at);
        return inner.decode(item, at.child(i));
      });
    },
  };
}

/**
 * A field that takes `value()` when omitted (serde's `#[serde(default)]` on a field).
 * @template T @param {Schema<T>} inner @param {() => T} value @returns {Schema<T>}
 */
export function withDefault(inner, value) {
  return { ...inner, missing: value };
}

/**
 * A fieldless enum written as a string: `"dead_letter"`. `variants` are the JSON names;
 * the decoded value is the name itself.
 * @template {string} V @param {string} name @param {readonly V[]} variants @returns {Schema<V>}
 */
export function unitEnum(name, variants) {
  const expected = oneOf(variants, 'there are no variants');
  const variant = (key, at) => {
    if (!variants.includes(key)) throw at.fail(`unknown variant \`${key}\`, expected ${expected}`);
    return key;
  };
  // serde also reads `{"variant": null}`, the map form of a unit variant.
  const unit = (value, at) => {
    if (value.t === 'err') syntax(value, at, at);
    if (value.t !== 'null') throw at.fail(invalidType(value, 'unit'));
  };
  return {
    expecting: `enum ${name}`,
    decode(node, at) {
      if (node.t === 'err') syntax(node, at, at);
      if (at.pinned) {
        // Inside a buffered value serde's ContentDeserializer has its own rules.
        if (node.t === 'str') return variant(node.v, at);
        if (node.t === 'obj' && node.entries.length === 1) {
          const [key, value] = node.entries[0];
          const v = variant(key, at);
          unit(value, at);
          return v;
        }
        if (node.t === 'obj') throw at.fail('invalid value: map, expected map with a single key');
        throw at.fail(invalidType(node, 'string or map'));
      }
      if (node.t === 'str') return variant(node.v, at);
      if (node.t === 'obj' && node.entries.length > 0) {
        const [key, value] = node.entries[0];
        if (key === undefined) syntax(value, at, at);
        const v = variant(key, at);
        if (value.t === 'err' && value.at === 'parent') syntax(value, at, at);
        unit(value, at.child(key));
        if (node.entries.length > 1) throw at.fail('expected value');
        return v;
      }
      throw at.fail('expected value');
    },
  };
}

/**
 * @typedef {object} StructOptions
 * @property {boolean} [denyUnknownFields] refuse fields the schema does not name (default
 *   true, serde's `deny_unknown_fields`: a typo in a config is an error, not a silent default)
 * @property {() => object} [default] the whole struct's default: omitted fields take their
 *   value from it (serde's container `#[serde(default)]`)
 */

/**
 * A struct: a JSON object with the given fields, in this order (serde also reads a JSON
 * array of the field values in that order). An omitted field takes the field's default,
 * else the struct's default, else `undefined` for an option, else it is an error.
 * @param {string} name the type's name in messages (`struct Rule`)
 * @param {Record<string, Schema<any>>} fields
 * @param {StructOptions} [options]
 * @returns {Schema<Record<string, any>>}
 */
export function struct(name, fields, options = {}) {
  return structLike(`struct ${name}`, fields, options);
}

function structLike(expecting, fields, { denyUnknownFields = true, default: whole } = {}) {
  const names = Object.keys(fields);
  const expected = oneOf(names, 'there are no fields');
  // serde's order: the field's own default, then the struct's, then (in the object form
  // only) `None` for an option; the array form counts a missing element as too short.
  const missing = (field, at, index) => {
    const schema = fields[field];
    if (schema.missing) return schema.missing();
    if (whole) return whole()[field];
    if (index !== undefined) {
      const n = names.length;
      throw at.fail(`invalid length ${index}, expected ${expecting} with ${n} element${n === 1 ? '' : 's'}`);
    }
    if (schema.optional) return undefined;
    throw at.fail(`missing field \`${field}\``);
  };
  return {
    expecting,
    decode(node, at) {
      if (node.t === 'err') syntax(node, at, at);
      const out = {};
      if (node.t === 'obj') {
        const seen = new Set();
        for (const [key, value] of node.entries) {
          if (key === undefined) syntax(value, at.child('?'), at);
          if (!Object.hasOwn(fields, key)) {
            if (denyUnknownFields) {
              throw at.child(key).fail(`unknown field \`${key}\`, expected ${expected}`);
            }
            // serde_json skips an ignored value without tracking paths inside it.
            const broken = findSyntax(value);
            if (broken) throw at.child(key).fail(broken.message);
            continue;
          }
          if (seen.has(key)) throw at.fail(`duplicate field \`${key}\``);
          seen.add(key);
          if (value.t === 'err' && value.at === 'parent') syntax(value, at, at);
          out[key] = fields[key].decode(value, at.child(key));
        }
        for (const field of names) if (!seen.has(field)) out[field] = missing(field, at);
        return out;
      }
      if (node.t === 'arr') {
        names.forEach((field, i) => {
          const item = node.items[i];
          if (item === undefined) {
            out[field] = missing(field, at, i);
            return;
          }
          if (item.t === 'err' && item.at === 'parent') syntax(item, at, at);
          out[field] = fields[field].decode(item, at.child(i));
        });
        if (node.items.length > names.length) {
          const extra = node.items[names.length];
          if (extra.t === 'err' && extra.at === 'parent') syntax(extra, at, at);
          throw at.fail(
            at.pinned
              ? `invalid length ${node.items.length}, expected ${names.length} elements in sequence`
              : 'trailing characters',
          );
        }
        return out;
      }
      throw at.fail(invalidType(node, expecting));
    },
  };
}

function findSyntax(node) {
  if (node.t === 'err') return node;
  if (node.t === 'arr') return node.items.map(findSyntax).find(Boolean);
  if (node.t === 'obj') return node.entries.map(([, v]) => findSyntax(v)).find(Boolean);
  return undefined;
}

/**
 * An internally tagged enum (serde's `#[serde(tag = "...")]`): `{"strategy": "fixed",
 * "delay_ms": 500}`. Each variant is `null` (no fields) or the fields of a struct; the
 * decoded value is `{[tag]: variant, ...fields}`, or `build(variant, fields)` when given.
 * @template T
 * @param {string} name the type's name in messages
 * @param {string} tag the field naming the variant
 * @param {Record<string, Record<string, Schema<any>> | null>} variants
 * @param {(variant: string, fields: Record<string, any>) => T} [build]
 * @returns {Schema<T>}
 */
export function tagged(name, tag, variants, build = (variant, fields) => ({ [tag]: variant, ...fields })) {
  const expected = oneOf(Object.keys(variants), 'there are no variants');
  const bodies = Object.fromEntries(
    Object.entries(variants).map(([v, fields]) => [
      v,
      fields && structLike(`struct variant ${name}::${pascal(v)}`, fields),
    ]),
  );
  const variant = (node, at, parent) => {
    if (node.t === 'err') syntax(node, at, parent);
    if (node.t !== 'str') throw at.fail(invalidType(node, 'variant identifier'));
    if (!Object.hasOwn(variants, node.v)) {
      throw at.fail(`unknown variant \`${node.v}\`, expected ${expected}`);
    }
    return node.v;
  };
  const finish = (which, rest, at) => {
    const body = bodies[which];
    // A fieldless variant ignores whatever else the object holds, as serde does.
    const fields = body ? body.decode(rest, at.pin()) : {};
    return build(which, fields);
  };
  return {
    expecting: `internally tagged enum ${name}`,
    decode(node, at) {
      if (node.t === 'err') syntax(node, at, at);
      if (at.pinned) throw at.fail(`invalid type: ${unexpected(node)}, expected internally tagged enum ${name}`);
      if (node.t === 'obj') {
        let which;
        const rest = [];
        for (const [key, value] of node.entries) {
          if (key === undefined) syntax(value, at.child('?'), at);
          if (key === tag && which !== undefined) throw at.fail(`duplicate field \`${tag}\``);
          if (value.t === 'err' && value.at === 'parent') syntax(value, at, at);
          if (key === tag) {
            which = variant(value, at.child(tag), at);
          } else {
            checkSyntax(value, at.child(key));
            rest.push([key, value]);
          }
        }
        if (which === undefined) throw at.fail(`missing field \`${tag}\``);
        return finish(which, { t: 'obj', entries: rest }, at);
      }
      if (node.t === 'arr') {
        if (node.items.length === 0) throw at.fail(`missing field \`${tag}\``);
        const [first, ...rest] = node.items;
        if (first.t === 'err' && first.at === 'parent') syntax(first, at, at);
        const which = variant(first, at.child(0), at);
        rest.forEach((item, i) => {
          if (item.t === 'err' && item.at === 'parent') syntax(item, at, at);
          checkSyntax(item, at.child(i + 1));
        });
        return finish(which, { t: 'arr', items: rest }, at);
      }
      throw at.fail(invalidType(node, `internally tagged enum ${name}`));
    },
  };
}

function pascal(snake) {
  return snake.replace(/(^|_)([a-z])/g, (_, __, c) => c.toUpperCase());
}

// serde buffers a tagged enum's fields before decoding them, so a syntax error anywhere in
// them is found first, and at its own path.
function checkSyntax(node, at) {
  if (node.t === 'err') syntax(node, at, at);
  if (node.t === 'arr') {
    node.items.forEach((item, i) => {
      if (item.t === 'err' && item.at === 'parent') syntax(item, at, at);
      checkSyntax(item, at.child(i));
    });
  } else if (node.t === 'obj') {
    for (const [key, value] of node.entries) {
      if (key === undefined) syntax(value, at.child('?'), at);
      if (value.t === 'err' && value.at === 'parent') syntax(value, at, at);
      checkSyntax(value, at.child(key));
    }
  }
}

/**
 * Decode JSON text with `schema`, naming the path of the offending field on error
 * (`items[2].sku: missing field `sku``); text after the value is refused too.
 * @template T @param {string | Uint8Array} json @param {Schema<T>} schema @returns {T}
 * @throws {DecodeError}
 */
export function fromJson(json, schema) {
  return decodeAt(json, schema, new Cursor([]));
}

function decodeAt(json, schema, at) {
  const text = typeof json === 'string' ? json : utf8(json, at);
  const { root, trailing } = parseJson(text);
  const value = schema.decode(root, at);
  if (trailing) throw at.fail(trailing);
  return value;
}

function utf8(bytes, at) {
  let decoder;
  try {
    decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  } catch {
    // An engine without the `fatal` option still decodes; invalid bytes become U+FFFD.
    decoder = new TextDecoder('utf-8');
  }
  try {
    return decoder.decode(bytes);
  } catch {
    throw at.fail('invalid unicode code point at line 1 column 1');
  }
}

// What Rust's `str::trim` removes (JS's `trim` also drops U+FEFF, which Rust keeps).
const RUST_BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;

/**
 * Parse the operator's config into the policy's config schema. Empty text means `{}`. Errors
 * name the field under `config`: `config.rules[2].max_attempts: invalid type: string "five",
 * expected u32`. An omitted field without a default says how to give it one.
 * @template T @param {string} json @param {Schema<T>} schema @returns {T}
 * @throws {ConfigError}
 */
export function parseConfig(json, schema) {
  const text = RUST_BLANK.test(json) ? '{}' : json;
  try {
    return decodeAt(text, schema, new Cursor([]));
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    // The Rust SDK's `located`: `config: ...` at the root, else `config.` and the path
    // (even `config.[0]` for an array at the root).
    const message = e.path === '.' ? `config: ${e.detail}` : `config.${e.path}: ${e.detail}`;
    const advice = message.includes(': missing field `')
      ? "; set it in the route's config, or give it a default: `withDefault(...)` on the field " +
        'or `{default: () => ({...})}` on the config struct'
      : '';
    throw new ConfigError(message + advice);
  }
}
