// Copyright (c) 2026, the fencing developers
//
// worker.js -- a lease holder in a process of its own (the race, the
// holder stopped with SIGSTOP).  One command per line on stdin, one answer
// per line on stdout:
//
//   acquire NAME TTL_MS   "granted TOKEN" or "busy" (tries once)
//   write TABLE ID        a batch: lease.transaction(), one UPDATE of row ID;
//                         "ok" or the pg-fencing error's name
//   write_old TABLE ID    the same UPDATE with the token set by hand
//                         (fencing.set_token), as a holder that ignores
//                         LeaseLostError would write
//   lost                  "yes" or "no"
//   release               "released" or the error's name

'use strict';

const readline = require('node:readline');
const { Pool } = require('pg');
const { Lease, FencingError, translate } = require('pg-fencing');

const pool = new Pool({ max: 3 });
let lease = null;

async function run(words) {
  const [command, arg1, arg2] = words;
  switch (command) {
    case 'acquire':
      lease = await Lease.acquire(pool, arg1, { ttlMs: Number(arg2) });
      return lease === null ? 'busy' : `granted ${lease.token}`;
    case 'write': {
      const client = await pool.connect();
      try {
        await lease.transaction(client, (c) =>
          c.query(`UPDATE ${arg1} SET amount = amount + 1 WHERE id = $1`, [Number(arg2)]));
      } finally {
        client.release();
      }
      return 'ok';
    }
    case 'write_old': {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT fencing.set_token($1)', [lease.token.toString()]);
        await client.query(`UPDATE ${arg1} SET amount = amount + 1 WHERE id = $1`, [Number(arg2)]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw translate(err) || err;
      } finally {
        client.release();
      }
      return 'ok';
    }
    case 'lost':
      return lease.lost ? 'yes' : 'no';
    case 'release':
      await lease.release();
      return 'released';
    default:
      return `unknown command ${command}`;
  }
}

// One command at a time, in order.
let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  queue = queue.then(async () => {
    let answer;
    try {
      answer = await run(line.trim().split(/\s+/));
    } catch (err) {
      answer = err instanceof FencingError ? err.name : `error ${err.message}`;
    }
    process.stdout.write(`${answer}\n`);
  });
}).on('close', () => queue.then(() => pool.end()));
