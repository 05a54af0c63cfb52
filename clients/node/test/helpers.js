// Copyright (c) 2026, the fencing developers
//
// helpers.js -- what pg-fencing's tests share: pools on the server and on
// the PgBouncer that test/clients/run.sh started (PGHOST, PGPORT,
// PGDATABASE; FENCING_BOUNCER_PORT), unique names, a protected table, and
// worker processes running test/worker.js.

'use strict';

const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
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
    readline.createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const waiter = this.waiting.shift();
      if (waiter) waiter(line);
      else this.lines.push(line);
    });
  }

  send(line) {
    this.proc.stdin.write(`${line}\n`);
  }

  read() {
    if (this.lines.length > 0) return Promise.resolve(this.lines.shift());
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  ask(line) {
    this.send(line);
    return this.read();
  }

  kill() {
    this.proc.kill('SIGKILL');
  }
}

module.exports = { unique, pool, bouncerPool, admin, ledger, sleep, Worker };
