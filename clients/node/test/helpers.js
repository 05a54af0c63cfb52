// Copyright (c) 2026, the fencing developers
//
// helpers.js -- what pg-fencing's tests share: pools on the server and on
// the PgBouncer that test/clients/run.sh started (PGHOST, PGPORT,
// PGDATABASE; FENCING_BOUNCER_PORT), unique names, a protected table,
// worker processes running test/worker.js, a quiet database where VACUUM
// shows what an idle transaction holds back, and a proxy whose traffic can
// be stopped.

'use strict';

const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const readline = require('node:readline');
const { Pool, Client } = require('pg');

function unique(prefix) {
  return `${prefix}-${crypto.randomBytes(5).toString('hex')}`;
}

function pool(options = {}) {
  return new Pool({ max: 4, ...options });
}

function bouncerPool(options = {}) {
  return new Pool({ max: 4, port: Number(process.env.FENCING_BOUNCER_PORT), ...options });
}

async function admin(fn) {
  const client = new Client();
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

// A protected table (id, amount, fence) with rows 1 and 2; its name.
async function ledger() {
  const name = unique('ledger').replace('-', '_');
  await admin(async (c) => {
    await c.query(`CREATE TABLE ${name} (id int PRIMARY KEY, amount int NOT NULL, fence bigint)`);
    await c.query('SELECT fencing.protect($1)', [name]);
    await c.query(`INSERT INTO ${name} VALUES (1, 0, fencing.next_token()), (2, 0, fencing.next_token())`);
  });
  return name;
}

// A database of its own, with fencing and a table "churn" that autovacuum
// leaves alone: VACUUM's horizon for a table counts only the sessions of
// the table's database, and only the tests that watch it connect to this
// one.  Its name.
async function createQuietDb() {
  const name = unique('quiet').replace('-', '_');
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const c = new Client({ database: name });
  await c.connect();
  try {
    await c.query('CREATE EXTENSION fencing');
    await c.query('CREATE TABLE churn (id int) WITH (autovacuum_enabled = off)');
  } finally {
    await c.end();
  }
  return name;
}

async function dropQuietDb(name) {
  await admin((c) => c.query(`DROP DATABASE ${name} WITH (FORCE)`));
}

// What an idle READ COMMITTED transaction holding a lock or a lease must
// hold back: nothing (DESIGN T5).
const HOLDS_BACK_NOTHING = {
  backend_xid: null, backend_xmin: null, removed: 1, 'dead but not yet removable': 0,
};

const VACUUMED = /tuples: (\d+) removed, \d+ remain, (\d+) are dead but not yet removable/;

// What session pid, idle in its transaction, holds back, seen from db (a
// client of the quiet database outside any transaction): its backend_xid
// and backend_xmin, and what VACUUM (VERBOSE) of churn does with a row
// deleted after the session's last statement.
async function heldBack(db, pid) {
  const state = 'SELECT state, backend_xid, backend_xmin FROM pg_stat_activity WHERE pid = $1';
  let row;
  for (const deadline = Date.now() + 10000; ;) {
    [row] = (await db.query(state, [pid])).rows;
    if (row && row.state === 'idle in transaction') break;
    if (Date.now() > deadline) throw new Error(`session ${pid} is not idle in transaction: ${JSON.stringify(row)}`);
    await sleep(50);
  }
  await db.query('VACUUM churn'); // rows an earlier check left, deleted before pid's statement
  await db.query('INSERT INTO churn VALUES (1)');
  await db.query('DELETE FROM churn');
  const said = [];
  const hear = (msg) => said.push(msg.message);
  db.on('notice', hear);
  try {
    await db.query('VACUUM (VERBOSE) churn');
  } finally {
    db.off('notice', hear);
  }
  const found = VACUUMED.exec(said.join('\n'));
  if (!found) throw new Error(`VACUUM (VERBOSE) said no tuple counts: ${JSON.stringify(said)}`);
  return {
    backend_xid: row.backend_xid, backend_xmin: row.backend_xmin,
    removed: Number(found[1]), 'dead but not yet removable': Number(found[2]),
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// A node process running worker.js: one command per line on stdin, one
// answer per line on stdout.
class Worker {
  constructor() {
    this.proc = spawn(process.execPath, [path.join(__dirname, 'worker.js')], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.lines = [];
    this.waiting = [];
    this.exited = null;
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const waiter = this.waiting.shift();
      if (waiter) waiter.resolve(line);
      else this.lines.push(line);
    });
    this.proc.on('exit', (code, signal) => {
      this.exited = new Error(`worker ${this.proc.pid} exited (${signal || code})`);
      for (const waiter of this.waiting.splice(0)) waiter.reject(this.exited);
    });
    this.proc.stdin.on('error', () => {});
  }

  send(line) {
    this.proc.stdin.write(`${line}\n`);
  }

  // The next line, or an error once the worker has exited without one.
  read() {
    if (this.lines.length > 0) return Promise.resolve(this.lines.shift());
    if (this.exited) return Promise.reject(this.exited);
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }

  ask(line) {
    this.send(line);
    return this.read();
  }

  kill() {
    this.proc.kill('SIGKILL');
  }
}

// A proxy in front of the server, on a unix socket of its own (host: its
// directory), whose traffic can be stopped as a network that swallows
// packets stops it: after stall() nothing it receives goes on, until
// resume().  holding is true while something it received waits there;
// ready counts the ReadyForQuery messages the server sent: one per round
// trip.
async function stallingProxy() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgstall-'));
  const port = process.env.PGPORT;
  const target = path.join(process.env.PGHOST, `.s.PGSQL.${port}`);
  const sockets = new Set();
  let held = null; // while stalled: [socket, data] not passed on yet
  const pass = (to, data) => (held !== null ? held.push([to, data]) : to.write(data));
  let ready = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    let pending = Buffer.alloc(0);
    // the server's messages: a type byte and a length each
    const count = (data) => {
      pending = Buffer.concat([pending, data]);
      while (pending.length >= 5 && pending.length >= 1 + pending.readInt32BE(1)) {
        if (pending[0] === 0x5a) ready += 1;
        pending = pending.subarray(1 + pending.readInt32BE(1));
      }
    };
    for (const [from, to] of [[client, upstream], [upstream, client]]) {
      sockets.add(from);
      from.on('error', () => {});
      from.on('close', () => { sockets.delete(from); to.destroy(); });
      from.on('data', (data) => {
        if (from === upstream) count(data);
        pass(to, data);
      });
    }
  });
  await new Promise((resolve) => server.listen(path.join(dir, `.s.PGSQL.${port}`), resolve));
  return {
    host: dir,
    get ready() {
      return ready;
    },
    get holding() {
      return held !== null && held.length > 0;
    },
    stall() {
      if (held === null) held = [];
    },
    resume() {
      const queued = held || [];
      held = null;
      for (const [to, data] of queued) to.write(data);
    },
    async close() {
      this.resume();
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = {
  unique, pool, bouncerPool, admin, ledger, sleep, Worker,
  createQuietDb, dropQuietDb, heldBack, HOLDS_BACK_NOTHING, stallingProxy,
};
