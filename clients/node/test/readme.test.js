// Copyright (c) 2026, the fencing developers
//
// The code blocks of README.md (the one the installed package carries),
// run as a reader would run them, in a database of their own: the sql
// blocks with psql, each js block as a program of its own in the
// application directory FENCING_README_APP (where pg and pg-fencing are
// installed as the README says), each ts block the same once tsc
// --strict compiled it there (with @types/pg), in the page's order.  Only
// the node-redlock block of the side-by-side is not run (it needs a Redis
// server); it is marked so on its first line.

'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { admin } = require('./helpers');

const README = path.join(path.dirname(require.resolve('pg-fencing')), 'README.md');
const NOT_RUN = '// node-redlock with ioredis, for comparison (not run here';
const DB = 'readme_node';

test('the README blocks run', async () => {
  const app = process.env.FENCING_README_APP;
  assert.ok(app, 'FENCING_README_APP names the application directory');
  const text = fs.readFileSync(README, 'utf8');
  const blocks = [...text.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((m) => [m[1], m[2]]);
  const js = blocks.filter(([lang]) => lang === 'js').map(([, code]) => code);
  assert.ok(js.length >= 5);
  assert.equal(js.filter((code) => code.startsWith(NOT_RUN)).length, 1);
  for (const code of js) {
    assert.doesNotMatch(code, /Number\(\s*(lease\.)?token|parseInt\(\s*(lease\.)?token/);
  }

  await admin(async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${DB}`);
    await c.query(`CREATE DATABASE ${DB}`);
  });
  const env = { ...process.env, PGDATABASE: DB };
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-c', 'CREATE EXTENSION fencing'], { env });
  // the TypeScript blocks, compiled with tsc --strict before anything runs
  const ts = blocks.map(([lang], i) => (lang === 'ts' ? i : -1)).filter((i) => i >= 0);
  assert.ok(ts.length >= 1, 'the README has a TypeScript block');
  const sources = ts.map((i) => {
    const file = path.join(app, `readme_block_${i + 1}.ts`);
    fs.writeFileSync(file, blocks[i][1]);
    return file;
  });
  const compiled = spawnSync(path.join(app, 'node_modules', '.bin', 'tsc'), ['--strict', '--noUnusedLocals',
    '--target', 'es2022', '--module', 'commonjs', '--esModuleInterop', '--types', 'node',
    '--outDir', path.join(app, 'ts-out'), ...sources], { cwd: app, encoding: 'utf8', timeout: 120000 });
  assert.equal(compiled.status, 0, `tsc --strict failed on the README's TypeScript:\n${compiled.stdout}${compiled.stderr}`);
  blocks.forEach(([lang, code], i) => {
    let done;
    if (lang === 'sql') {
      done = spawnSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1'], { input: code, env, encoding: 'utf8', timeout: 60000 });
    } else if (lang === 'js' && !code.startsWith(NOT_RUN)) {
      const file = path.join(app, `readme_block_${i + 1}.js`);
      fs.writeFileSync(file, code);
      done = spawnSync(process.execPath, [file], { cwd: app, env, encoding: 'utf8', timeout: 90000 });
    } else if (lang === 'ts') {
      const file = path.join(app, 'ts-out', `readme_block_${i + 1}.js`);
      done = spawnSync(process.execPath, [file], { cwd: app, env, encoding: 'utf8', timeout: 90000 });
    } else {
      return;
    }
    assert.equal(done.status, 0, `README block ${i + 1} (${lang}) failed:\n${code}\n${done.stdout}${done.stderr}`);
  });

  const { Client } = require('pg');
  const c = new Client({ database: DB });
  await c.connect();
  try {
    const billed = await c.query("SELECT count(*)::int AS n, count(DISTINCT fence)::int AS f FROM invoices WHERE month = '2026-10'");
    assert.deepEqual(billed.rows[0], { n: 2500, f: 1 });
    const late = await c.query("SELECT count(*)::int AS n FROM invoices WHERE month = '2026-12'");
    assert.equal(late.rows[0].n, 3);
    const leases = await c.query('SELECT count(*)::int AS n FROM fencing.leases');
    assert.equal(leases.rows[0].n, 0);
  } finally {
    await c.end();
  }
});
