// Copyright (c) 2026, the fencing developers
//
// tap_reporter.mjs -- a node --test reporter for test/clients/run.sh: one
// line "ok N - name" or "not ok N - name" per test (N is numbered by
// run.sh), whatever the Node version nests under a test file, and the
// failures' errors on standard error.

function isFile(data) {
  return /\.test\.m?js$/.test(data.name) || (data.file && data.name === data.file);
}

export default async function* reporter(source) {
  for await (const event of source) {
    const data = event.data;
    if (event.type === 'test:pass' && !isFile(data)) {
      yield `ok N - node ${data.name}${data.skip ? ' # SKIP' : ''}\n`;
    } else if (event.type === 'test:fail' && !isFile(data)) {
      const err = data.details && data.details.error;
      const cause = err && err.cause ? err.cause : err;
      process.stderr.write(`not ok: ${data.name}\n${cause && cause.stack ? cause.stack : cause}\n`);
      yield `not ok N - node ${data.name}\n`;
    } else if (event.type === 'test:fail' && isFile(data)) {
      const err = data.details && data.details.error;
      process.stderr.write(`test file failed: ${data.name}\n${err && err.stack ? err.stack : err}\n`);
    } else if (event.type === 'test:diagnostic') {
      process.stderr.write(`# ${data.message}\n`);
    } else if (event.type === 'test:stderr' || event.type === 'test:stdout') {
      process.stderr.write(data.message);
    }
  }
}
