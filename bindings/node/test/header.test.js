// The binding against include/discovm.h: every function the header declares is in
// DECLARATIONS with the same signature (and called by the package, or listed in NOT_CALLED
// with the reason), every handle type, option field and status code is known. A change to
// the header fails here until src/ffi.js, and the package, follow it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { DECLARATIONS, HANDLES, NOT_CALLED, OPTION_FIELDS, STATUS_KINDS, STATUS_OK, STATUS_OTHER } from '../src/ffi.js';

const header = readFileSync(new URL('../../../include/discovm.h', import.meta.url), 'utf8')
  .replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/[^\n]*/g, '');
const defines = Object.fromEntries([...header.matchAll(/^#define (DVM_\w+) (\d+)$/gm)].map((m) => [m[1], Number(m[2])]));
const text = header.split('\n').filter((l) => !l.trim().startsWith('#')).join(' ')
  .replace('extern "C" {', '').replace(/\s+/g, ' ');
const statements = text.split(/[;{}]/).map((s) => s.trim()).filter(Boolean);

const compact = (s) => s.trim().replace(/\s+/g, ' ').replace(/\s*([*(),])\s*/g, '$1');

/** A declaration's name and its types alone (no parameter names). */
function signature(decl) {
  const m = decl.match(/^(.+?)\b(dvm_\w+)\((.*)\)$/);
  if (!m) return null;
  const params = [];
  let depth = 0;
  let start = 0;
  const list = `${m[3]},`;
  for (let i = 0; i < list.length; i++) {
    if (list[i] === '(') depth++;
    else if (list[i] === ')') depth--;
    else if (list[i] === ',' && depth === 0) {
      const p = list.slice(start, i).trim();
      params.push(/\(\*\s*\w+\)/.test(p) ? compact(p.replace(/\(\*\s*\w+\)/, '(*)')) : p === 'void' ? p : compact(p.replace(/\w+$/, '')));
      start = i + 1;
    }
  }
  return [m[2], `${compact(m[1])}(${params.join(',')})`];
}

const sources = readdirSync(new URL('../src/', import.meta.url))
  .filter((f) => f.endsWith('.js') && f !== 'ffi.js')
  .map((f) => readFileSync(new URL(`../src/${f}`, import.meta.url), 'utf8')).join('\n');

test('the binding knows every function of the header, with its signature', () => {
  const known = new Map(DECLARATIONS.map((d) => signature(d)));
  const declared = new Map(statements.filter((s) => !s.startsWith('typedef')).map(signature).filter(Boolean));
  for (const [name, sig] of declared) {
    assert.ok(known.has(name), `include/discovm.h declares ${name}, which the Node package does not know`);
    assert.equal(sig, known.get(name), `include/discovm.h declares ${name} as ${sig}; the Node package knows ${known.get(name)}`);
  }
  for (const name of known.keys()) assert.ok(declared.has(name), `the Node package knows ${name}, which include/discovm.h does not declare`);
  for (const name of known.keys()) {
    const called = new RegExp(`C\\.${name}\\(|'${name}'`).test(sources);
    if (name in NOT_CALLED) assert.ok(!called, `${name} is called, but listed as not called: ${NOT_CALLED[name]}`);
    else assert.ok(called, `the Node package knows ${name} but never calls it`);
  }
});

test('the binding knows the handle types, the options and the status codes', () => {
  const handles = statements.map((s) => s.match(/^typedef struct (dvm_\w+) \1$/)?.[1]).filter(Boolean).sort();
  assert.deepEqual(handles, HANDLES);
  assert.ok(text.includes('typedef int32_t dvm_status;'), 'dvm_status is no longer an int32_t');
  const options = text.match(/typedef struct \{ (.*?) \} dvm_session_options;/);
  assert.ok(options, 'include/discovm.h has no dvm_session_options');
  const fields = options[1].split(';').map((f) => f.trim()).filter(Boolean);
  assert.deepEqual(fields, OPTION_FIELDS, 'the fields of dvm_session_options changed');
  for (const f of OPTION_FIELDS) {
    const name = f.match(/\w+$/)[0];
    assert.ok(new RegExp(`\\b${name}:`).test(sources), `session.js does not set dvm_session_options.${name}`);
  }
  for (const [name, code] of Object.entries(defines)) {
    if (name === 'DVM_OK') assert.equal(code, STATUS_OK);
    else if (name === 'DVM_OTHER_ERROR') assert.equal(code, STATUS_OTHER);
    else assert.ok(code in STATUS_KINDS, `include/discovm.h defines ${name} = ${code}, a status the Node package has no kind for`);
  }
  assert.equal(Object.keys(defines).length, Object.keys(STATUS_KINDS).length + 2, 'the number of status codes changed');
});
