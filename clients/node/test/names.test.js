// Copyright (c) 2026, the fencing developers
//
// Names and holders that try to break out of the statement pg-fencing
// writes: quotes, backslashes, a semicolon and SQL, placeholders, non-ASCII,
// a NUL, very long ones; also on sessions with a client encoding whose
// characters end in a backslash byte (SJIS) and without
// standard_conforming_strings.  Each reaches the server as it was given
// (checked through bound parameters), or is refused with a clear error.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Lease, tryLock, lock } = require('pg-fencing');
const { unique, pool, admin } = require('./helpers');

const HOSTILE = [
  "it's",
  'back\\slash',
  'trailing backslash\\',
  "x'); DROP TABLE canary; --",
  "\\'); DROP TABLE canary; --",
  "x' || (SELECT 'y') || '",
  '$$; DROP TABLE canary; $$',
  '$1 $2 %s ${name} {}',
  "E'\\x27'",
  'stra\u00dfe \u2603 \u{1d11e} \u8868',
  "\u8868'\\'); DROP TABLE canary; --",
  'tab\tnew\nline\r',
  '\u3000ideographic\u3000space',
  '\u00e9'.repeat(100),
  "'".repeat(200),
];

const SESSIONS = {
  UTF8: null,
  SJIS: "SET client_encoding = 'SJIS'; SET standard_conforming_strings = off",
};

// The token of the lock that session pid holds on name, looked up with
// name as a bound parameter.
async function holding(pid, name) {
  const { rows } = await admin((c) => c.query(
    'SELECT token FROM fencing.locks WHERE pid = $1 AND granted AND name = fencing.normalize_name($2)',
    [pid, name]));
  return rows.length === 1 ? BigInt(rows[0].token) : null;
}

test.before(() => admin((c) => c.query('CREATE TABLE IF NOT EXISTS canary (id int)')));
test.after(async () => {
  const { rows } = await admin((c) => c.query("SELECT to_regclass('canary') IS NOT NULL AS there"));
  assert.equal(rows[0].there, true, 'a name dropped the canary table');
});

for (const [encoding, setup] of Object.entries(SESSIONS)) {
  test(`hostile names reach the server as given (${encoding})`, async () => {
    const p = pool();
    if (setup) p.on('connect', (c) => c.query(setup));
    const client = new Client();
    await client.connect();
    try {
      if (setup) await client.query(setup);
      for (const c of [client, p]) {
        const shown = await c.query("SELECT current_setting('client_encoding') AS enc," +
          " current_setting('standard_conforming_strings') AS scs");
        assert.deepEqual(shown.rows[0], setup ? { enc: 'SJIS', scs: 'off' } : { enc: 'UTF8', scs: 'on' });
      }
      for (const name of HOSTILE) {
        await client.query('BEGIN');
        const token = await tryLock(client, name);
        assert.ok(token !== null && await holding(client.processID, name) === token, name);
        await client.query('COMMIT');
        await client.query('BEGIN');
        assert.equal(await holding(client.processID, name), null);
        const waited = await lock(client, name, { timeoutMs: 1000 });
        assert.equal(await holding(client.processID, name), waited, name);
        await client.query('COMMIT');
        const lease = await Lease.acquire(p, name, { holder: name, renew: false });
        try {
          const { rows } = await admin((c) => c.query(
            'SELECT token, holder FROM fencing.leases WHERE name = fencing.normalize_name($1)', [name]));
          assert.deepEqual([BigInt(rows[0].token), rows[0].holder], [lease.token, name], name);
          await client.query('BEGIN');
          assert.equal(await lease.use(client), lease.token);
          const set = await client.query("SELECT current_setting('fencing.token') AS t");
          assert.equal(set.rows[0].t, lease.token.toString());
          await client.query('COMMIT');
          assert.equal(await lease.owned(), true);
        } finally {
          await lease.release();
        }
      }
    } finally {
      await client.end();
      await p.end();
    }
  });
}

test('a NUL is refused before anything is sent', async () => {
  const p = pool();
  const client = new Client();
  await client.connect();
  const nul = `${unique('nul')}\u0000'); DROP TABLE canary; --`;
  const refused = (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_VALUE' &&
    /NUL/.test(err.message);
  try {
    await client.query('BEGIN');
    await assert.rejects(tryLock(client, nul), refused);
    await assert.rejects(lock(client, nul, { timeoutMs: 1000 }), refused);
    await assert.rejects(Lease.acquire(p, nul), refused);
    await assert.rejects(Lease.acquire(p, unique('nul'), { holder: 'a\u0000b' }), refused);
    // nothing reached the server: the transaction is still fine
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1);
    await client.query('ROLLBACK');
    const { rows } = await p.query("SELECT count(*)::int AS n FROM fencing.leases WHERE name LIKE 'nul-%'");
    assert.equal(rows[0].n, 0);
  } finally {
    await client.end();
    await p.end();
  }
});

test('names must be strings', async () => {
  const client = new Client();
  await client.connect();
  try {
    await client.query('BEGIN');
    await assert.rejects(tryLock(client, 42), TypeError);
    await assert.rejects(lock(client, { toString: () => "x') --" }), TypeError);
    await client.query('ROLLBACK');
  } finally {
    await client.end();
  }
});

test('names over the limit get the server\'s error', async () => {
  const client = new Client();
  await client.connect();
  try {
    for (const name of ['x'.repeat(5000), "\u00e9'\\".repeat(2000), '\u00e9'.repeat(101)]) {
      await client.query('BEGIN');
      await assert.rejects(tryLock(client, name), (err) => err.code === '42622');
      await client.query('ROLLBACK');
    }
  } finally {
    await client.end();
  }
});
