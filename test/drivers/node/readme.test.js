// Copyright (c) 2026, the fencing developers
//
// readme.test.js -- the README's JavaScript must keep working, as
// test/t/091_readme.pl keeps its SQL working: every ```js block of
// README.md (FENCING_README) runs, in order, with node and node-postgres,
// in a database of its own that holds what the README's blocks assume (the
// extension, and the ledger table of "The pattern").  Each block must exit
// 0 and print nothing on standard error.  And no example in the README
// turns a token into a JavaScript Number: tokens are above 2^53.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const pg = require('pg');

const DB = 'readme_js';
const LIMIT = { timeout: 60000 };

// [line, text] of every block of the README whose fence names one of the
// languages.
function readmeBlocks(languages) {
  const lines = fs.readFileSync(process.env.FENCING_README, 'utf8').split('\n');
  const blocks = [];
  let body = null;
  let start = 0;
  lines.forEach((line, i) => {
    const open = /^```(\w+)\s*$/.exec(line);
    if (body === null && open && languages.includes(open[1])) {
      body = [];
      start = i + 2;
    } else if (body !== null && /^```\s*$/.test(line)) {
      blocks.push([start, body.join('\n') + '\n']);
      body = null;
    } else if (body !== null) {
      body.push(line);
    }
  });
  assert.equal(body, null, 'README.md ends inside a code block');
  return blocks;
}

async function withClient(config, fn) {
  const client = new pg.Client(config);
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

test('no README example turns a token into a Number', () => {
  const blocks = readmeBlocks(['js', 'javascript', 'mjs', 'cjs', 'ts', 'typescript']);
  assert.ok(blocks.length >= 2);
  const lossy = /\bparseInt\b|\bparseFloat\b|\bNumber\s*\(|\bMath\.\w+\s*\(|[=(,:?]\s*\+\s*[A-Za-z_$]/;
  for (const [line, text] of blocks) {
    text.split('\n').forEach((code, i) => {
      assert.doesNotMatch(code, lossy, `README.md line ${line + i}: ${code}`);
    });
  }
});

test('every js block of the README runs', LIMIT, async () => {
  const blocks = readmeBlocks(['js']);
  assert.ok(blocks.length >= 2);
  const ledger = readmeBlocks(['sql']).filter(([, text]) => text.includes('CREATE TABLE ledger ('));
  assert.equal(ledger.length, 1);
  await withClient({}, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${DB}`);
    await c.query(`CREATE DATABASE ${DB}`);
  });
  await withClient({ database: DB }, async (c) => {
    await c.query('CREATE EXTENSION fencing');
    await c.query(ledger[0][1]);
  });

  for (const [line, text] of blocks) {
    const run = spawnSync(process.execPath, ['-e', text], {
      env: { ...process.env, PGDATABASE: DB },
      encoding: 'utf8',
      timeout: 30000,
    });
    assert.deepEqual([run.status, run.stderr], [0, ''], `README.md line ${line}:\n${text}`);
    if (text.includes('BigInt')) {
      assert.match(run.stdout, /^bigint true\n\{"token":"\d{17,19}"\}\n$/, `README.md line ${line}`);
    }
  }

  // the invoice block billed its customers, fenced with one token
  await withClient({ database: DB }, async (c) => {
    const { rows } = await c.query(
      "SELECT customer_id, fence FROM ledger WHERE month = '2026-12' AND customer_id IN (3, 4) ORDER BY customer_id");
    assert.deepEqual(rows.map((r) => r.customer_id), ['3', '4']);
    assert.ok(rows[0].fence !== null && rows[0].fence === rows[1].fence);
  });
});
