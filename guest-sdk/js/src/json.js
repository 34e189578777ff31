// A JSON reader with serde_json's grammar and messages, for the config and payload decoders.
//
// JSON.parse will not do: it loses u64 precision above 2^53, keeps only the last of duplicate
// keys (serde refuses them), and reports a syntax error without the field it happened in.
// This reader keeps numbers as text, keys in order with duplicates, and turns a syntax error
// into a node at the place it happened, so the decoder, walking in document order as serde
// does, reports whichever comes first: a wrong field or the broken syntax, each at its path.

/**
 * @typedef {{t: 'null'}
 *   | {t: 'bool', v: boolean}
 *   | {t: 'num', raw: string, int: bigint | undefined, f: number}
 *   | {t: 'str', v: string}
 *   | {t: 'arr', items: JsonNode[]}
 *   | {t: 'obj', entries: [string | undefined, JsonNode][]}
 *   | SyntaxNode} JsonNode
 *
 * A number keeps `int` when serde_json would read it as an integer (u64 or i64 range, no
 * fraction or exponent), else only `f`. An object entry whose key could not be read has key
 * `undefined`.
 */

/**
 * @typedef {{t: 'err', message: string, at: 'self' | 'parent'}} SyntaxNode
 * A syntax error: `at: 'self'` blames the value in this position, `'parent'` the container
 * holding it (a missing `,` or `:` between entries).
 */

// serde_json's limit: deeper nesting is refused rather than risking the stack.
const RECURSION_LIMIT = 128;

const MESSAGES = {
  eofList: 'EOF while parsing a list',
  eofObject: 'EOF while parsing an object',
  eofString: 'EOF while parsing a string',
  eofValue: 'EOF while parsing a value',
  colon: 'expected `:`',
  listCommaOrEnd: 'expected `,` or `]`',
  objectCommaOrEnd: 'expected `,` or `}`',
  ident: 'expected ident',
  value: 'expected value',
  escape: 'invalid escape',
  number: 'invalid number',
  range: 'number out of range',
  codePoint: 'invalid unicode code point',
  control: 'control character (\\u0000-\\u001F) found while parsing a string',
  keyString: 'key must be a string',
  loneSurrogate: 'lone leading surrogate in hex escape',
  hexEnd: 'unexpected end of hex escape',
  trailingComma: 'trailing comma',
  trailing: 'trailing characters',
  recursion: 'recursion limit exceeded',
};

const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);

/** Thrown inside the reader to stop at a syntax error; `partial` is what was read so far. */
class Stop {
  /** @param {SyntaxNode | undefined} node @param {JsonNode} [partial] */
  constructor(node, partial) {
    this.node = node;
    this.partial = partial;
  }
}

class Reader {
  /** @param {string} text */
  constructor(text) {
    this.s = text;
    this.i = 0;
    this.depth = 0;
  }

  /**
   * A syntax error blaming the character at `index`, or the end of the input. The position
   * is serde_json's: 1-based line, and the column in UTF-8 bytes, counting the offending
   * character (at the end: the length of the last line).
   * @returns {Stop}
   */
  fail(key, index = this.i, at = 'self') {
    const upTo = this.s.slice(0, Math.min(index, this.s.length));
    const lineStart = upTo.lastIndexOf('\n') + 1;
    let line = 1;
    for (let k = 0; k < upTo.length; k++) if (upTo.charCodeAt(k) === 10) line++;
    let column = new TextEncoder().encode(upTo.slice(lineStart)).length;
    if (index < this.s.length) column += 1;
    return new Stop({ t: 'err', message: `${MESSAGES[key]} at line ${line} column ${column}`, at });
  }

  ws() {
    while (this.i < this.s.length) {
      const c = this.s[this.i];
      if (c !== ' ' && c !== '\n' && c !== '\t' && c !== '\r') break;
      this.i++;
    }
    return this.i < this.s.length ? this.s[this.i] : undefined;
  }

  /** @returns {JsonNode} */
  value() {
    const c = this.ws();
    switch (c) {
      case undefined:
        throw this.fail('eofValue');
      case 'n':
        this.ident('null');
        return { t: 'null' };
      case 't':
        this.ident('true');
        return { t: 'bool', v: true };
      case 'f':
        this.ident('false');
        return { t: 'bool', v: false };
      case '"':
        return { t: 'str', v: this.string() };
      case '[':
        return this.array();
      case '{':
        return this.object();
      default:
        if (c === '-' || (c >= '0' && c <= '9')) return this.number();
        throw this.fail('value');
    }
  }

  ident(word) {
    for (let k = 0; k < word.length; k++, this.i++) {
      if (this.i >= this.s.length) throw this.fail('eofValue');
      if (this.s[this.i] !== word[k]) throw this.fail('ident');
    }
  }

  number() {
    const start = this.i;
    const digit = () => this.i < this.s.length && this.s[this.i] >= '0' && this.s[this.i] <= '9';
    if (this.s[this.i] === '-') this.i++;
    if (this.i >= this.s.length) throw this.fail('eofValue');
    if (!digit()) throw this.fail('number');
    if (this.s[this.i] === '0') {
      this.i++;
      if (digit()) throw this.fail('number');
    } else {
      while (digit()) this.i++;
    }
    let integer = true;
    if (this.s[this.i] === '.') {
      integer = false;
      this.i++;
      if (this.i >= this.s.length) throw this.fail('eofValue');
      if (!digit()) throw this.fail('number');
      while (digit()) this.i++;
    }
    if (this.s[this.i] === 'e' || this.s[this.i] === 'E') {
      integer = false;
      this.i++;
      if (this.s[this.i] === '+' || this.s[this.i] === '-') this.i++;
      if (this.i >= this.s.length) throw this.fail('eofValue');
      if (!digit()) throw this.fail('number');
      while (digit()) this.i++;
    }
    const raw = this.s.slice(start, this.i);
    const f = Number(raw);
    if (!Number.isFinite(f)) throw this.fail('range', this.i - 1);
    let int;
    if (integer) {
      const big = BigInt(raw);
      // serde_json reads `-0` and integers outside u64/i64 as floats.
      if (raw.startsWith('-') ? big < 0n && big >= I64_MIN : big <= U64_MAX) int = big;
    }
    return { t: 'num', raw, int, f };
  }

  string() {
    this.i++;
    let out = '';
    for (;;) {
      if (this.i >= this.s.length) throw this.fail('eofString');
      const c = this.s[this.i];
      const code = c.charCodeAt(0);
      if (c === '"') {
        this.i++;
        return out;
      }
      if (code < 0x20) throw this.fail('control');
      if (c !== '\\') {
        out += c;
        this.i++;
        continue;
      }
      this.i++;
      if (this.i >= this.s.length) throw this.fail('eofString');
      const e = this.s[this.i++];
      const simple = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
      if (e in simple) {
        out += simple[e];
      } else if (e === 'u') {
        const unit = this.hex4();
        if (unit >= 0xdc00 && unit <= 0xdfff) throw this.fail('loneSurrogate', this.i - 1);
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (this.s[this.i] !== '\\' || this.s[this.i + 1] !== 'u') {
            throw this.fail(this.i >= this.s.length ? 'eofString' : 'loneSurrogate');
          }
          this.i += 2;
          const low = this.hex4();
          if (low < 0xdc00 || low > 0xdfff) throw this.fail('loneSurrogate', this.i - 1);
          out += String.fromCharCode(unit, low);
        } else {
          out += String.fromCharCode(unit);
        }
      } else {
        throw this.fail('escape', this.i - 1);
      }
    }
  }

  hex4() {
    let v = 0;
    for (let k = 0; k < 4; k++) {
      if (this.i >= this.s.length) throw this.fail('eofString');
      const d = parseInt(this.s[this.i], 16);
      if (Number.isNaN(d)) throw this.fail('escape');
      v = v * 16 + d;
      this.i++;
    }
    return v;
  }

  enter() {
    if (++this.depth >= RECURSION_LIMIT) throw this.fail('recursion');
    this.i++;
  }

  /**
   * A value inside a container: the value, and whether a syntax error cut the input short
   * (then the value is the error node or a truncated container).
   */
  item() {
    try {
      return { node: this.value(), stopped: false };
    } catch (e) {
      if (!(e instanceof Stop)) throw e;
      return { node: e.partial ?? e.node, stopped: true };
    }
  }

  /** A syntax error at this level: record it as the container's last entry and stop. */
  cut(container, add, stop) {
    if (stop) add(stop.node);
    throw new Stop(undefined, container);
  }

  // serde_json's SeqAccess: the delimiter before an element is checked before the element
  // is read, so a delimiter error blames the list (`parent`), an element's error the element.
  array() {
    this.enter();
    /** @type {JsonNode[]} */
    const items = [];
    const node = { t: 'arr', items };
    const add = (n) => items.push(n);
    for (let first = true; ; first = false) {
      let c = this.ws();
      if (c === ']') {
        this.i++;
        this.depth--;
        return node;
      }
      if (c === undefined) this.cut(node, add, this.fail('eofList', this.i, 'parent'));
      if (c === ',' && !first) {
        this.i++;
        c = this.ws();
      } else if (!first) {
        this.cut(node, add, this.fail('listCommaOrEnd', this.i, 'parent'));
      }
      if (c === ']') this.cut(node, add, this.fail('trailingComma', this.i, 'parent'));
      if (c === undefined) this.cut(node, add, this.fail('eofValue', this.i, 'parent'));
      const { node: value, stopped } = this.item();
      items.push(value);
      if (stopped) this.cut(node, add);
    }
  }

  // serde_json's MapAccess: errors before a key is read are reported under the key `?`
  // (serde_path_to_error's segment for a key it never saw); a missing `:` blames the object.
  object() {
    this.enter();
    /** @type {[string | undefined, JsonNode][]} */
    const entries = [];
    const node = { t: 'obj', entries };
    const atKey = (n) => entries.push([undefined, n]);
    for (let first = true; ; first = false) {
      let c = this.ws();
      if (c === '}') {
        this.i++;
        this.depth--;
        return node;
      }
      if (c === undefined) this.cut(node, atKey, this.fail('eofObject'));
      if (c === ',' && !first) {
        this.i++;
        c = this.ws();
      } else if (!first) {
        this.cut(node, atKey, this.fail('objectCommaOrEnd'));
      }
      if (c === '}') this.cut(node, atKey, this.fail('trailingComma'));
      if (c === undefined) this.cut(node, atKey, this.fail('eofValue'));
      if (c !== '"') this.cut(node, atKey, this.fail('keyString'));
      let key;
      try {
        key = this.string();
      } catch (e) {
        if (!(e instanceof Stop)) throw e;
        this.cut(node, atKey, e);
      }
      const atParent = (n) => entries.push([key, n]);
      c = this.ws();
      if (c === undefined) this.cut(node, atParent, this.fail('eofObject', this.i, 'parent'));
      if (c !== ':') this.cut(node, atParent, this.fail('colon', this.i, 'parent'));
      this.i++;
      const { node: value, stopped } = this.item();
      entries.push([key, value]);
      if (stopped) this.cut(node, atKey);
    }
  }
}

/**
 * Parse `text` into a tree. A syntax error never throws: it is a node in the tree where it
 * happened (see {@link SyntaxNode}); `trailing` is the error for text after the value, which
 * serde_json reports only once the value itself decoded.
 * @param {string} text
 * @returns {{root: JsonNode, trailing: string | undefined}}
 */
export function parseJson(text) {
  const r = new Reader(text);
  let root;
  try {
    root = r.value();
  } catch (e) {
    if (!(e instanceof Stop)) throw e;
    return { root: e.partial ?? e.node, trailing: undefined };
  }
  let trailing;
  if (r.ws() !== undefined) trailing = r.fail('trailing').node.message;
  return { root, trailing };
}
