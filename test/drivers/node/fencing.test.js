// Copyright (c) 2026, the fencing developers
//
// fencing.test.js -- the guarantees through node-postgres (pg and pg-cursor
// from npm, the versions package-lock.json pins), which sends every query
// with values through the extended protocol: unnamed statements, named
// ones with a query's "name", and portals read in parts with pg-cursor.
// PGHOST, PGPORT and PGDATABASE name the server test/drivers/run.sh
// started.
//
// Tokens count nanoseconds since 2000 and are far above 2^53, the largest
// integer a JavaScript Number holds exactly: they must stay strings (what
// node-postgres returns for bigint) or BigInt, never Number.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { fork } = require('node:child_process');
const crypto = require('node:crypto');
const path = require('node:path');
const pg = require('pg');
const Cursor = require('pg-cursor');

const RACERS = 12;
// no test may hang the suite
const LIMIT = { timeout: 60000 };

function unique(prefix) {
  return `${prefix}-${crypto.randomBytes(6).toString('hex')}`;
}

async function connect(config) {
  const client = new pg.Client(config);
  await client.connect();
  return client;
}

// Run fn with a connected client, and end the client whatever happens.
async function withClient(fn, config) {
  const client = await connect(config);
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

// A protected table with one row (id 1, a fence already set); its name.
async function protectedTable() {
  const table = unique('ledger').replace('-', '_');
  await withClient(async (c) => {
    await c.query(`CREATE TABLE ${table} (id int PRIMARY KEY, amount numeric NOT NULL, fence bigint)`);
    await c.query('SELECT fencing.protect($1)', [table]);
    await c.query(`INSERT INTO ${table} VALUES (1, 0, fencing.next_token())`);
  });
  return table;
}

// The error a promise rejects with (it must reject).
async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail('expected the statement to fail');
}

test('L4: of 12 racing processes exactly one gets the lock', LIMIT, async () => {
  const base = unique('node-race');
  const spellings = [base, base.toUpperCase(), `  ${base} `, `${base}\u2003`];
  const racers = [];
  const tried = [];
  for (let i = 0; i < RACERS; i++) {
    const child = fork(path.join(__dirname, 'race_worker.js'),
      [spellings[i % spellings.length], i % 2 ? 'named' : 'unnamed']);
    racers.push(child);
    tried.push(new Promise((resolve) => child.once('message', resolve)));
  }
  const got = await Promise.all(tried);
  const ended = racers.map((child) => new Promise((resolve) => child.once('exit', resolve)));
  for (const child of racers) child.send('go');
  assert.deepEqual(await Promise.all(ended), new Array(RACERS).fill(0));
  assert.deepEqual(got.filter((g) => g.error), []);
  const winners = got.filter((g) => g.token !== null);
  assert.equal(winners.length, 1, JSON.stringify(got));
  assert.equal(typeof winners[0].token, 'string');
});

test('F1/F2: a stale or missing token is rejected with err.code FN001', LIMIT, async () => {
  const table = await protectedTable();
  const name = unique('node-fence');
  await withClient(async (c) => {
    await c.query('BEGIN');
    const old = (await c.query('SELECT fencing.try_lock($1) AS t', [name])).rows[0].t;
    await c.query('COMMIT');
    await c.query('BEGIN');
    const newer = (await c.query('SELECT fencing.try_lock($1) AS t', [name])).rows[0].t;
    await c.query(`UPDATE ${table} SET amount = $1, fence = $2 WHERE id = 1`, [2, newer]);
    await c.query('COMMIT');

    await c.query('BEGIN');
    let err = await rejection(
      c.query(`UPDATE ${table} SET amount = $1, fence = $2 WHERE id = 1`, [3, old]));
    assert.equal(err.code, 'FN001');
    assert.equal(err.table, table);
    assert.match(err.message, new RegExp(`stale fence token ${old}`));
    await c.query('ROLLBACK');

    await c.query('BEGIN');
    err = await rejection(c.query({
      name: 'stale_update', text: `UPDATE ${table} SET amount = $1 WHERE id = $2`, values: [4, 1],
    }));
    assert.equal(err.code, 'FN001');
    await c.query('ROLLBACK');

    const { rows } = await c.query(`SELECT amount, fence FROM ${table} WHERE id = 1`);
    assert.deepEqual(rows, [{ amount: '2', fence: newer }]);
  });
});

test('set_token: a bound token, as a string or a BigInt, counts in its transaction', LIMIT, async () => {
  const table = await protectedTable();
  const name = unique('node-set-token');
  await withClient(async (c) => {
    await c.query('BEGIN');
    const token = (await c.query('SELECT fencing.try_lock($1) AS t', [name])).rows[0].t;
    const set = await c.query('SELECT fencing.set_token($1) AS t', [token]);
    assert.equal(set.rows[0].t, token);
    await c.query(`UPDATE ${table} SET amount = $1 WHERE id = 1`, [5]);
    await c.query('COMMIT');
    let { rows } = await c.query(`SELECT fence FROM ${table} WHERE id = 1`);
    assert.equal(rows[0].fence, token);

    // the next transaction has no token (F6)
    await c.query('BEGIN');
    const err = await rejection(c.query(`UPDATE ${table} SET amount = $1 WHERE id = 1`, [6]));
    assert.equal(err.code, 'FN001');
    await c.query('ROLLBACK');

    await c.query('BEGIN');
    await c.query({ name: 'set_token', text: 'SELECT fencing.set_token($1)', values: [BigInt(token)] });
    await c.query(`DELETE FROM ${table} WHERE id = $1`, [1]);
    await c.query('COMMIT');
    ({ rows } = await c.query(`SELECT count(*)::int AS n FROM ${table}`));
    assert.equal(rows[0].n, 0);
  });
});

test('set_token: 25P01 outside a transaction block, 22023 for a token never issued', LIMIT, async () => {
  await withClient(async (c) => {
    const latest = (await c.query('SELECT fencing.next_token() AS t')).rows[0].t;
    let err = await rejection(c.query('SELECT fencing.set_token($1)', [latest]));
    assert.equal(err.code, '25P01');
    for (const bad of ['0', (BigInt(latest) + 1000000n).toString()]) {
      await c.query('BEGIN');
      err = await rejection(c.query('SELECT fencing.set_token($1)', [bad]));
      assert.equal(err.code, '22023');
      await c.query('ROLLBACK');
    }
  });
});

test('tokens are above 2^53: strings by default, BigInt on request, both round-trip', LIMIT, async () => {
  const name = unique('node-bigint');
  await withClient(async (c) => {
    await c.query('BEGIN');
    const token = (await c.query('SELECT fencing.try_lock($1) AS t', [name])).rows[0].t;
    assert.equal(typeof token, 'string');
    assert.ok(BigInt(token) > BigInt(Number.MAX_SAFE_INTEGER), token);
    const held = await c.query('SELECT fencing.held_token($1) = $2 AS same, fencing.held_token($1) AS t',
      [name, token]);
    assert.deepEqual(held.rows[0], { same: true, t: token });
    // as text a token crosses JSON intact; a BigInt cannot be serialised
    assert.equal(JSON.parse(JSON.stringify({ token })).token, token);
    assert.throws(() => JSON.stringify({ token: BigInt(token) }), TypeError);
    await c.query('COMMIT');
  });

  // a client that parses bigint as BigInt
  const types = {
    getTypeParser: (oid, format) =>
      oid === pg.types.builtins.INT8 ? BigInt : pg.types.getTypeParser(oid, format),
  };
  await withClient(async (c) => {
    await c.query('BEGIN');
    const token = (await c.query('SELECT fencing.try_lock($1) AS t', [name])).rows[0].t;
    assert.equal(typeof token, 'bigint');
    assert.ok(token > BigInt(Number.MAX_SAFE_INTEGER));
    const held = await c.query('SELECT fencing.held_token($1) AS t', [name]);
    assert.equal(held.rows[0].t, token);
    const set = await c.query('SELECT fencing.set_token($1) AS t', [token]);
    assert.equal(set.rows[0].t, token);
    await c.query('COMMIT');
  }, { types });
});

test('25P01: the autocommit warning reaches the notice handler', LIMIT, async () => {
  await withClient(async (c) => {
    const notices = [];
    c.on('notice', (n) => notices.push([n.severity, n.code, n.message]));
    const calls = [
      { text: 'SELECT fencing.try_lock($1)', values: [unique('node-auto')] },
      { name: 'auto_lease', text: 'SELECT fencing.lease($1, $2)', values: [unique('node-auto'), '30 seconds'] },
      { text: 'SELECT fencing.lock_all($1::text[], $2)', values: [[unique('node-auto')], '1 second'] },
      { text: `SELECT fencing.try_lock('${unique('node-auto')}')` },
    ];
    for (const call of calls) {
      notices.length = 0;
      await c.query(call);
      assert.deepEqual(notices.map((n) => n.slice(0, 2)), [['WARNING', '25P01']], call.text);
      assert.match(notices[0][2], /is released at the end of this statement/);
    }

    // in a transaction: no warning
    notices.length = 0;
    await c.query('BEGIN');
    await c.query('SELECT fencing.try_lock($1)', [unique('node-auto')]);
    await c.query('COMMIT');
    assert.deepEqual(notices, []);
  });
});

test('locks taken through a portal read in parts inside a savepoint', LIMIT, async () => {
  const prefix = unique('node-cursor');
  const held = async (admin, p) =>
    (await admin.query('SELECT count(*)::int AS n FROM fencing.locks WHERE name LIKE $1 AND granted',
      [`${p}%`])).rows[0].n;
  const admin = await connect();
  try {
    await withClient(async (c) => {
      await c.query('BEGIN');
      await c.query('SAVEPOINT s');
      const cursor = c.query(new Cursor(
        'SELECT i, fencing.try_lock($1 || i) AS t FROM generate_series(1, 10) AS i', [`${prefix}-a-`]));
      const first = await cursor.read(3);
      assert.deepEqual(first.map((r) => r.i), [1, 2, 3]);
      // only the rows read so far have taken their locks
      assert.equal(await held(admin, `${prefix}-a-`), 3);
      assert.equal((await cursor.read(100)).length, 7);
      assert.equal(await held(admin, `${prefix}-a-`), 10);
      // (the client runs one query at a time: the cursor's first)
      await cursor.close();
      for (const r of first) {
        const h = await c.query('SELECT fencing.held_token($1) AS t', [`${prefix}-a-${r.i}`]);
        assert.equal(h.rows[0].t, r.t);
      }
      await c.query('ROLLBACK TO SAVEPOINT s');
      assert.equal(await held(admin, `${prefix}-a-`), 0);

      await c.query('SAVEPOINT t');
      const kept = c.query(new Cursor(
        'SELECT fencing.try_lock($1 || i) AS t FROM generate_series(1, 10) AS i', [`${prefix}-b-`]));
      assert.equal((await kept.read(4)).length, 4);
      await kept.close();
      await c.query('RELEASE SAVEPOINT t');
      assert.equal(await held(admin, `${prefix}-b-`), 4);
      await c.query('COMMIT');
      assert.equal(await held(admin, `${prefix}-b-`), 0);
    });

    // a portal read in parts outside BEGIN is one implicit transaction
    // until its Sync: its first rows' locks are warned about
    await withClient(async (c) => {
      const notices = [];
      c.on('notice', (n) => notices.push(n.code));
      const cursor = c.query(new Cursor(
        'SELECT fencing.try_lock($1 || i) AS t FROM generate_series(1, 10) AS i', [`${prefix}-c-`]));
      assert.equal((await cursor.read(2)).length, 2);
      assert.equal(await held(admin, `${prefix}-c-`), 2);
      await cursor.close();
      assert.deepEqual(notices, ['25P01']);
      assert.equal(await held(admin, `${prefix}-c-`), 0);
    });
  } finally {
    await admin.end();
  }
});
