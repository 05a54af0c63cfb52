// Copyright (c) 2026, the fencing developers
//
// The JavaScript of the project's documentation, run as a reader would run
// it: for README.md and every page of doc/ that has ```js blocks, a
// database of its own, where the page's blocks run in order: the sql
// blocks with psql (their errors are announced, and test/t/091_readme.pl
// checks them), each js block as a program of its own in the application
// directory FENCING_README_APP, where pg and pg-fencing are installed as
// the README says.  A js block must exit 0 and print nothing on standard
// error; a block whose first line says "not run here" is skipped.  No
// example turns a token into a Number: tokens exceed 2^53.  FENCING_DOCS
// names the top of the tree (test/clients/run.sh sets it).

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { Client } = require('pg');
const { admin } = require('./helpers');

const DOCS = process.env.FENCING_DOCS || path.join(__dirname, '..', '..', '..');
const NOT_RUN = 'not run here';

function pages() {
  const doc = path.join(DOCS, 'doc');
  const found = [path.join(DOCS, 'README.md')];
  for (const f of fs.readdirSync(doc).sort()) {
    if (f.endsWith('.md')) found.push(path.join(doc, f));
  }
  return found;
}

function blocks(page) {
  const text = fs.readFileSync(page, 'utf8');
  return [...text.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((m) => [m[1], m[2]]);
}

async function query(db, sql) {
  const c = new Client({ database: db });
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
}

const CHECKS = {
  // the client billed January: every customer once, under one token
  'README.md': async (db) => {
    const [row] = await query(db, `SELECT count(*)::int AS n, count(DISTINCT fence)::int AS f,
      (SELECT count(*)::int FROM customers) AS customers FROM ledger WHERE month = '2027-01'`);
    assert.deepEqual(row, { n: row.customers, f: 1, customers: row.customers });
    assert.deepEqual(await query(db, 'SELECT count(*)::int AS n FROM fencing.leases'), [{ n: 0 }]);
  },
  // the driver example billed customers 3 and 4, fenced with one token
  'doc/reference.md': async (db) => {
    const rows = await query(db, `SELECT customer_id, fence FROM ledger WHERE month = '2026-12'
      AND customer_id IN (3, 4) ORDER BY customer_id`);
    assert.deepEqual(rows.map((r) => r.customer_id), ['3', '4']);
    assert.ok(rows[0].fence !== null && rows[0].fence === rows[1].fence);
  },
  // the queue worker took a job nobody had, and the charge went in once
  'doc/choosing.md': async (db) => {
    assert.deepEqual(await query(db, 'SELECT count(*)::int AS n FROM jobs WHERE done'), [{ n: 3 }]);
    assert.deepEqual(await query(db, "SELECT count(*)::int AS n FROM charges WHERE idempotency_key = 'order-44'"), [{ n: 1 }]);
  },
};

const withJs = pages().filter((p) => blocks(p).some(([lang]) => lang === 'js'));

test('the pages with js blocks', () => {
  const names = withJs.map((p) => path.relative(DOCS, p));
  for (const name of ['README.md', 'doc/choosing.md', 'doc/reference.md']) {
    assert.ok(names.includes(name), `${name} has js blocks`);
  }
});

test('no example turns a token into a Number', () => {
  const lossy = /\bparseInt\b|\bparseFloat\b|\bNumber\s*\(|\bMath\.\w+\s*\(|[=(,:?]\s*\+\s*[A-Za-z_$]/;
  for (const page of withJs) {
    for (const [lang, code] of blocks(page)) {
      if (lang !== 'js') continue;
      code.split('\n').forEach((line) => {
        if (/^\s*\/\//.test(line)) return;
        assert.doesNotMatch(line, lossy, `${path.relative(DOCS, page)}: ${line}`);
      });
    }
  }
});

for (const page of withJs) {
  const name = path.relative(DOCS, page);
  test(`the js blocks of ${name} run`, { timeout: 300000 }, async () => {
    const app = process.env.FENCING_README_APP;
    assert.ok(app, 'FENCING_README_APP names the application directory');
    const db = `docs_js_${name.toLowerCase().replace(/\W/g, '_')}`;
    await admin(async (c) => {
      await c.query(`DROP DATABASE IF EXISTS ${db}`);
      await c.query(`CREATE DATABASE ${db}`);
    });
    const env = { ...process.env, PGDATABASE: db };
    blocks(page).forEach(([lang, code], i) => {
      let done;
      if (lang === 'sql' && !code.trimStart().startsWith('-- fragment')) {
        done = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=0'], { input: code, env, encoding: 'utf8', timeout: 60000 });
        assert.equal(done.status, 0, `${name}: psql failed:\n${code}\n${done.stderr}`);
      } else if (lang === 'js' && !code.split('\n', 1)[0].includes(NOT_RUN)) {
        const file = path.join(app, `docs_block_${i + 1}.js`);
        fs.writeFileSync(file, code);
        done = spawnSync(process.execPath, [file], { cwd: app, env, encoding: 'utf8', timeout: 90000 });
        assert.deepEqual([done.status, done.stderr], [0, ''], `${name}: js block failed:\n${code}\n${done.stdout}`);
        if (code.includes('JSON.stringify({ token: token.toString() })')) {
          assert.match(done.stdout, /^bigint true\n\{"token":"\d{17,19}"\}\n$/, `${name}: the BigInt example`);
        }
      }
    });
    if (CHECKS[name]) await CHECKS[name](db);
  });
}
